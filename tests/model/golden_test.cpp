// The golden check: replay the single-sequence golden workloads through the forward on the test fixture
// memory and compare every logit row with the reference records (within 1e-4, same argmax).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/shared_dir.h"
#include "model/qwen4exp/model.h"
#include "test_memory.h"

namespace offgrid::model::qwen4exp {
namespace {

struct LogRow {
    int32_t step, seq, pos, tok;
    std::vector<float> logits;
};

std::vector<LogRow> read_logrec(const std::string & path, int32_t & width) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path);
    char magic[8];
    int32_t reserved;
    in.read(magic, 8);
    in.read(reinterpret_cast<char *>(&width), 4);
    in.read(reinterpret_cast<char *>(&reserved), 4);
    if (!in || std::memcmp(magic, "LOGREC01", 8) != 0) throw std::runtime_error("bad LOGREC01 header in " + path);
    std::vector<LogRow> rows;
    for (;;) {
        LogRow r;
        int32_t head[4];
        if (!in.read(reinterpret_cast<char *>(head), 16)) break;
        r.step = head[0], r.seq = head[1], r.pos = head[2], r.tok = head[3];
        r.logits.resize(width);
        in.read(reinterpret_cast<char *>(r.logits.data()), 4 * width);
        if (!in) throw std::runtime_error("truncated record in " + path);
        rows.push_back(std::move(r));
    }
    return rows;
}

// rand(N, SEED) of golden/README.md.
std::vector<int32_t> golden_rand(int n, uint64_t seed, uint32_t n_vocab) {
    const uint64_t a = 6364136223846793005ull, c = 1442695040888963407ull;
    uint64_t x = seed * a + c;
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
        x = x * a + c;
        out.push_back(static_cast<int32_t>(1 + (x >> 33) % (n_vocab - 1)));
    }
    return out;
}

int argmax(const float * v, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; ++i) {
        if (v[i] > v[best]) best = i;
    }
    return static_cast<int>(best);
}

std::string model_path(const std::string & name) { return test::shared_dir() + "/golden/models/" + name + ".gguf"; }

// Compares produced rows (pos, tok, logits) with the expected record in order.
void compare(const std::string & what, const std::vector<LogRow> & expected, const std::vector<LogRow> & got,
             double & max_diff) {
    ASSERT_EQ(expected.size(), got.size()) << what;
    max_diff = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
        const auto & e = expected[i];
        const auto & g = got[i];
        ASSERT_EQ(e.pos, g.pos) << what << " row " << i;
        ASSERT_EQ(e.tok, g.tok) << what << " row " << i;
        ASSERT_EQ(e.logits.size(), g.logits.size());
        double row_max = 0;
        for (size_t j = 0; j < e.logits.size(); ++j) {
            ASSERT_TRUE(std::isfinite(g.logits[j])) << what << " row " << i;
            row_max = std::max(row_max, std::fabs(double(e.logits[j]) - double(g.logits[j])));
        }
        max_diff = std::max(max_diff, row_max);
        EXPECT_LE(row_max, 1e-4) << what << " row " << i << " pos " << e.pos;
        EXPECT_EQ(argmax(e.logits.data(), e.logits.size()), argmax(g.logits.data(), g.logits.size()))
            << what << " row " << i;
    }
}

// Decodes `tokens` in ubatches of `n_ubatch`, every token an output row.
void decode_all(test::TestMemory & mem, const std::vector<int32_t> & tokens, size_t n_ubatch,
                std::vector<LogRow> & rows, uint32_t n_vocab) {
    for (size_t s = 0; s < tokens.size(); s += n_ubatch) {
        const size_t n = std::min(n_ubatch, tokens.size() - s);
        const uint32_t first = mem.size();
        std::vector<int32_t> ub(tokens.begin() + s, tokens.begin() + s + n);
        const auto logits = mem.decode(ub, std::vector<bool>(n, true));
        for (size_t i = 0; i < n; ++i) {
            rows.push_back({0, 0, static_cast<int32_t>(first + i), ub[i],
                            std::vector<float>(logits.begin() + i * n_vocab, logits.begin() + (i + 1) * n_vocab)});
        }
    }
}

class Smoke : public ::testing::TestWithParam<const char *> {};

TEST_P(Smoke, MatchesReferenceLogits) {
    OFFGRID_REQUIRE_SHARED();
    const std::string name = GetParam();
    const Model m = Model::load(model_path(name));
    const uint32_t V = m.hparams().n_vocab;
    test::TestMemory mem(m, 256, m.hparams().kpool);
    std::vector<LogRow> got;
    decode_all(mem, golden_rand(40, 1, V), 512, got, V);
    for (int g = 0; g < 4; ++g) {
        const int32_t next = argmax(got.back().logits.data(), V);
        decode_all(mem, {next}, 1, got, V);
    }
    int32_t width = 0;
    const auto expected = read_logrec(test::shared_dir() + "/golden/expected/" + name + "__01_smoke.bin", width);
    ASSERT_EQ(static_cast<uint32_t>(width), V);
    double max_diff = 0;
    compare(name + " 01_smoke", expected, got, max_diff);
    std::printf("[golden] %s 01_smoke: %zu rows, max |diff| %.3g\n", name.c_str(), got.size(), max_diff);
}

INSTANTIATE_TEST_SUITE_P(Golden, Smoke, ::testing::Values("tiny-r1", "tiny-nople-r1", "tiny-dense", "long-r1"),
                         [](const auto & info) {
                             std::string s = info.param;
                             for (char & c : s) if (c == '-') c = '_';
                             return s;
                         });

// 02_seq_batch (one ubatch of 64) and 05_seq_ubatch5 (ubatches of 5): 30 random, EOS, 33 random tokens.
class SeqBatch : public ::testing::TestWithParam<std::tuple<const char *, int>> {};

TEST_P(SeqBatch, MatchesReferenceLogits) {
    OFFGRID_REQUIRE_SHARED();
    const std::string name = std::get<0>(GetParam());
    const int n_ubatch = std::get<1>(GetParam());
    const std::string workload = n_ubatch == 5 ? "05_seq_ubatch5" : "02_seq_batch";
    const Model m = Model::load(model_path(name));
    const uint32_t V = m.hparams().n_vocab;
    std::vector<int32_t> tokens = golden_rand(30, 1, V);
    tokens.push_back(0);
    const auto tail = golden_rand(33, 2, V);
    tokens.insert(tokens.end(), tail.begin(), tail.end());
    test::TestMemory mem(m, 256, m.hparams().kpool);
    std::vector<LogRow> got;
    decode_all(mem, tokens, n_ubatch, got, V);
    int32_t width = 0;
    const auto expected = read_logrec(test::shared_dir() + "/golden/expected/" + name + "__" + workload + ".bin", width);
    double max_diff = 0;
    compare(name + " " + workload, expected, got, max_diff);
    std::printf("[golden] %s %s: %zu rows, max |diff| %.3g\n", name.c_str(), workload.c_str(), got.size(), max_diff);
}

INSTANTIATE_TEST_SUITE_P(Golden, SeqBatch,
                         ::testing::Combine(::testing::Values("tiny-r1", "tiny-nople-r1", "tiny-dense"),
                                            ::testing::Values(64, 5)),
                         [](const auto & info) {
                             std::string s = std::get<0>(info.param);
                             for (char & c : s) if (c == '-') c = '_';
                             return s + "_ubatch" + std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace offgrid::model::qwen4exp
