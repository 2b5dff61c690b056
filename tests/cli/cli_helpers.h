// Helpers for the command-line tests: run the built `offgrid` with arguments (and an optional environment
// prefix), capture stdout, stderr and the exit status; private temporary directories.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

namespace offgrid::test {

namespace fs = std::filesystem;

struct CmdResult {
    int status = -1;
    std::string out;
    std::string err;
};

inline std::string slurp(const fs::path & p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Single-quotes one shell word (none of the tests' arguments contain a quote).
inline std::string q(const std::string & s) { return "'" + s + "'"; }

// A fresh directory, removed with the object; named after the running test so parallel tests never share one.
class TempDir {
public:
    TempDir() {
        const auto * info = ::testing::UnitTest::GetInstance()->current_test_info();
        std::string name = info ? std::string(info->test_suite_name()) + "_" + info->name() : "offgrid";
        for (char & c : name) {
            if (c == '/') c = '_';
        }
        path_ = fs::temp_directory_path() / ("offgrid_cli_" + name + "_" + std::to_string(::getpid()));
        fs::remove_all(path_);
        fs::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    const fs::path & path() const { return path_; }
    std::string file(const std::string & name) const { return (path_ / name).string(); }

private:
    fs::path path_;
};

// Runs a shell command line, capturing its stdout and stderr.
inline CmdResult run_offgrid_shell(const std::string & command) {
    static int counter = 0;
    const fs::path base = fs::temp_directory_path() /
                          ("offgrid_cli_sh_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    const std::string out = base.string() + ".out", err = base.string() + ".err";
    const int raw = std::system((command + " >" + q(out) + " 2>" + q(err) + " </dev/null").c_str());
    CmdResult r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    fs::remove(out);
    fs::remove(err);
    return r;
}

// Runs `offgrid ARGS` (words already quoted as needed) with `env` (e.g. "OFFGRID_CACHE='/x' ") in front.
inline CmdResult run_offgrid(const std::string & args, const std::string & env = "") {
    return run_offgrid_shell(env + q(OFFGRID_BINARY) + " " + args);
}

// A failed command: non-zero status, nothing on stdout, exactly one line on stderr containing `fragment`.
inline void expect_one_line_error(const CmdResult & r, const std::string & fragment) {
    EXPECT_NE(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "");
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
    EXPECT_NE(r.err.find(fragment), std::string::npos) << "expected '" << fragment << "' in: " << r.err;
}

}  // namespace offgrid::test
