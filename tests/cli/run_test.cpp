// `offgrid run`: the built-in default model, streamed text, statistics, and state files through the command line
// and through the API.
#include <gtest/gtest.h>

#include <cstring>
#include <regex>
#include <sstream>

#include "cli_helpers.h"
#include "common/error.h"
#include "offgrid/context.h"
#include "model/qwen4exp/generator.h"

namespace offgrid::test {
namespace {

std::string cache_env(const TempDir & dir) { return "OFFGRID_CACHE=" + q(dir.file("cache")) + " "; }

std::string strip_newline(std::string s) {
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
}

TEST(Run, DefaultModelIsGeneratedOnceIntoTheCache) {
    TempDir dir;
    const CmdResult r = run_offgrid("run -n 16 --temp 0", cache_env(dir));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_FALSE(r.out.empty());
    EXPECT_EQ(r.out.back(), '\n');
    // The closing statistics line: prompt and generated counts with rates, memory per cache.
    EXPECT_NE(r.err.find("generated 16 tokens"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("attention "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("recurrent "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("indexer "), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("prompt ["), std::string::npos) << "no progress bar when stderr is not a terminal";
    // Exactly one file in the cache, complete (no temporary left), and the same bytes as the tiny preset.
    std::vector<fs::path> files;
    for (const auto & e : fs::directory_iterator(dir.file("cache"))) files.push_back(e.path());
    ASSERT_EQ(files.size(), 1u);
    model::qwen4exp::write_model_file(model::qwen4exp::gen_preset("tiny"), dir.file("tiny.gguf"));
    EXPECT_TRUE(slurp(files[0]) == slurp(dir.file("tiny.gguf")));
    const auto mtime = fs::last_write_time(files[0]);
    // A second run reuses it and, greedy, prints the same text.
    const CmdResult again = run_offgrid("run -n 16 --temp 0", cache_env(dir));
    ASSERT_EQ(again.status, 0) << again.err;
    EXPECT_EQ(again.out, r.out);
    EXPECT_EQ(fs::last_write_time(files[0]), mtime);
    // XDG_CACHE_HOME is the fallback.
    const CmdResult xdg = run_offgrid("run -n 2", "OFFGRID_CACHE= XDG_CACHE_HOME=" + q(dir.file("xdg")) + " ");
    ASSERT_EQ(xdg.status, 0) << xdg.err;
    EXPECT_TRUE(fs::exists(dir.file("xdg") + "/offgrid"));
}

// The progress bar appears only when stderr is a terminal: run under script(1), which gives the command a
// pseudo-terminal, with a prompt longer than one micro-batch.
TEST(Run, ProgressBarOnATerminal) {
    if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "script(1) is not installed";
    TempDir dir;
    std::string text;
    for (int i = 0; i < 120; ++i) text += "line " + std::to_string(i) + " of the prompt\n";
    std::ofstream(dir.file("p.txt"), std::ios::binary) << text;
    const std::string inner = "OFFGRID_CACHE=" + dir.file("cache") + " " + OFFGRID_BINARY + " run -n 2 -ub 64 -f " +
                              dir.file("p.txt");
    const CmdResult r = run_offgrid_shell("script -qec " + q(inner) + " /dev/null");
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("prompt ["), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("#"), std::string::npos) << r.out;
}

TEST(Run, SeedsAndSamplingChangeTheText) {
    TempDir dir;
    const std::string env = cache_env(dir);
    const CmdResult a = run_offgrid("run -n 24 -s 1 -p 'The sun'", env);
    const CmdResult b = run_offgrid("run -n 24 -s 1 -p 'The sun'", env);
    const CmdResult c = run_offgrid("run -n 24 -s 2 -p 'The sun'", env);
    ASSERT_EQ(a.status, 0) << a.err;
    EXPECT_EQ(a.out, b.out);
    EXPECT_NE(a.out, c.out);
    // Greedy with a small batch and micro-batch (several decode calls for the prompt) gives the same text as
    // one call.
    const CmdResult g1 = run_offgrid("run -n 12 --temp 0 -p 'When a question comes up, nobody can ask'", env);
    const CmdResult g2 = run_offgrid("run -n 12 --temp 0 -b 5 -ub 3 -p 'When a question comes up, nobody can ask'", env);
    ASSERT_EQ(g2.status, 0) << g2.err;
    EXPECT_EQ(g1.out, g2.out);
}

TEST(Run, UnlimitedGenerationStopsWhenTheContextIsFull) {
    TempDir dir;
    const CmdResult r = run_offgrid("run -n -1 -c 256 --temp 1 --top-k 0 --top-p 1 --min-p 0 -s 3 -p 'x'", cache_env(dir));
    ASSERT_EQ(r.status, 0) << r.err;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.err, m, std::regex("generated ([0-9]+) tokens.*stop: ([a-z ]+)\\)"))) << r.err;
    if (m[2].str() == "context full") {
        EXPECT_EQ(std::stoi(m[1].str()), 256);  // 1 prompt token + 255 decoded + the sampled one that did not fit
    } else {
        EXPECT_EQ(m[2].str(), "end of text");
        EXPECT_LE(std::stoi(m[1].str()), 256);
    }
}

TEST(Run, PromptFromFileEqualsPromptText) {
    TempDir dir;
    std::ofstream(dir.file("p.txt"), std::ios::binary) << "Numbers, names and punctuation";
    const CmdResult a = run_offgrid("run -n 10 --temp 0 -f " + q(dir.file("p.txt")), cache_env(dir));
    const CmdResult b = run_offgrid("run -n 10 --temp 0 -p 'Numbers, names and punctuation'", cache_env(dir));
    ASSERT_EQ(a.status, 0) << a.err;
    EXPECT_EQ(a.out, b.out);
    // The prompt count is the token count `offgrid tokenize` reports for the embedded vocabulary.
    const CmdResult ids = run_offgrid("tokenize --ids -f " + q(dir.file("p.txt")));
    ASSERT_EQ(ids.status, 0) << ids.err;
    size_t n_ids = 0;
    std::istringstream words(ids.out);
    for (std::string w; words >> w;) ++n_ids;
    EXPECT_GT(n_ids, 1u);
    EXPECT_NE(a.err.find("prompt " + std::to_string(n_ids) + " tokens"), std::string::npos) << a.err;
}

// Run 8 tokens at once, or 4 then save, load and 4 more: the same text (greedy).
TEST(Run, StateFileRoundTripThroughTheCommandLine) {
    TempDir dir;
    const std::string env = cache_env(dir), st = q(dir.file("s.state"));
    const CmdResult whole = run_offgrid("run -n 8 --temp 0 -p 'The laptop has no network'", env);
    ASSERT_EQ(whole.status, 0) << whole.err;
    const CmdResult first = run_offgrid("run -n 4 --temp 0 -p 'The laptop has no network' --state-save " + st, env);
    ASSERT_EQ(first.status, 0) << first.err;
    EXPECT_TRUE(fs::exists(dir.file("s.state")));
    const CmdResult second = run_offgrid("run -n 4 --temp 0 -p '' --state-load " + st, env);
    ASSERT_EQ(second.status, 0) << second.err;
    EXPECT_EQ(strip_newline(first.out) + strip_newline(second.out), strip_newline(whole.out));

    // Continuing with a new prompt after a run that generated nothing (no pending token) works too.
    ASSERT_EQ(run_offgrid("run -n 0 -p 'The laptop has' --state-save " + st, env).status, 0);
    const CmdResult cont = run_offgrid("run -n 6 --temp 0 -p ' no network' --state-load " + st, env);
    const CmdResult direct = run_offgrid("run -n 6 --temp 0 -p 'The laptop has no network'", env);
    ASSERT_EQ(cont.status, 0) << cont.err;
    EXPECT_EQ(cont.out, direct.out);
    expect_one_line_error(run_offgrid("run -n 4 -p '' --state-load " + st, env), "nothing to continue from");

    // Another model refuses the file, and says why.
    ASSERT_EQ(run_offgrid("gen-model --seed 9 -o " + q(dir.file("other.gguf"))).status, 0);
    expect_one_line_error(run_offgrid("run -m " + q(dir.file("other.gguf")) + " -p x --state-load " + st, env),
                          "another model");
}

// Save after a prompt, load into a fresh context, continue: the logits equal an uninterrupted run's exactly.
TEST(Run, StateFileRoundTripThroughTheApi) {
    TempDir dir;
    model::qwen4exp::write_model_file(model::qwen4exp::gen_preset("tiny"), dir.file("m.gguf"));
    model::qwen4exp::GenConfig other_cfg = model::qwen4exp::gen_preset("tiny");
    other_cfg.seed = 5;
    model::qwen4exp::write_model_file(other_cfg, dir.file("other.gguf"));
    auto model = Model::load(dir.file("m.gguf"));
    ContextParams cp;
    cp.n_ctx = 512;
    const std::vector<int32_t> prompt{72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100, 33, 10, 84, 104, 101, 32};
    const std::vector<int32_t> more{300, 12, 99, 0, 45, 46};

    auto decode_all = [&](Context & ctx, const std::vector<int32_t> & toks, bool one_by_one) {
        std::vector<std::vector<float>> rows;
        auto run = [&](const std::vector<BatchToken> & b) {
            ASSERT_TRUE(ctx.decode(b).ok());
            for (int32_t o = 0; o < ctx.n_outputs(); ++o) {
                rows.emplace_back(ctx.logits(o), ctx.logits(o) + model->n_vocab());
            }
        };
        if (one_by_one) {
            for (int32_t t : toks) run({BatchToken{t, -1, {0}, true}});
        } else {
            std::vector<BatchToken> b;
            for (int32_t t : toks) b.push_back({t, -1, {0}, false});
            b.back().output = true;
            run(b);
        }
        return rows;
    };

    Context uninterrupted(model, cp);
    decode_all(uninterrupted, prompt, false);
    const auto expected = decode_all(uninterrupted, more, true);

    {
        Context first(model, cp);
        decode_all(first, prompt, false);
        first.state_save_file(dir.file("api.state"), prompt);
    }
    Context second(model, cp);
    EXPECT_EQ(second.state_load_file(dir.file("api.state")), prompt);
    EXPECT_EQ(second.seq_pos_max(0), static_cast<int32_t>(prompt.size()) - 1);
    const auto got = decode_all(second, more, true);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(std::memcmp(got[i].data(), expected[i].data(), got[i].size() * sizeof(float)), 0) << "row " << i;
    }

    Context wrong(Model::load(dir.file("other.gguf")), cp);
    try {
        wrong.state_load_file(dir.file("api.state"));
        FAIL() << "a state of another model was accepted";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
    }
    EXPECT_EQ(wrong.seq_pos_max(0), -1);
}

}  // namespace
}  // namespace offgrid::test
