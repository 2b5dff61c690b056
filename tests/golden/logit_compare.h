// The golden tests' comparer: runs `offgrid replay` on a (model, workload) pair as a user would, and compares
// two logit records row by row (same rows in the same order; per-row max |diff| and argmax, the lowest index
// among equal maxima as the golden README defines it). Shared by the 40 float pairs and the quantised set.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "workload/logrec.h"

namespace offgrid::test {

inline int argmax(const std::vector<float> & v) {
    return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Runs the replay in a fresh working directory (workloads write state files there) and reads its record.
// `name` keeps the directories of parallel tests apart; `env` (e.g. "OFFGRID_QUANT_ACT=f32") is set for the run.
inline tools::Logrec run_replay(const std::string & model_path, const std::string & workload_path,
                                  const std::string & name, const std::string & env = "") {
    namespace fs = std::filesystem;
    // The process id keeps apart the same test run at once from several worktrees (/tmp is shared).
    const fs::path dir = fs::temp_directory_path() / ("offgrid_golden_" + name + "_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string cmd = "cd '" + dir.string() + "' && " + (env.empty() ? "" : "env " + env + " ") + "'" OFFGRID_BINARY "' replay '" + model_path + "' '" +
                            workload_path + "' -b out.bin -o out.txt 2>err.txt";
    const int rc = std::system(cmd.c_str());
    EXPECT_EQ(rc, 0) << cmd;
    tools::Logrec out;
    if (rc == 0) out = tools::Logrec::read((dir / "out.bin").string());
    std::error_code ec;
    fs::remove_all(dir, ec);
    return out;
}

struct RowDiff {
    double max_abs = 0;   // max |want - got| over the row's logits
    int argmax_want = 0, argmax_got = 0;
};

// Checks that both records have the same rows (width, count, seq, pos, tok) and returns one RowDiff per row
// (empty after a failed check).
inline std::vector<RowDiff> compare_records(const tools::Logrec & want, const tools::Logrec & got) {
    std::vector<RowDiff> out;
    EXPECT_EQ(got.n_vocab, want.n_vocab);
    EXPECT_EQ(got.rows.size(), want.rows.size());
    if (got.n_vocab != want.n_vocab || got.rows.size() != want.rows.size()) return out;
    for (size_t r = 0; r < want.rows.size(); ++r) {
        const auto & a = want.rows[r];
        const auto & b = got.rows[r];
        if (b.seq != a.seq || b.pos != a.pos || b.tok != a.tok) {
            ADD_FAILURE() << "row " << r << ": (seq, pos, tok) (" << b.seq << ", " << b.pos << ", " << b.tok
                          << ") where the reference has (" << a.seq << ", " << a.pos << ", " << a.tok << ")";
            return {};
        }
        RowDiff d;
        for (size_t i = 0; i < a.logits.size(); ++i) {
            d.max_abs = std::max(d.max_abs, static_cast<double>(std::fabs(a.logits[i] - b.logits[i])));
        }
        d.argmax_want = argmax(a.logits);
        d.argmax_got = argmax(b.logits);
        out.push_back(d);
    }
    return out;
}

}  // namespace offgrid::test
