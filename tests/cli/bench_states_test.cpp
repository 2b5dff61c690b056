// `offgrid bench --save-states / --load-state / --compare`: saved depths restore the very context that filled
// them, a run started from a saved state fills on to exactly the same deeper states, llama.cpp's curve reaches
// the plot, and bad state or compare files stop the command with one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <vector>

#include "cli_helpers.h"
#include "offgrid/context.h"
#include "model/qwen4exp/generator.h"

namespace offgrid::test {
namespace {

size_t count_of(const std::string & text, const std::string & what) {
    size_t n = 0;
    for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
    return n;
}

std::vector<float> decode_one(Context & ctx, int32_t token) {
    EXPECT_TRUE(ctx.decode({BatchToken{token, -1, {0}, true}}).ok());
    return std::vector<float>(ctx.logits(0), ctx.logits(0) + ctx.model().n_vocab());
}

class BenchStates : public ::testing::Test {
protected:
    void SetUp() override {
        model_ = dir_.file("m.gguf");
        model::qwen4exp::write_model_file(model::qwen4exp::gen_preset("tiny"), model_);
        fs::create_directories(dir_.file("a"));
        // Depth 100 is past the tiny model's budget of 64 tokens, so its sparse layers select.
        const CmdResult r = run_offgrid("bench -m " + q(model_) + " -d 40,100 -p 8 -n 3 -t 2 --mode sparse --save-states " +
                                        q(dir_.file("a")));
        ASSERT_EQ(r.status, 0) << r.err;
    }
    TempDir dir_;
    std::string model_;
};

TEST_F(BenchStates, SavedStatesContinueTheSequenceThatFilledThem) {
    const auto model = Model::load(model_);
    ContextParams cp;
    cp.n_ctx = model->n_ctx_train();  // what the bench uses with state files
    cp.n_threads = 2;
    Context at40(model, cp), at100(model, cp), fresh(model, cp);
    const std::vector<int32_t> t40 = at40.state_load_file(dir_.file("a/depth-40.ogstate"));
    const std::vector<int32_t> t100 = at100.state_load_file(dir_.file("a/depth-100.ogstate"));
    ASSERT_EQ(t40.size(), 40u);
    ASSERT_EQ(t100.size(), 100u);
    EXPECT_EQ(at40.seq_pos_max(0), 39);
    EXPECT_EQ(at100.seq_pos_max(0), 99);
    EXPECT_TRUE(std::equal(t40.begin(), t40.end(), t100.begin())) << "one filled sequence, two depths";

    // The run that filled it: the same tokens decoded from an empty context, in the bench's calls (one call per
    // depth step), then one more token.
    auto call = [&](Context & ctx, size_t from, size_t to) {
        std::vector<BatchToken> b;
        for (size_t i = from; i < to; ++i) b.push_back({t100[i], -1, {0}, i + 1 == to});
        ASSERT_TRUE(ctx.decode(b).ok());
    };
    call(fresh, 0, 40);
    Context fresh40(model, cp);
    fresh40.state_set(fresh.state_get());
    EXPECT_EQ(decode_one(fresh40, 7), decode_one(at40, 7)) << "state at depth 40";
    call(fresh, 40, 100);
    EXPECT_EQ(decode_one(fresh, 11), decode_one(at100, 11)) << "state at depth 100";
    // And depth 40 continued by hand with the saved tokens reaches the depth-100 state.
    Context cont(model, cp);
    cont.state_load_file(dir_.file("a/depth-40.ogstate"));
    call(cont, 40, 100);
    Context again100(model, cp);
    again100.state_load_file(dir_.file("a/depth-100.ogstate"));
    EXPECT_EQ(decode_one(cont, 11), decode_one(again100, 11)) << "continued from depth 40";
}

TEST_F(BenchStates, LoadedRunFillsOnToTheSameStatesAndPlotsTheComparison) {
    fs::create_directories(dir_.file("b"));
    // llama-bench -o json: a prompt record (ignored by the decode plot) and decode records at two depths.
    std::ofstream(dir_.file("peer.json"))
        << R"([{"model_type":"x","n_prompt":512,"n_gen":0,"n_depth":0,"avg_ts":300.5},
               {"model_type":"x","n_prompt":0,"n_gen":16,"n_depth":100,"avg_ts":40.0},
               {"model_type":"x","n_prompt":0,"n_gen":16,"n_depth":0,"avg_ts":60.0}])";
    const CmdResult r = run_offgrid("bench -m " + q(model_) + " --load-state " + q(dir_.file("a/depth-40.ogstate")) +
                                    " -d 40,100 -p 8 -n 3 -t 2 --mode sparse --json --save-states " + q(dir_.file("b")) +
                                    " --plot " + q(dir_.file("p.svg")) + " --compare " + q(dir_.file("peer.json")));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("\"depth\": 40,"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"depth\": 100,"), std::string::npos) << r.out;
    // The loaded run filled 40 -> 100 itself: its state is byte for byte the one of the run that filled 0 -> 100.
    EXPECT_EQ(slurp(dir_.file("b/depth-100.ogstate")), slurp(dir_.file("a/depth-100.ogstate")));
    EXPECT_EQ(slurp(dir_.file("b/depth-40.ogstate")), slurp(dir_.file("a/depth-40.ogstate")));
    const std::string svg = slurp(dir_.file("p.svg"));
    EXPECT_EQ(count_of(svg, "<polyline"), 2u) << svg;  // sparse and llama.cpp
    EXPECT_EQ(count_of(svg, ">llama.cpp</text>"), 1u) << svg;
    EXPECT_EQ(count_of(svg, "<circle"), 4u) << svg;  // two depths each

    // Only the state: its depth alone.
    const CmdResult only = run_offgrid("bench -m " + q(model_) + " --load-state " + q(dir_.file("a/depth-100.ogstate")) +
                                       " -p 0 -n 2 -t 1 --mode dense --json");
    ASSERT_EQ(only.status, 0) << only.err;
    EXPECT_EQ(count_of(only.out, "\"mode\": \"dense\", \"depth\": 100,"), 1u) << only.out;
}

