// Bad input to the commands: one clear line on stderr, a non-zero exit, nothing on stdout, nothing half-written.
#include <gtest/gtest.h>

#include "cli_helpers.h"
#include "common/shared_dir.h"
#include "gguf/writer.h"

namespace offgrid::test {
namespace {

class CliErrors : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_TRUE(fs::exists(OFFGRID_BINARY)) << "build the offgrid target first: " << OFFGRID_BINARY;
        env_ = "OFFGRID_CACHE=" + q(dir_.file("cache")) + " ";
    }
    CmdResult run(const std::string & args) { return run_offgrid(args, env_); }
    std::string model() {
        const std::string path = dir_.file("m.gguf");
        if (!fs::exists(path)) {
            EXPECT_EQ(run_offgrid("gen-model -o " + q(path)).status, 0);
        }
        return q(path);
    }
    TempDir dir_;
    std::string env_;
};

TEST_F(CliErrors, UnknownCommand) {
    const CmdResult r = run("frobnicate");
    expect_one_line_error(r, "unknown command 'frobnicate'");
    EXPECT_EQ(r.status, 2);
}

TEST_F(CliErrors, UnknownFlag) {
    for (const char * cmd : {"run", "perplexity", "bench", "gen-model"}) {
        const CmdResult r = run(std::string(cmd) + " --frobnicate 3");
        expect_one_line_error(r, "unknown flag '--frobnicate'");
        EXPECT_EQ(r.status, 2) << cmd;
    }
    expect_one_line_error(run("run -p x stray"), "unexpected argument 'stray'");
}

TEST_F(CliErrors, MissingValue) {
    for (const char * args : {"run -m", "run -n", "run -p", "run --state-load", "perplexity -f", "bench -d", "gen-model -o"}) {
        const CmdResult r = run(args);
        const std::string flag = std::string(args).substr(std::string(args).find(' ') + 1);
        expect_one_line_error(r, flag + ": missing value");
        EXPECT_EQ(r.status, 2) << args;
    }
}

TEST_F(CliErrors, MalformedValues) {
    expect_one_line_error(run("run -n ten"), "-n: expected an integer, got 'ten'");
    expect_one_line_error(run("run -n 5x"), "-n: expected an integer, got '5x'");
    expect_one_line_error(run("run -t 0"), "-t: 0 is outside 1..256");
    expect_one_line_error(run("run -c -5"), "-c: -5 is outside");
    expect_one_line_error(run("run --temp warm"), "--temp: expected a number, got 'warm'");
    expect_one_line_error(run("bench -d 0,1k"), "-d: expected an integer, got '1k'");
    expect_one_line_error(run("run -ctk q4_0"), "cache type 'q4_0'");
    expect_one_line_error(run("bench --mode fast"), "--mode: 'fast'");
    expect_one_line_error(run("bench -p 0 -n 0"), "nothing to measure");
    expect_one_line_error(run("run -p a -f b"), "at most one of -p TEXT and -f FILE");
}

TEST_F(CliErrors, InvalidSamplingValues) {
    expect_one_line_error(run("run --top-p 1.5"), "top_p");
    expect_one_line_error(run("run --top-p 0"), "top_p");
    expect_one_line_error(run("run --min-p -0.1"), "min_p");
    expect_one_line_error(run("run --repeat-penalty 0"), "repeat_penalty");
    expect_one_line_error(run("run --repeat-last-n -2"), "repeat_last_n");
    expect_one_line_error(run("run --temp nan"), "--temp");
    expect_one_line_error(run("run --top-k -1"), "--top-k");
    EXPECT_FALSE(fs::exists(dir_.file("cache"))) << "a refused command still generated the default model";
}

TEST_F(CliErrors, MissingFiles) {
    expect_one_line_error(run("run -m " + q(dir_.file("absent.gguf"))), "absent.gguf");
    expect_one_line_error(run("perplexity -m " + model() + " -f " + q(dir_.file("absent.txt"))), "absent.txt");
    expect_one_line_error(run("run -m " + model() + " -f " + q(dir_.file("absent.txt"))), "absent.txt");
    expect_one_line_error(run("bench -m " + q(dir_.file("absent.gguf"))), "absent.gguf");
    expect_one_line_error(run("run -m " + model() + " -p x --state-load " + q(dir_.file("absent.state"))), "absent.state");
    expect_one_line_error(run("perplexity -m " + model()), "-f FILE is required");
}

