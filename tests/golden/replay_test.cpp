// Every (model, workload) pair of the golden set, run through `offgrid replay` exactly as a user would, and
// compared row by row with the reference record: same rows in the same order, every logit within 1e-4, same
// argmax (lowest index among equal maxima, as the golden README defines it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "common/shared_dir.h"
#include "runtime/logrec.h"

namespace fs = std::filesystem;
using offgrid::runtime::Logrec;

namespace {

int argmax(const std::vector<float> & v) {
    return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::vector<std::string> golden_pairs() {
    std::vector<std::string> out;
    if (!offgrid::test::have_shared()) {
        return {"none"};
    }
    for (const auto & e : fs::directory_iterator(offgrid::test::shared_dir() + "/golden/expected")) {
        if (e.path().extension() == ".bin") out.push_back(e.path().stem().string());
    }
    std::sort(out.begin(), out.end());
    return out;
}

class GoldenReplay : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenReplay, MatchesReferenceLogits) {
    OFFGRID_REQUIRE_SHARED();
    const std::string pair = GetParam();
    const std::string model = pair.substr(0, pair.find("__"));
    const std::string workload = pair.substr(pair.find("__") + 2);
    const std::string g = offgrid::test::shared_dir() + "/golden";

    // Workloads write their state files into the working directory: give each run a fresh one.
    const fs::path dir = fs::temp_directory_path() / ("offgrid_golden_" + pair);
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string cmd = "cd '" + dir.string() + "' && '" OFFGRID_BINARY "' replay '" + g + "/models/" + model +
                            ".gguf' '" + g + "/workloads/" + workload + ".txt' -b out.bin -o out.txt 2>err.txt";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

    const Logrec want = Logrec::read(g + "/expected/" + pair + ".bin");
    const Logrec got = Logrec::read((dir / "out.bin").string());
    ASSERT_EQ(got.n_vocab, want.n_vocab);
    ASSERT_EQ(got.rows.size(), want.rows.size());
    double worst = 0;
    for (size_t r = 0; r < want.rows.size(); ++r) {
        const auto & a = want.rows[r];
        const auto & b = got.rows[r];
        ASSERT_EQ(b.seq, a.seq) << "row " << r;
        ASSERT_EQ(b.pos, a.pos) << "row " << r;
        ASSERT_EQ(b.tok, a.tok) << "row " << r;
        for (size_t i = 0; i < a.logits.size(); ++i) {
            worst = std::max(worst, static_cast<double>(std::fabs(a.logits[i] - b.logits[i])));
        }
        EXPECT_EQ(argmax(b.logits), argmax(a.logits)) << "row " << r << " (seq " << a.seq << ", pos " << a.pos << ")";
    }
    EXPECT_LE(worst, 1e-4);
    std::printf("[golden] %s: %zu rows, max |diff| %.3g\n", pair.c_str(), want.rows.size(), worst);
    fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(AllPairs, GoldenReplay, ::testing::ValuesIn(golden_pairs()),
                         [](const auto & info) {
                             std::string n = info.param;
                             std::replace(n.begin(), n.end(), '-', '_');
                             return n;
                         });

}  // namespace