TEST_F(BenchStates, BadStateAndCompareFilesGiveOneLine) {
    const std::string base = "bench -m " + q(model_) + " -p 4 -n 2 -t 1 ";
    const std::string good = slurp(dir_.file("a/depth-40.ogstate"));
    std::ofstream(dir_.file("cut.ogstate"), std::ios::binary) << good.substr(0, good.size() / 2);
    expect_one_line_error(run_offgrid(base + "--load-state " + q(dir_.file("cut.ogstate"))), "cut.ogstate");
    expect_one_line_error(run_offgrid(base + "--load-state " + q(dir_.file("none.ogstate"))), "none.ogstate");
    // Another context shape (cells) and another cache type.
    expect_one_line_error(run_offgrid(base + "-c 1024 --load-state " + q(dir_.file("a/depth-40.ogstate"))),
                          "cells_per_stream");
    expect_one_line_error(run_offgrid(base + "-ctk f32 --load-state " + q(dir_.file("a/depth-40.ogstate"))), "type_k");
    // Another model.
    model::qwen4exp::GenConfig other = model::qwen4exp::gen_preset("tiny");
    other.seed = 2;
    model::qwen4exp::write_model_file(other, dir_.file("other.gguf"));
    expect_one_line_error(run_offgrid("bench -m " + q(dir_.file("other.gguf")) + " -p 4 -n 2 --load-state " +
                                      q(dir_.file("a/depth-40.ogstate"))),
                          "model fingerprint");
    // A depth below the loaded one.
    expect_one_line_error(run_offgrid(base + "-d 10 --load-state " + q(dir_.file("a/depth-40.ogstate"))), "below");

    const std::string plot = " --plot " + q(dir_.file("x.svg")) + " --compare ";
    std::ofstream(dir_.file("notjson.json")) << "[{\"n_prompt\": 0,";
    expect_one_line_error(run_offgrid(base + plot + q(dir_.file("notjson.json"))), "not valid JSON");
    std::ofstream(dir_.file("noavg.json")) << R"([{"n_prompt":0,"n_gen":16,"n_depth":0}])";
    expect_one_line_error(run_offgrid(base + plot + q(dir_.file("noavg.json"))), "record 0: no non-negative number 'avg_ts'");
    std::ofstream(dir_.file("pp.json")) << R"([{"n_prompt":512,"n_gen":0,"n_depth":0,"avg_ts":3}])";
    expect_one_line_error(run_offgrid(base + plot + q(dir_.file("pp.json"))), "no decode record");
    EXPECT_FALSE(fs::exists(dir_.file("x.svg")));
}

}  // namespace
}  // namespace offgrid::test