TEST_F(CliErrors, NotAGgufFile) {
    std::ofstream(dir_.file("text.gguf"), std::ios::binary) << "just some text, not a model\n";
    const CmdResult r = run("run -m " + q(dir_.file("text.gguf")));
    expect_one_line_error(r, "not a GGUF file");
    EXPECT_NE(r.err.find("text.gguf"), std::string::npos);
    EXPECT_EQ(r.status, 1);
    // A GGUF file cut short inside its tensor data.
    model();
    const std::string whole = slurp(dir_.file("m.gguf"));
    std::ofstream(dir_.file("cut.gguf"), std::ios::binary) << whole.substr(0, whole.size() / 2);
    expect_one_line_error(run("run -m " + q(dir_.file("cut.gguf"))), "cut.gguf");
}

TEST_F(CliErrors, UnsupportedArchitecture) {
    gguf::Writer w;
    w.set_string("general.architecture", "llama");
    w.set_u32("llama.context_length", 128);
    w.add_tensor_f32("token_embd.weight", {4, 8}, tensor::ElemType::F32, std::vector<float>(32, 0.5f));
    w.write_file(dir_.file("llama.gguf"));
    const CmdResult r = run("run -m " + q(dir_.file("llama.gguf")));
    expect_one_line_error(r, "general.architecture");
    EXPECT_NE(r.err.find("llama"), std::string::npos) << r.err;
    expect_one_line_error(run("perplexity --ids -m " + q(dir_.file("llama.gguf")) + " -f " + q(dir_.file("llama.gguf"))),
                          "not supported");
}

TEST_F(CliErrors, ModelWithoutUsableTokenizer) {
    OFFGRID_REQUIRE_SHARED();
    expect_one_line_error(run("run -m " + q(shared_dir() + "/golden/models/tiny-r1.gguf")), "tokenizer.ggml.model");
}

TEST_F(CliErrors, PromptLongerThanTheContext) {
    std::string text;
    for (int i = 0; i < 200; ++i) text += "word" + std::to_string(i) + " ";
    std::ofstream(dir_.file("long.txt"), std::ios::binary) << text;
    const CmdResult r = run("run -m " + model() + " -c 256 -f " + q(dir_.file("long.txt")) + " --state-save " +
                            q(dir_.file("s.state")));
    expect_one_line_error(r, "longer than the context of 256 cells");
    EXPECT_FALSE(fs::exists(dir_.file("s.state")));
}

TEST_F(CliErrors, ContextBeyondTheModelsLength) {
    // The tiny model's context length is 4096.
    expect_one_line_error(run("run -m " + model() + " -c 100000 -p x"), "exceeds the model's context length 4096");
    std::ofstream(dir_.file("t.txt"), std::ios::binary) << "a few words of text";
    expect_one_line_error(run("perplexity -m " + model() + " -c 5000 -f " + q(dir_.file("t.txt"))), "4096");
    expect_one_line_error(run("bench -m " + model() + " -d 0,4000 -p 512 -n 4"), "exceeds the model's context length");
}

TEST_F(CliErrors, StateFileOfAnotherModel) {
    ASSERT_EQ(run("run -m " + model() + " -p hello -n 2 --state-save " + q(dir_.file("s.state"))).status, 0);
    ASSERT_EQ(run_offgrid("gen-model --seed 3 -o " + q(dir_.file("other.gguf"))).status, 0);
    const CmdResult r = run("run -m " + q(dir_.file("other.gguf")) + " -p x --state-load " + q(dir_.file("s.state")));
    expect_one_line_error(r, "model fingerprint: the state was saved with another model");
    EXPECT_EQ(r.status, 1);
    // The same shapes but other weights count as another model too; the original model still takes the file.
    EXPECT_EQ(run("run -m " + model() + " -p x -n 1 --state-load " + q(dir_.file("s.state"))).status, 0);
}

// Models that differ in one hyperparameter only (the weights are the same bytes) or in one weight byte in the
// middle of a tensor are other models: their logits differ, so a state of one is refused by the other.
TEST_F(CliErrors, StateFileOfAModelWithOneHyperparameterOrWeightByteChanged) {
    ASSERT_EQ(run("run -m " + model() + " -p hello -n 2 --state-save " + q(dir_.file("s.state"))).status, 0);
    for (const char * flags : {"--rms-eps 0.0001", "--rope-base 20000", "--n-expert-used 1"}) {
        ASSERT_EQ(run_offgrid(std::string("gen-model ") + flags + " -o " + q(dir_.file("hp.gguf"))).status, 0);
        const CmdResult r = run("run -m " + q(dir_.file("hp.gguf")) + " -p x --state-load " + q(dir_.file("s.state")));
        expect_one_line_error(r, "model fingerprint: the state was saved with another model");
    }
    std::string file = slurp(dir_.file("m.gguf"));
    file[file.size() / 2] = static_cast<char>(file[file.size() / 2] ^ 0x01);  // inside the tensor data
    std::ofstream(dir_.file("w.gguf"), std::ios::binary) << file;
    expect_one_line_error(run("run -m " + q(dir_.file("w.gguf")) + " -p x --state-load " + q(dir_.file("s.state"))),
                          "model fingerprint: the state was saved with another model");
}

