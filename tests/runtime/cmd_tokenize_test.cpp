// `offgrid tokenize` run as a program: output formats and the one-line errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

#include "common/shared_dir.h"

namespace {

namespace fs = std::filesystem;

struct CmdResult {
    int status;
    std::string out;
    std::string err;
};

std::string slurp(const fs::path & p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Arguments are single-quoted for the shell; none of ours contains a quote.
CmdResult run_offgrid(const std::string & args) {
    const fs::path dir = fs::temp_directory_path() / ("offgrid_tokenize_test_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string cmd = std::string("'") + OFFGRID_BINARY + "' tokenize " + args + " >'" +
                            (dir / "out").string() + "' 2>'" + (dir / "err").string() + "'";
    const int raw = std::system(cmd.c_str());
    CmdResult r{WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, slurp(dir / "out"), slurp(dir / "err")};
    fs::remove_all(dir);
    return r;
}

std::string q(const std::string & s) { return "'" + s + "'"; }

std::string vocab() { return offgrid::test::shared_dir() + "/data/ggml-vocab-qwen35.gguf"; }

void expect_one_line_error(const CmdResult & r, const std::string & fragment) {
    EXPECT_NE(r.status, 0);
    EXPECT_EQ(r.out, "");
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
    EXPECT_NE(r.err.find(fragment), std::string::npos) << r.err;
}

class CmdTokenize : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(OFFGRID_BINARY)) GTEST_FAIL() << "build the offgrid target first: " << OFFGRID_BINARY;
    }
};

TEST_F(CmdTokenize, IdsAndPieces) {
    OFFGRID_REQUIRE_SHARED();
    CmdResult r = run_offgrid("-m " + q(vocab()) + " -p 'Hello world' --ids");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "9707 1879\n");
    r = run_offgrid("-m " + q(vocab()) + " -p ' Hello, world!'");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, " 21927 -> ' Hello'\n    11 -> ','\n  1879 -> ' world'\n     0 -> '!'\n");
}

TEST_F(CmdTokenize, FileAndSpecialTokens) {
    OFFGRID_REQUIRE_SHARED();
    const fs::path file = fs::temp_directory_path() / ("offgrid_tokenize_input_" + std::to_string(::getpid()));
    std::ofstream(file, std::ios::binary) << "<|im_end|>\n =";
    CmdResult r = run_offgrid("-m " + q(vocab()) + " -f " + q(file.string()));
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "151645 -> '<|im_end|>'\n   198 -> '\\n'\n   284 -> ' ='\n");
    r = run_offgrid("-m " + q(vocab()) + " -f " + q(file.string()) + " --no-special --ids");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out.find("151645"), std::string::npos) << r.out;
    fs::remove(file);
}

TEST_F(CmdTokenize, EmbeddedVocabularyWithoutModel) {
    const CmdResult r = run_offgrid("-p 'a' --ids");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "97\n");  // byte tokens of the embedded vocabulary have the byte's value as id
}

TEST_F(CmdTokenize, Errors) {
    expect_one_line_error(run_offgrid("-m /nonexistent/model.gguf -p x"), "/nonexistent/model.gguf");
    expect_one_line_error(run_offgrid("-p x -f /nonexistent/text.txt"), "exactly one");
    expect_one_line_error(run_offgrid("-f /nonexistent/text.txt"), "/nonexistent/text.txt");
    expect_one_line_error(run_offgrid("-f " + q(fs::temp_directory_path().string())), "is a directory");
    expect_one_line_error(run_offgrid("--bogus"), "--bogus");
    expect_one_line_error(run_offgrid("-m"), "-m");
    OFFGRID_REQUIRE_SHARED();
    expect_one_line_error(run_offgrid("-m " + q(vocab() + ".inp") + " -p x"), ".inp");
    expect_one_line_error(run_offgrid("-m " + q(offgrid::test::shared_dir() + "/golden/models/tiny-r1.gguf") +
                                      " -p x"),
                          "tokenizer.ggml.model");

    // A valid GGUF with no tokenizer at all: magic, version 3, no tensors, one key.
    std::string gguf = "GGUF";
    const auto u32 = [&](uint32_t v) { gguf.append(reinterpret_cast<const char *>(&v), 4); };
    const auto u64 = [&](uint64_t v) { gguf.append(reinterpret_cast<const char *>(&v), 8); };
    const auto str = [&](const std::string & s) {
        u64(s.size());
        gguf += s;
    };
    u32(3);
    u64(0);
    u64(1);
    str("general.architecture");
    u32(8);
    str("qwen4exp");
    const fs::path file = fs::temp_directory_path() / ("offgrid_tokenize_notok_" + std::to_string(::getpid()));
    std::ofstream(file, std::ios::binary) << gguf;
    expect_one_line_error(run_offgrid("-m " + q(file.string()) + " -p x"), "no tokenizer");
    fs::remove(file);
}

TEST_F(CmdTokenize, Help) {
    const CmdResult r = run_offgrid("--help");
    EXPECT_EQ(r.status, 0);
    EXPECT_NE(r.out.find("usage: offgrid tokenize"), std::string::npos);
}

}  // namespace
