// Reliability through the command line: a model file is never written over and a failed command leaves no partial
// output; threads, memory and context lengths beyond what the machine gives (under a `ulimit` where the case is
// about resources) and values that do not fit end in a one-line error naming the file or flag.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include <sys/stat.h>

#include "cli_helpers.h"
#include "common/shared_dir.h"
#include "gguf/reader.h"
#include "gguf/writer.h"

namespace offgrid::test {
namespace {

// Address-space limits do not mix with the sanitizers' shadow memory.
#if defined(OFFGRID_SANITIZED)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

class Reliability : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_TRUE(fs::exists(OFFGRID_BINARY)) << "build the offgrid target first: " << OFFGRID_BINARY;
        env_ = "OFFGRID_CACHE=" + q(dir_.file("cache")) + " ";
    }
    CmdResult run(const std::string & args) { return run_offgrid(args, env_); }
    // `offgrid ARGS` in a subshell limited to `kib` KiB of address space, killed after 60 s (status 124).
    CmdResult run_limited(uint64_t kib, const std::string & args) {
        return run_offgrid_shell("(ulimit -v " + std::to_string(kib) + "; exec timeout 60 " + q(OFFGRID_BINARY) +
                                 " " + args + ")");
    }
    std::string model() {
        const std::string path = dir_.file("m.gguf");
        if (!fs::exists(path)) {
            EXPECT_EQ(run_offgrid("gen-model -o " + q(path)).status, 0);
        }
        return path;
    }
    // The generated model with its metadata or tensors edited.
    std::string variant(const std::string & name, const std::function<void(gguf::Writer &)> & edit,
                        const std::string & replace_tensor = "", const std::vector<uint8_t> & data = {}) {
        const gguf::Reader r = gguf::Reader::open(model());
        gguf::Writer w;
        for (const auto & kv : r.metadata()) w.set(kv.key, kv.value);
        for (const auto & t : r.tensors()) {
            if (t.name == replace_tensor) {
                w.add_tensor(t.name, t.ne, t.type, data);
            } else {
                w.add_tensor_view(t.name, t.ne, t.type, std::span<const uint8_t>(t.data, t.n_bytes));
            }
        }
        edit(w);
        const std::string path = dir_.file(name);
        w.write_file(path);
        return path;
    }
    std::string script(const std::string & name, const std::string & text) {
        const std::string path = dir_.file(name);
        std::ofstream(path) << text;
        return path;
    }
    // The directory holds exactly these names (no temporary file left behind).
    void expect_only(const std::set<std::string> & names) {
        std::set<std::string> have;
        for (const auto & e : fs::directory_iterator(dir_.path())) have.insert(e.path().filename().string());
        EXPECT_EQ(have, names);
    }
    TempDir dir_;
    std::string env_;
};

// ---- 1: an output path that is the model, and failing scripts

TEST_F(Reliability, Defect1_ReplayNeverWritesOverItsModel) {
    const std::string m = model();
    const std::string before = slurp(m);
    const std::string s = script("s.txt", "decode 0 1 2 3\n");
    fs::create_hard_link(m, dir_.file("hard.gguf"));
    fs::create_symlink(m, dir_.file("soft.gguf"));
    for (const char * flag : {"-b", "-o"}) {
        for (const std::string & target : {m, dir_.file("hard.gguf"), dir_.file("soft.gguf")}) {
            const CmdResult r = run("replay " + q(m) + " " + q(s) + " " + std::string(flag) + " " + q(target));
            EXPECT_EQ(r.status, 1) << flag << " " << target;
            expect_one_line_error(r, "is the model file this process has open");
        }
    }
    EXPECT_EQ(slurp(m), before);  // was truncated to 0 bytes (and the process died of SIGBUS)
    expect_only({"m.gguf", "hard.gguf", "soft.gguf", "s.txt"});
}

TEST_F(Reliability, Defect1_StateSaveOntoTheModelRefusedBeforeRunning) {
    const std::string m = model();
    const std::string before = slurp(m);
    CmdResult r = run("run -m " + q(m) + " -n 2 --temp 0 --state-save " + q(m));
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.out, "");  // refused before any generation
    EXPECT_NE(r.err.find("--state-save"), std::string::npos) << r.err;
    EXPECT_EQ(slurp(m), before);
    // A directory is refused before running too (it failed only after generating).
    r = run("run -m " + q(m) + " -n 2 --state-save " + q(dir_.path().string()));
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.out, "");
    expect_one_line_error(r, "is a directory");
}

