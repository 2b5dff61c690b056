// Inputs far larger than the context: a 200 MB prompt file is refused by `run` and `embed` after reading about
// a context's worth of it, in well under 300 MB of memory; `perplexity --chunks N` reads only N chunks.
// (The time these take is measured by scripts/check_input_size.sh; tests assert memory and behaviour only.)
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "cli_helpers.h"

namespace offgrid::test {
namespace {

#if defined(OFFGRID_SANITIZED)
constexpr bool kSanitized = true;  // the sanitizers' shadow memory makes RSS meaningless here
#else
constexpr bool kSanitized = false;
#endif

struct Measured {
    int status = -1;
    long max_rss_kib = 0;
    std::string err, out;
};

// Runs `offgrid ARGS...` directly (no shell in between) and reads its own peak RSS from wait4.
Measured run_measured(const std::vector<std::string> & args, const fs::path & dir) {
    const fs::path out = dir / "out.txt", err = dir / "err.txt";
    const pid_t pid = ::fork();
    if (pid == 0) {
        const int fo = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        const int fe = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ::dup2(fo, 1);
        ::dup2(fe, 2);
        ::setenv("OFFGRID_CACHE", (dir / "cache").c_str(), 1);
        std::vector<std::string> argv = {OFFGRID_BINARY};
        argv.insert(argv.end(), args.begin(), args.end());
        std::vector<char *> cargv;
        for (auto & a : argv) cargv.push_back(a.data());
        cargv.push_back(nullptr);
        ::execv(cargv[0], cargv.data());
        std::_Exit(127);
    }
    Measured m;
    int st = 0;
    rusage ru{};
    ::wait4(pid, &st, 0, &ru);
    m.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    m.max_rss_kib = ru.ru_maxrss;
    m.out = slurp(out);
    m.err = slurp(err);
    return m;
}

class InputSize : public ::testing::Test {
protected:
    void SetUp() override {
        model_ = dir_.file("m.gguf");
        ASSERT_EQ(run_offgrid("gen-model -o " + q(model_)).status, 0);
        // 200 MB of ordinary text lines, and 200 MB of one word (no place to cut it).
        text_ = dir_.file("big.txt");
        word_ = dir_.file("word.txt");
        std::string block;
        while (block.size() < (1u << 20)) block += "the quick brown fox jumps over the lazy dog, again and again\n";
        block.resize(1u << 20);
        block.back() = '\n';
        std::ofstream t(text_, std::ios::binary), w(word_, std::ios::binary);
        const std::string x(1u << 20, 'x');
        for (int i = 0; i < 200; ++i) {
            t << block;
            w << x;
        }
    }
    void expect_small(const Measured & m) {
        if (!kSanitized) {
            EXPECT_LT(m.max_rss_kib, 300 * 1024) << m.err;
        }
    }
    TempDir dir_;
    std::string model_, text_, word_;
};

TEST_F(InputSize, RunRefusesA200MBPromptWithoutReadingItWhole) {
    for (const std::string & f : {text_, word_}) {
        const Measured m = run_measured({"run", "-m", model_, "-f", f, "-n", "1", "-c", "4096"}, dir_.path());
        EXPECT_EQ(m.status, 1) << m.err;
        EXPECT_NE(m.err.find("the prompt is more than 4096 tokens, longer than the context of 4096 cells"), std::string::npos) << m.err;
        EXPECT_EQ(m.out, "");
        expect_small(m);
    }
}

TEST_F(InputSize, EmbedRefusesA200MBPromptWithoutReadingItWhole) {
    const Measured m = run_measured({"embed", "-m", model_, "-f", text_, "-c", "1024"}, dir_.path());
    EXPECT_EQ(m.status, 1) << m.err;
    EXPECT_NE(m.err.find("the text has more than 1024 tokens"), std::string::npos) << m.err;
    expect_small(m);
}

TEST_F(InputSize, PerplexityStopsAtChunks) {
    const Measured m = run_measured({"perplexity", "-m", model_, "-f", text_, "-c", "64", "--chunks", "2"}, dir_.path());
    EXPECT_EQ(m.status, 0) << m.err;
    EXPECT_NE(m.out.find("perplexity: 128 tokens, 2 chunk(s) of up to 64 tokens (--chunks: the file has more)"),
              std::string::npos) << m.out;
    EXPECT_NE(m.out.find("[2] tokens 64..127"), std::string::npos) << m.out;
    EXPECT_EQ(m.out.find("[3]"), std::string::npos) << m.out;
    expect_small(m);
}

}  // namespace
}  // namespace offgrid::test
