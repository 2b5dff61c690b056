// Batch invariance on llama.cpp-quantised models (the quantised golden set: q4_K q5_K q6_K q2_K q3_K q4_0
// q5_0 q5_1 iq4_nl iq4_xs matrices, mixed with f16 and f32): a sequence's logits are bit-identical whether it
// is decoded alone or among other sequences in the same calls, with 1 or 2 threads and any micro-batch size,
// through the quantised kernels of the active ISA level (vec_dot and dot_tile of every type).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/shared_dir.h"
#include "offgrid/context.h"
#include "offgrid/system.h"

namespace {

using offgrid::BatchToken;

int32_t token_of(int32_t seq, int i) { return 1 + (i * (5 + 2 * seq) + 11 * seq) % 500; }

constexpr int kPrompt[3] = {40, 23, 37};
constexpr int kSteps = 4;

// Every logit row of sequence 0, in position order; sequences 1 and 2 share the calls when `others`.
std::vector<float> run(const std::shared_ptr<const offgrid::Model> & model, bool others, int threads,
                       uint32_t n_ubatch) {
    offgrid::ContextParams p;
    p.n_ctx = 512;
    p.n_seq_max = 3;
    p.n_ubatch = n_ubatch;
    p.n_threads = threads;
    offgrid::Context ctx(model, p);
    const int n_seq = others ? 3 : 1;
    const size_t n_vocab = static_cast<size_t>(model->n_vocab());
    std::vector<float> out;
    auto decode = [&](const std::vector<BatchToken> & batch) {
        const auto r = ctx.decode(batch);
        EXPECT_TRUE(r.ok()) << r.message;
        int32_t row = 0;
        for (const auto & t : batch) {
            if (!t.output) continue;
            if (t.seqs[0] == 0) out.insert(out.end(), ctx.logits(row), ctx.logits(row) + n_vocab);
            ++row;
        }
    };
    std::vector<BatchToken> batch;
    for (int i = 0; i < 40; ++i) {
        for (int s = 0; s < n_seq; ++s) {
            if (i < kPrompt[s]) batch.push_back({token_of(s, i), i, {s}, true});
        }
    }
    decode(batch);
    for (int k = 0; k < kSteps; ++k) {
        batch.clear();
        for (int s = n_seq - 1; s >= 0; --s) batch.push_back({token_of(s, kPrompt[s] + k), kPrompt[s] + k, {s}, true});
        decode(batch);
    }
    return out;
}

size_t differing(const std::vector<float> & a, const std::vector<float> & b) {
    if (a.size() != b.size()) return a.size() + b.size();
    size_t n = 0;
    for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return n;
}

class QuantBatchInvariance : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantBatchInvariance, SequenceAloneEqualsSequenceAmongOthers) {
    OFFGRID_REQUIRE_SHARED();
    const std::string path = offgrid::test::shared_dir() + "/golden/quant/models/" + GetParam() + ".gguf";
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
    const auto model = offgrid::Model::load(path);
    const auto alone = run(model, false, 1, 512);
    ASSERT_EQ(alone.size(), static_cast<size_t>(kPrompt[0] + kSteps) * model->n_vocab());
    EXPECT_EQ(differing(alone, run(model, false, 2, 512)), 0u) << "alone, 2 threads";
    EXPECT_EQ(differing(alone, run(model, true, 1, 512)), 0u) << "among others, 1 thread";
    EXPECT_EQ(differing(alone, run(model, true, 2, 7)), 0u) << "among others, ubatches of 7, 2 threads";
    EXPECT_EQ(differing(alone, run(model, false, 2, 5)), 0u) << "alone, ubatches of 5, 2 threads";
}

INSTANTIATE_TEST_SUITE_P(QuantisedModels, QuantBatchInvariance,
                         ::testing::Values("q-Q4_K_M", "q-Q5_K_M", "q-IQ4_XS", "q-Q2_K"),
                         [](const auto & info) {
                             std::string n = info.param;
                             for (char & c : n) c = c == '-' ? '_' : c;
                             return n;
                         });


// The experts' q4_K matrices in 16-row groups (offgrid::set_expert_rows16) give the file layout's logits, bit for
// bit, alone and among other sequences. Run again under OFFGRID_QUANT_ACT=int8 (CMake), where the groups are made
// and their products of a few tokens take the rows16 product; elsewhere the flag changes nothing.
TEST(ExpertRows16, SameLogitsAsTheFilesLayout) {
    OFFGRID_REQUIRE_SHARED();
    const std::string path = offgrid::test::shared_dir() + "/golden/quant/models/q-Q4_K_M.gguf";
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
    const auto plain = offgrid::Model::load(path);
    offgrid::set_expert_rows16(true);
    const bool grouped = offgrid::expert_rows16();
    const auto model = offgrid::Model::load(path);
    offgrid::set_expert_rows16(false);
    EXPECT_EQ(differing(run(plain, false, 1, 512), run(model, false, 1, 512)), 0u) << "alone";
    EXPECT_EQ(differing(run(plain, true, 2, 7), run(model, true, 2, 7)), 0u) << "among others, ubatches of 7";
    if (!grouped) GTEST_SKIP() << "the groups take effect with the int8 mode and AVX-512 VNNI only (compared anyway)";
}

}  // namespace