TEST_F(Reliability, Defect1_FailingScriptLeavesNoPartialOutput) {
    const std::string m = model();
    const std::string s = script("s.txt", "decode 0 1 2 3\nrestore nosuch 0\ndecode 0 4\n");
    std::ofstream(dir_.file("old.bin")) << "previous run";
    const CmdResult r = run("replay " + q(m) + " " + q(s) + " -b " + q(dir_.file("old.bin")) + " -o " + q(dir_.file("new.txt")));
    EXPECT_EQ(r.status, 1);
    expect_one_line_error(r, "s.txt:2: restore: no snapshot named 'nosuch'");
    EXPECT_EQ(slurp(dir_.file("old.bin")), "previous run");  // untouched, not half rewritten
    expect_only({"m.gguf", "s.txt", "old.bin"});             // no new.txt, no temporary files
}

// ---- 2: thread creation failing part-way, and the -t cap

TEST_F(Reliability, Defect2_ThreadsThatCannotStartEndInAnErrorNotAHang) {
    if (kSanitized) GTEST_SKIP() << "ulimit -v does not work with the sanitizers' shadow memory";
    const std::string m = model();
    // 255 worker stacks of 8 MiB do not fit in 600 MB: the pool fails part-way (this hung forever).
    CmdResult r = run_limited(600000, "run -m " + q(m) + " -t 256 -n 1 -p hi");
    EXPECT_EQ(r.status, 1) << "124 means it hung: " << r.err;
    EXPECT_NE(r.err.find("could not start thread"), std::string::npos) << r.err;
    const std::string s = script("s.txt", "decode 0 1 2\n");
    r = run_limited(600000, "replay " + q(m) + " " + q(s) + " -t 256");
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_NE(r.err.find("could not start thread"), std::string::npos) << r.err;
}

TEST_F(Reliability, Defect2_ThreadCountCappedEverywhere) {
    const std::string m = q(model());
    for (const std::string & cmd : {"run -m " + m, "perplexity -f " + m + " -m " + m, "bench -m " + m}) {
        const CmdResult r = run(cmd + " -t 257");
        EXPECT_EQ(r.status, 2) << cmd;
        expect_one_line_error(r, "-t: 257 is outside 1..256");
    }
    const std::string s = script("s.txt", "decode 0 1\n");
    CmdResult r = run("replay " + m + " " + q(s) + " -t 257");
    EXPECT_EQ(r.status, 2);
    expect_one_line_error(r, "-t: 257 is outside 1..256");
    r = run("replay " + m + " " + q(s) + " -t many");  // was "stoi"
    expect_one_line_error(r, "-t: expected an integer, got 'many'");
    r = run("replay " + m + " " + q(script("t.txt", "set threads 100000\ndecode 0 1\n")));
    EXPECT_EQ(r.status, 1);
    expect_one_line_error(r, "t.txt:1: set threads: 100000 is outside 0..256");
}

// ---- 3: large metadata arrays

TEST_F(Reliability, Defect3_LargeArrayCostsItsSizeNotNinetyTimesIt) {
    if (kSanitized) GTEST_SKIP() << "ulimit -v does not work with the sanitizers' shadow memory";
    // 20 MB of u8 metadata: one 96-byte Value per element made this 1.9 GB.
    const std::string big = variant("big.gguf", [](gguf::Writer & w) {
        w.set("junk.bytes", gguf::Value{gguf::ValueType::ARRAY, 0, 0, 0, {}, gguf::ValueType::U8,
                                        gguf::ValueArray::packed(gguf::ValueType::U8, std::vector<uint8_t>(20 << 20, 7))});
    });
    ASSERT_GT(fs::file_size(big), 20u << 20);
    CmdResult r = run_limited(400000, "gguf-info " + q(big));
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("junk.bytes"), std::string::npos);
    r = run_limited(400000, "run -m " + q(big) + " -t 1 -c 256 -n 2 --temp 0 -p hi");
    EXPECT_EQ(r.status, 0) << r.err;
}

