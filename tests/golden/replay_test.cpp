// Every (model, workload) pair of the golden set, run through `offgrid replay` exactly as a user would, and
// compared row by row with the reference record: same rows in the same order, every logit within 1e-4, same
// argmax (lowest index among equal maxima, as the golden README defines it).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "common/shared_dir.h"
#include "golden/logit_compare.h"

namespace fs = std::filesystem;
using offgrid::tools::Logrec;

namespace {

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

    const Logrec want = Logrec::read(g + "/expected/" + pair + ".bin");
    const Logrec got = offgrid::test::run_replay(g + "/models/" + model + ".gguf", g + "/workloads/" + workload + ".txt", pair);
    const auto diffs = offgrid::test::compare_records(want, got);
    ASSERT_EQ(diffs.size(), want.rows.size());
    double worst = 0;
    for (size_t r = 0; r < diffs.size(); ++r) {
        worst = std::max(worst, diffs[r].max_abs);
        EXPECT_EQ(diffs[r].argmax_got, diffs[r].argmax_want)
            << "row " << r << " (seq " << want.rows[r].seq << ", pos " << want.rows[r].pos << ")";
    }
    EXPECT_LE(worst, 1e-4);
    std::printf("[golden] %s: %zu rows, max |diff| %.3g\n", pair.c_str(), want.rows.size(), worst);
}

INSTANTIATE_TEST_SUITE_P(AllPairs, GoldenReplay, ::testing::ValuesIn(golden_pairs()),
                         [](const auto & info) {
                             std::string n = info.param;
                             std::replace(n.begin(), n.end(), '-', '_');
                             return n;
                         });

}  // namespace
