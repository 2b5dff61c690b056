// `offgrid bench` output formats, and ContextParams::qsa_dense (which the bench compares against) really
// switching QSA layers to dense attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <regex>

#include "cli_helpers.h"
#include "offgrid/context.h"
#include "model/qwen4exp/generator.h"

namespace offgrid::test {
namespace {

TEST(Bench, TableJsonAndPlot) {
    TempDir dir;
    const std::string model = dir.file("m.gguf");
    model::qwen4exp::write_model_file(model::qwen4exp::gen_preset("tiny"), model);
    const std::string base = "bench -m " + q(model) + " -d 0,200,100 -p 16 -n 4 -t 2";
    const CmdResult table = run_offgrid(base + " --plot " + q(dir.file("p.svg")));
    ASSERT_EQ(table.status, 0) << table.err;
    // Depths sorted and de-duplicated, both modes, one row each.
    for (const char * row : {"\\| sparse \\| +0 \\|", "\\| dense +\\| +0 \\|", "\\| sparse \\| +100 \\|",
                             "\\| dense +\\| +200 \\|"}) {
        EXPECT_TRUE(std::regex_search(table.out, std::regex(row))) << row << "\n" << table.out;
    }
    EXPECT_NE(table.out.find("pp16 t/s"), std::string::npos);
    const std::string svg = slurp(dir.file("p.svg"));
    EXPECT_EQ(svg.rfind("<svg", 0), 0u);
    EXPECT_NE(svg.find("</svg>"), std::string::npos);
    EXPECT_EQ(std::count(svg.begin(), svg.end(), '\n') > 10, true);
    size_t polylines = 0;
    for (size_t p = svg.find("<polyline"); p != std::string::npos; p = svg.find("<polyline", p + 1)) ++polylines;
    EXPECT_EQ(polylines, 2u);

    const CmdResult json = run_offgrid(base + " --mode sparse --json");
    ASSERT_EQ(json.status, 0) << json.err;
    // Valid JSON with 3 sparse results (python3 is part of the build environment).
    std::ofstream(dir.file("out.json"), std::ios::binary) << json.out;
    const std::string check = "python3 -c \"import json,sys; d=json.load(open(sys.argv[1])); r=d['results']; "
                              "assert [x['depth'] for x in r]==[0,100,200], r; "
                              "assert d['isa'] in ('scalar','avx2','avx512','amx') and d['isa_detected'] in ('scalar','avx2','avx512','amx'), d; "
                              "assert d['threads']>=1, d; assert d['activations'] in ('int16','int8','f32'), d; "
                              "assert all(x['mode']=='sparse' and x['n_prompt']==16 and x['n_gen']==4 and "
                              "x['gen_tokens_per_second']>0 and x['prompt_tokens_per_second']>0 for x in r)\" " +
                              q(dir.file("out.json"));
    EXPECT_EQ(std::system(check.c_str()), 0) << json.out;
}

// --act-quant fixes the process's activation mode before the model loads (over OFFGRID_QUANT_ACT); a name it
// does not know is a usage error.
TEST(Bench, ActivationModeFlag) {
    TempDir dir;
    const std::string model = dir.file("m.gguf");
    model::qwen4exp::write_model_file(model::qwen4exp::gen_preset("tiny"), model);
    const std::string base = "bench -m " + q(model) + " -d 0 -p 16 -n 2 -t 1 --mode sparse";
    for (const char * mode : {"int8", "f32", "int16"}) {
        const CmdResult r = run_offgrid(base + " --json --act-quant " + mode);
        ASSERT_EQ(r.status, 0) << r.err;
        EXPECT_NE(r.out.find(std::string("\"activations\": \"") + mode + "\""), std::string::npos) << r.out;
    }
    const CmdResult bad = run_offgrid(base + " --act-quant int4");
    EXPECT_EQ(bad.status, 2);
    EXPECT_NE(bad.err.find("int4"), std::string::npos) << bad.err;
}

TEST(Bench, ParallelSequencesTableAndJson) {
    TempDir dir;
    const std::string model = dir.file("m.gguf");
    model::qwen4exp::write_model_file(model::qwen4exp::gen_preset("tiny"), model);
    const std::string base = "bench -m " + q(model) + " -d 0,20 -n 3 -t 2 --parallel 3,2 -r 2";
    const CmdResult table = run_offgrid(base);
    ASSERT_EQ(table.status, 0) << table.err;
    // 1 is always measured (the ratio's base), then the counts in the order given, per depth.
    for (const char * row : {"\\| +1 \\| +0 \\| .*\\| +1\\.00 \\|", "\\| +3 \\| +0 \\|", "\\| +2 \\| +20 \\|"}) {
        EXPECT_TRUE(std::regex_search(table.out, std::regex(row))) << row << "\n" << table.out;
    }
    const CmdResult json = run_offgrid(base + " --json");
    ASSERT_EQ(json.status, 0) << json.err;
    std::ofstream(dir.file("par.json"), std::ios::binary) << json.out;
    const std::string check = "python3 -c \"import json,sys; d=json.load(open(sys.argv[1])); r=d['parallel']; "
                              "assert [(x['depth'],x['n_seq']) for x in r]==[(0,1),(0,3),(0,2),(20,1),(20,3),(20,2)], r; "
                              "assert d['repetitions']==2 and d['threads']==2, d; "
                              "assert all(x['steps']==3 and x['tokens_per_second']>0 and x['ratio_to_one']>0 for x in r); "
                              "assert all(x['ratio_to_one']==1.0 for x in r if x['n_seq']==1)\" " +
                              q(dir.file("par.json"));
    EXPECT_EQ(std::system(check.c_str()), 0) << json.out;
    EXPECT_NE(run_offgrid("bench -m " + q(model) + " --parallel 0").status, 0);
}

// Below the budget, QSA selects every pool anyway: sparse and dense logits are bit-identical. Past it they differ.
TEST(Bench, QsaDenseSwitchesTheQsaLayersToDenseAttention) {
    TempDir dir;
    model::qwen4exp::GenConfig cfg = model::qwen4exp::gen_preset("tiny");  // r = 4, top_k = 64
    model::qwen4exp::write_model_file(cfg, dir.file("m.gguf"));
    auto model = Model::load(dir.file("m.gguf"));
    ContextParams sp;
    sp.n_ctx = 512;
    ContextParams dp = sp;
    dp.qsa_dense = true;
    Context sparse(model, sp), dense(model, dp);
    auto last_row = [&](Context & ctx, const std::vector<int32_t> & toks) {
        std::vector<BatchToken> b;
        for (int32_t t : toks) b.push_back({t, -1, {0}, false});
        b.back().output = true;
        EXPECT_TRUE(ctx.decode(b).ok());
        return std::vector<float>(ctx.logits(0), ctx.logits(0) + model->n_vocab());
    };
    std::vector<int32_t> toks;
    for (int i = 0; i < 60; ++i) toks.push_back((i * 37 + 11) % 400);
    EXPECT_TRUE(last_row(sparse, toks) == last_row(dense, toks)) << "60 tokens fit the budget of 64";

    std::vector<int32_t> more;
    for (int i = 0; i < 300; ++i) more.push_back((i * 53 + 7) % 400);
    const auto s = last_row(sparse, more), d = last_row(dense, more);
    double max_diff = 0;
    for (size_t i = 0; i < s.size(); ++i) max_diff = std::max<double>(max_diff, std::fabs(s[i] - d[i]));
    EXPECT_GT(max_diff, 1e-4) << "at 360 tokens sparse QSA reads 16 of 90 pools; dense must differ";

    // The bench moves a filled state into its dense context: a dense context restored from a state continues
    // exactly like the one that wrote it.
    Context dense2(model, dp);
    dense2.state_set(dense.state_get());
    const auto a = last_row(dense, {5}), b = last_row(dense2, {5});
    EXPECT_TRUE(a == b);
}

}  // namespace
}  // namespace offgrid::test