// ---- 4: a FIFO as the model (or any input file)

TEST_F(Reliability, Defect4_FifoRefusedWithoutBlocking) {
    const std::string fifo = dir_.file("pipe");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    const std::string m = q(model());
    for (const std::string & cmd : {"run -m " + q(fifo), "gguf-info " + q(fifo), "perplexity -f " + q(fifo) + " -m " + m,
                                  "run -m " + m + " -f " + q(fifo), "replay " + m + " " + q(fifo),
                                  "run -m " + m + " --state-load " + q(fifo)}) {
        const CmdResult r = run_offgrid_shell("timeout 20 " + q(OFFGRID_BINARY) + " " + cmd);
        EXPECT_EQ(r.status, 1) << cmd << " (124 means it blocked)";
        expect_one_line_error(r, "not a regular file");
    }
}

// ---- 5: the model's context length

TEST_F(Reliability, Defect5_ImpossibleContextLengthsRefused) {
    for (const uint32_t n : {0u, 0xFFFFFF80u, (1u << 30) + 1}) {
        const std::string path = variant("c" + std::to_string(n) + ".gguf",
                                          [n](gguf::Writer & w) { w.set_u32("qwen4exp.context_length", n); });
        const CmdResult r = run("run -m " + q(path) + " -n 1 -p hi");
        EXPECT_EQ(r.status, 1) << n;  // 0xFFFFFF80 wrapped to 256 cells in the padding, 0 was accepted
        EXPECT_NE(r.err.find("context_length"), std::string::npos) << r.err;
    }
}

TEST_F(Reliability, Defect5_DefaultContextFitsTheMemory) {
    if (kSanitized) GTEST_SKIP() << "ulimit -v does not work with the sanitizers' shadow memory";
    // 2^24 cells of the tiny model's caches are several GB, allocated and zeroed up front with -c 0.
    const std::string path = variant("long.gguf", [](gguf::Writer & w) { w.set_u32("qwen4exp.context_length", 1u << 24); });
    CmdResult r = run_limited(700000, "run -m " + q(path) + " -t 1 -n 2 --temp 0 -p hi");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("context capped at"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("-c N"), std::string::npos) << r.err;
    // Asking for it explicitly is an error that says so, not a bare bad_alloc.
    r = run_limited(700000, "run -m " + q(path) + " -t 1 -n 2 -c 16777216 -p hi");
    EXPECT_EQ(r.status, 1);
    expect_one_line_error(r, "not enough memory for a context of 16777216 cells");
}

// ---- 6 and 7: replay scripts: counts, values that do not fit, positions

TEST_F(Reliability, Defect6_ReplayValuesThatDoNotFitNameTheLine) {
    const std::string m = q(model());
    const std::pair<const char *, const char *> cases[] = {
        {"set n_ctx 4000000000\ndecode 0 1\n", "x.txt:1: set n_ctx: 4000000000 is outside 0..1073741824"},
        {"decode 0 1\ndecode 0 rep(1000000000,5)\n", "x.txt:2: rep(): rep(1000000000,5) makes the list longer"},
        {"decode 0 rand(1000000000000,1)\n", "x.txt:1: rand(): rand(1000000000000,1) makes the list longer"},
        {"decode 0 range(0,9000000000000000000)\n", "x.txt:1: range(): range(0,9000000000000000000) makes the list longer"},
        {"decode 0 rep(3,4294967301)\n", "x.txt:1: rep(): token 4294967301 does not fit in 32 bits"},
    };
    for (const auto & [text, message] : cases) {
        const CmdResult r = run("replay " + m + " " + q(script("x.txt", text)));
        EXPECT_EQ(r.status, 1) << text;
        expect_one_line_error(r, message);
    }
}

TEST_F(Reliability, Defect7_PositionsTheMemoryCannotContinueRefused) {
    const std::string m = q(model());
    CmdResult r = run("replay " + m + " " + q(script("p.txt", "decode 0 @2147483646 5 6 7\n")));
    EXPECT_EQ(r.status, 1);
    expect_one_line_error(r, "p.txt:1: positions 2147483646..2147483648 go past 2147483645");
    // The last position that can be continued is accepted; one past it is the batch's refusal (a failed call).
    r = run("replay " + m + " " + q(script("q.txt", "set logits 0\ndecode 0 @2147483645 5\n")));
    EXPECT_EQ(r.status, 0) << r.err;
}

