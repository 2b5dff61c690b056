// Batch invariance, the promise of docs/kernels.md: a sequence's logits are bit-identical whether it is decoded
// alone or inside micro-batches shared with other sequences, with 1 or 2 threads, through every kernel of the
// active ISA level (SIMD matmul tiles, activation quantisation per token row, attention, recurrence). Run on an
// F32 and a Q8_0 model, with per-sequence streams and with one unified stream.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "model/qwen4exp/gen_model.h"
#include "offgrid/context.h"
#include "tensor/types.h"

namespace {

using offgrid::BatchToken;

std::shared_ptr<const offgrid::Model> model_of(offgrid::tensor::ElemType type) {
    offgrid::model::qwen4exp::GenConfig cfg = offgrid::model::qwen4exp::gen_preset("tiny");
    cfg.n_ctx = 1024;
    cfg.n_embd = 128;       // whole SIMD vectors and Q8_0 blocks, several row tiles per matrix
    cfg.head_dim = 32;
    cfg.weight_type = type;
    const auto path = (std::filesystem::temp_directory_path() /
                       ("offgrid_batch_invariance_" + std::to_string(getpid()) + "_" +
                        std::to_string(static_cast<int>(type)) + ".gguf")).string();
    offgrid::model::qwen4exp::generate_model(cfg).write_file(path);
    auto model = offgrid::Model::load(path);
    std::filesystem::remove(path);  // the mapping stays valid
    return model;
}

int32_t token_of(int32_t seq, int i) { return 1 + (i * (7 + 2 * seq) + 3 * seq) % 200; }

constexpr int kPrompt[3] = {45, 30, 61};  // prompt lengths of sequences 0, 1, 2
constexpr int kSteps = 6;                 // one-token decode steps after the prompt

// Decodes sequence 0 (and, when `others`, sequences 1 and 2 in the same calls, interleaved token by token) and
// returns every logit row of sequence 0 in position order.
std::vector<float> run(const std::shared_ptr<const offgrid::Model> & model, bool others, int threads, bool unified,
                       uint32_t n_ubatch) {
    offgrid::ContextParams p;
    p.n_ctx = 1024;
    p.n_seq_max = 3;
    p.unified = unified;
    p.n_ubatch = n_ubatch;
    p.n_threads = threads;
    offgrid::Context ctx(model, p);
    const int n_seq = others ? 3 : 1;
    const size_t n_vocab = static_cast<size_t>(model->n_vocab());
    std::vector<float> out;
    auto collect = [&](const std::vector<BatchToken> & batch) {
        const auto r = ctx.decode(batch);
        EXPECT_TRUE(r.ok()) << r.message;
        int32_t row = 0;
        for (const auto & t : batch) {
            if (!t.output) continue;
            if (t.seqs[0] == 0) out.insert(out.end(), ctx.logits(row), ctx.logits(row) + n_vocab);
            ++row;
        }
    };
    // The prompts: one call, tokens of the sequences interleaved, every token an output.
    std::vector<BatchToken> batch;
    for (int i = 0; i < 64; ++i) {
        for (int s = 0; s < n_seq; ++s) {
            if (i < kPrompt[s]) batch.push_back({token_of(s, i), i, {s}, true});
        }
    }
    collect(batch);
    // Decode steps: one token per sequence per call.
    for (int k = 0; k < kSteps; ++k) {
        batch.clear();
        for (int s = n_seq - 1; s >= 0; --s) batch.push_back({token_of(s, kPrompt[s] + k), kPrompt[s] + k, {s}, true});
        collect(batch);
    }
    return out;
}

void expect_same_bits(const std::vector<float> & a, const std::vector<float> & b, const std::string & what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    ASSERT_FALSE(a.empty());
    size_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << a.size() << " logits differ";
}

class BatchInvariance : public ::testing::TestWithParam<offgrid::tensor::ElemType> {};

TEST_P(BatchInvariance, SequenceAloneEqualsSequenceAmongOthers) {
    const auto model = model_of(GetParam());
    for (bool unified : {false, true}) {
        const std::string mode = unified ? "unified" : "per-sequence streams";
        const auto alone = run(model, false, 1, unified, 512);
        ASSERT_EQ(alone.size(), static_cast<size_t>(kPrompt[0] + kSteps) * model->n_vocab());
        expect_same_bits(alone, run(model, false, 2, unified, 512), mode + ", alone, 2 threads");
        expect_same_bits(alone, run(model, true, 1, unified, 512), mode + ", among others, 1 thread");
        expect_same_bits(alone, run(model, true, 2, unified, 512), mode + ", among others, 2 threads");
        expect_same_bits(alone, run(model, true, 2, unified, 7), mode + ", among others, ubatches of 7, 2 threads");
        expect_same_bits(alone, run(model, false, 1, unified, 5), mode + ", alone, ubatches of 5");
    }
}

INSTANTIATE_TEST_SUITE_P(WeightTypes, BatchInvariance,
                         ::testing::Values(offgrid::tensor::ElemType::F32, offgrid::tensor::ElemType::Q8_0),
                         [](const auto & info) { return std::string(offgrid::tensor::traits(info.param).name); });

}  // namespace
