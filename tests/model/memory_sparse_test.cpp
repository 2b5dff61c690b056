// Sparse QSA (r in {2, 4, 8}) through the real hybrid memory's pools and tails, against the plain reference:
// one sequence in uneven ubatches, and two sequences interleaved in one unified cache (cells of different
// sequences alternate, so pools are not runs of consecutive cells); and a sliding-window memory on a dense model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <random>

#include "gguf/reader.h"
#include "memory/hybrid_memory.h"
#include "model/qwen4exp/forward.h"
#include "model/qwen4exp/model.h"
#include "reference_forward.h"
#include "tiny_model.h"

namespace offgrid::model::qwen4exp {
namespace {

struct Built {
    std::vector<uint8_t> bytes;
    Model model;
};

Built build(uint32_t ratio) {
    test::TinyConfig c;
    c.ratio = ratio;
    c.top_k = 8 * ratio;
    std::vector<uint8_t> bytes = test::tiny_model(c).build();
    Model m = Model::from_reader(gguf::Reader::from_memory(bytes.data(), bytes.size(), "tiny"));
    return {std::move(bytes), std::move(m)};
}

memory::MemoryParams params(const Model & m, bool unified, uint32_t n_seq) {
    memory::MemoryParams p;
    p.shape = m.cache_shape(tensor::ElemType::F32, tensor::ElemType::F32);
    p.n_ctx = 4096;
    p.n_seq_max = n_seq;
    p.unified = unified;
    p.n_ubatch = 64;
    p.kpool = m.hparams().kpool;
    p.n_vocab = m.hparams().n_vocab;
    return p;
}

// Decodes a batch; returns the output rows by batch index.
std::vector<std::vector<float>> decode(const Model & m, memory::HybridMemory & mem, const memory::Batch & b) {
    const auto r = mem.begin(b);
    EXPECT_EQ(r.status, memory::DecodeStatus::Ok) << r.message;
    const uint32_t V = m.hparams().n_vocab;
    std::vector<std::vector<float>> rows(b.tokens.size());
    while (mem.has_next()) {
        const memory::Plan & plan = mem.apply();
        const auto logits = forward(m, mem.params().shape, plan, mem);
        size_t k = 0;
        for (const auto & tp : plan.tokens) {
            if (!tp.output) continue;
            rows[tp.index].assign(logits.begin() + k * V, logits.begin() + (k + 1) * V);
            ++k;
        }
    }
    mem.finish();
    return rows;
}

std::vector<int32_t> tokens(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(n);
    for (auto & x : t) x = 1 + static_cast<int32_t>(rng() % 63);
    return t;
}

double diff_rows(const std::vector<float> & ref, size_t t, const std::vector<float> & row) {
    const size_t V = row.size();
    double d = 0;
    for (size_t i = 0; i < V; ++i) d = std::max(d, std::fabs(double(ref[t * V + i]) - row[i]));
    return d;
}

// Sequences whose pool selections are decided by a clear margin (see forward_test.cpp).
std::vector<int32_t> well_conditioned(const Model & m, size_t n, uint32_t seed, std::vector<float> & ref) {
    const double min_gap = n > 1000 ? 2e-6 : 1e-5;
    for (uint32_t s = 0; s < 8; ++s) {
        auto t = tokens(n, seed + 1000 * s);
        test::ReferenceOptions opt;
        ref = test::reference_forward(m, t, opt);
        if (opt.min_selection_gap >= min_gap) return t;
    }
    ADD_FAILURE() << "no well-conditioned token sequence";
    return {};
}

class MemorySparse : public ::testing::TestWithParam<uint32_t> {};

TEST_P(MemorySparse, OneSequenceInUnevenUbatches) {
    const Built b = build(GetParam());
    std::vector<float> ref;
    const auto toks = well_conditioned(b.model, 2048, 31, ref);
    memory::HybridMemory mem(params(b.model, false, 1));
    double worst = 0;
    size_t done = 0;
    const size_t chunks[] = {1, 7, 30, 64, 3, 95};
    for (size_t c = 0; done < toks.size(); ++c) {
        const size_t n = std::min(chunks[c % 6], toks.size() - done);
        memory::Batch batch;
        batch.tokens.assign(toks.begin() + done, toks.begin() + done + n);
        batch.output.assign(n, 1);
        const auto rows = decode(b.model, mem, batch);
        for (size_t i = 0; i < n; ++i) worst = std::max(worst, diff_rows(ref, done + i, rows[i]));
        done += n;
    }
    ASSERT_EQ(done, toks.size());
    std::printf("[memory sparse] r=%u one sequence of %zu: max |diff| %.3g\n", GetParam(), toks.size(), worst);
    EXPECT_LE(worst, 1e-4);
}

TEST_P(MemorySparse, TwoInterleavedSequencesInOneUnifiedCache) {
    const Built b = build(GetParam());
    std::vector<float> ref0, ref1;
    const auto t0 = well_conditioned(b.model, 150, 41, ref0);
    const auto t1 = well_conditioned(b.model, 150, 43, ref1);
    memory::HybridMemory mem(params(b.model, true, 2));
    double worst = 0;
    // Alternate small groups of each sequence in one batch, so their cells interleave.
    for (size_t done = 0; done < 150; done += 10) {
        memory::Batch batch;
        for (size_t i = 0; i < 10; ++i) {
            batch.tokens.push_back(t0[done + i]);
            batch.seqs.push_back({0});
            batch.tokens.push_back(t1[done + i]);
            batch.seqs.push_back({1});
        }
        batch.output.assign(batch.tokens.size(), 1);
        const auto rows = decode(b.model, mem, batch);
        for (size_t i = 0; i < 10; ++i) {
            worst = std::max(worst, diff_rows(ref0, done + i, rows[2 * i]));
            worst = std::max(worst, diff_rows(ref1, done + i, rows[2 * i + 1]));
        }
    }
    std::printf("[memory sparse] r=%u two interleaved sequences: max |diff| %.3g\n", GetParam(), worst);
    EXPECT_LE(worst, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Ratios, MemorySparse, ::testing::Values(2u, 4u, 8u));

}  // namespace
}  // namespace offgrid::model::qwen4exp

namespace offgrid::model::qwen4exp {
namespace {

// A sliding-window memory on a dense model: attention reads only the cells of the token's window
// (TokenPlan::first_visible), as the reference does with a window of the same size.
TEST(WindowedMemory, DenseAttentionReadsOnlyTheWindow) {
    test::TinyConfig c;
    c.ratio = 0;  // dense attention (a window and k-pools do not mix)
    c.top_k = 16;
    const std::vector<uint8_t> bytes = test::tiny_model(c).build();
    const Model m = Model::from_reader(gguf::Reader::from_memory(bytes.data(), bytes.size(), "tiny-dense"));
    const size_t window = 24, n = 300;
    const auto toks = tokens(n, 5);
    test::ReferenceOptions opt;
    opt.window = window;
    const std::vector<float> ref = test::reference_forward(m, toks, opt);
    const std::vector<float> full = test::reference_forward(m, toks);

    memory::MemoryParams p = params(m, false, 1);
    p.window.type = memory::WindowType::Standard;
    p.window.n_swa = window;
    memory::HybridMemory mem(p);
    double worst = 0, vs_full = 0;
    size_t done = 0;
    const size_t chunks[] = {5, 1, 40, 17};
    for (size_t k = 0; done < n; ++k) {
        const size_t len = std::min(chunks[k % 4], n - done);
        memory::Batch batch;
        batch.tokens.assign(toks.begin() + done, toks.begin() + done + len);
        batch.output.assign(len, 1);
        const auto rows = decode(m, mem, batch);
        for (size_t i = 0; i < len; ++i) {
            worst = std::max(worst, diff_rows(ref, done + i, rows[i]));
            vs_full = std::max(vs_full, diff_rows(full, done + i, rows[i]));
        }
        done += len;
    }
    std::printf("[windowed memory] window %zu, %zu tokens: max |diff| %.3g vs windowed reference, %.3g vs full\n",
                window, n, worst, vs_full);
    EXPECT_LE(worst, 1e-4);
    EXPECT_GT(vs_full, 1e-3);  // the window really cut something
}

}  // namespace
}  // namespace offgrid::model::qwen4exp