// ---- the weak spots

TEST_F(Reliability, PerplexityOfNanWeightsFails) {
    const gguf::Reader r0 = gguf::Reader::open(model());
    const gguf::TensorInfo * norm = r0.find_tensor("output.weight");
    ASSERT_NE(norm, nullptr);
    ASSERT_EQ(norm->type, tensor::ElemType::F32);
    std::vector<uint8_t> nan_bytes(norm->n_bytes);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (size_t i = 0; i + 4 <= nan_bytes.size(); i += 4) std::memcpy(&nan_bytes[i], &nan, 4);
    const std::string bad = variant("nan.gguf", [](gguf::Writer &) {}, "output.weight", nan_bytes);
    const std::string text = script("t.txt", "The cabin stands at the end of a long gravel road.");
    const CmdResult r = run("perplexity -m " + q(bad) + " -f " + q(text) + " -c 16");
    EXPECT_EQ(r.status, 1);  // printed PPL = nan and exited 0
    EXPECT_NE(r.err.find("non-finite logits"), std::string::npos) << r.err;
}

TEST_F(Reliability, ReplayExitStatus) {
    const std::string m = q(model());
    CmdResult r = run("replay " + m + " " + q(dir_.path().string()));
    EXPECT_EQ(r.status, 1);
    expect_one_line_error(r, "is a directory");
    std::ofstream(dir_.file("junk.bin"), std::ios::binary) << std::string("\x7f" "ELF\x02\x01\x01\x00\x00", 9);
    r = run("replay " + m + " " + q(dir_.file("junk.bin")));
    EXPECT_EQ(r.status, 1);
    expect_one_line_error(r, "junk.bin:1: byte 0x7f is not text");
    // A failed decode call (a gap in the sequence's positions): exit 1, unless the script expects failures.
    const std::string failing = "decode 0 1 2\ndecode 0 @7 3\n";
    r = run("replay " + m + " " + q(script("f.txt", failing)));
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_NE(r.err.find("1 failed calls"), std::string::npos) << r.err;
    std::string expected = "set expect_failures 1\n";
    expected += failing;
    r = run("replay " + m + " " + q(script("e.txt", expected)));
    EXPECT_EQ(r.status, 0) << r.err;
    r = run("replay " + m + " " + q(script("u.txt", "decode 0 1\nfrobnicate 3\n")));
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_NE(r.err.find("u.txt:2: unknown command skipped: frobnicate 3"), std::string::npos) << r.err;
}

TEST_F(Reliability, EmptyFileNamesRefused) {
    for (const char * cmd : {"run -m ''", "perplexity -f x -m ''", "bench -m ''", "run --state-save ''",
                                  "run -f ''"}) {
        const CmdResult r = run(cmd);
        EXPECT_EQ(r.status, 2) << cmd;  // -m '' silently used the built-in model
        expect_one_line_error(r, "empty file name");
    }
}

TEST_F(Reliability, MessagesNameTheFileNotTheLibrary) {
    const std::string m = q(model());
    const std::string d = q(dir_.path().string());
    for (const std::string & cmd : {"run -m " + m + " -f " + d, "perplexity -m " + m + " -f " + d,
                                  "run -m " + m + " --state-load " + d}) {
        const CmdResult r = run(cmd);
        EXPECT_EQ(r.status, 1) << cmd;
        expect_one_line_error(r, "is a directory");
        EXPECT_EQ(r.err.find("basic_filebuf"), std::string::npos) << r.err;
    }
}

TEST_F(Reliability, NoMmapRunsTheSame) {
    const std::string m = q(model());
    const CmdResult a = run("run -m " + m + " -n 8 --temp 0 -t 1");
    const CmdResult b = run("run -m " + m + " -n 8 --temp 0 -t 1 --no-mmap");
    EXPECT_EQ(a.status, 0);
    EXPECT_EQ(b.status, 0) << b.err;
    EXPECT_EQ(a.out, b.out);
}

}  // namespace
}  // namespace offgrid::test