TEST_F(CliErrors, StateFiles) {
    // Files that are no state at all, or cut short.
    std::ofstream(dir_.file("junk.state"), std::ios::binary) << "definitely not a state";
    expect_one_line_error(run("run -m " + model() + " -p x --state-load " + q(dir_.file("junk.state"))),
                          "not an offgrid state file");
    ASSERT_EQ(run("run -m " + model() + " -p hello -n 2 --state-save " + q(dir_.file("good.state"))).status, 0);
    const std::string good = slurp(dir_.file("good.state"));
    std::ofstream(dir_.file("cut.state"), std::ios::binary) << good.substr(0, good.size() - 7);
    expect_one_line_error(run("run -m " + model() + " -p x --state-load " + q(dir_.file("cut.state"))), "cut.state");
    // Saving into a directory that does not exist is refused before anything runs.
    expect_one_line_error(run("run -m " + model() + " -p x --state-save " + q(dir_.file("no/such/s.state"))),
                          "does not exist");
    // No temporaries were left next to the states.
    for (const auto & e : fs::directory_iterator(dir_.path())) {
        EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
    }
}

// Cache types are named as the flags name them, not by ggml type number.
TEST_F(CliErrors, StateOfAnotherCacheTypeNamesTheTypes) {
    ASSERT_EQ(run("run -m " + model() + " -p hello -n 2 -ctk f32 --state-save " + q(dir_.file("f32.state"))).status, 0);
    expect_one_line_error(run("run -m " + model() + " -p x --state-load " + q(dir_.file("f32.state"))),
                          "type_k: the state was made with f32, this memory has f16");
    expect_one_line_error(run("run -m " + model() + " -p x -ctk f32 -ctv f32 --state-load " + q(dir_.file("f32.state"))),
                          "type_v: the state was made with f16, this memory has f32");
}

// Bytes of an input file or an argument never reach the terminal raw: control bytes are shown as \xNN.
TEST_F(CliErrors, ControlBytesInMessagesAreEscaped) {
    std::ofstream(dir_.file("ids.txt"), std::ios::binary) << "1 2 \x1b]0;title\x07 5";
    const CmdResult ids = run("perplexity --ids -m " + model() + " -f " + q(dir_.file("ids.txt")));
    expect_one_line_error(ids, "token 2: expected a token id, got '\\x1b]0;title\\x07'");
    const CmdResult flag = run("run -n $(printf '1\\033[2J')");
    expect_one_line_error(flag, "expected an integer, got '1\\x1b[2J'");
    for (const CmdResult * r : {&ids, &flag}) {
        for (const char c : r->err) {
            if (c != '\n') {
                EXPECT_GE(static_cast<unsigned char>(c), 0x20u) << r->err;
            }
        }
    }
}

TEST_F(CliErrors, BadTokenIdFiles) {
    std::ofstream(dir_.file("ids.txt"), std::ios::binary) << "1 2 3 x 5";
    expect_one_line_error(run("perplexity --ids -m " + model() + " -f " + q(dir_.file("ids.txt"))), "token 3");
    std::ofstream(dir_.file("ids.txt"), std::ios::binary) << "1 2 99999";
    expect_one_line_error(run("perplexity --ids -m " + model() + " -f " + q(dir_.file("ids.txt"))), "99999");
    std::ofstream(dir_.file("ids.txt"), std::ios::binary) << "7";
    expect_one_line_error(run("perplexity --ids -m " + model() + " -f " + q(dir_.file("ids.txt"))), "at least 2");
}

TEST_F(CliErrors, PlotIntoAMissingDirectory) {
    expect_one_line_error(run("bench -m " + model() + " -d 0 -p 4 -n 2 --plot " + q(dir_.file("no/such/p.svg"))),
                          "no/such/p.svg");
}

}  // namespace
}  // namespace offgrid::test
