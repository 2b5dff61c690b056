// glm5-next: loading and its checks, the engine against the plain reference forward (sparse and dense, the
// spec's variants), and the engine-against-engine equivalences of the batch layout, streams, state round
// trips and sequence edits.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "model/glm5next/gen_model.h"
#include "model/glm5next/model.h"
#include "offgrid/context.h"
#include "reference.h"

namespace {

using offgrid::BatchToken;
using offgrid::Context;
using offgrid::ContextParams;
using offgrid::model::glm5next::GenConfig;
using Rows = std::vector<std::vector<float>>;
namespace glm = offgrid::model::glm5next;

std::string temp_path() {
    static std::atomic<int> counter{0};
    return (std::filesystem::temp_directory_path() /
            ("offgrid_glm5next_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + ".gguf"))
        .string();
}

std::shared_ptr<const offgrid::Model> load(const offgrid::gguf::Writer & w) {
    const std::string path = temp_path();
    w.write_file(path);
    auto model = offgrid::Model::load(path);
    std::filesystem::remove(path);  // the mapping stays valid
    return model;
}

std::shared_ptr<const offgrid::Model> model_of(const GenConfig & c) { return load(glm::generate_model(c)); }

std::shared_ptr<const offgrid::Model> tiny(const std::string & preset = "tiny") {
    static std::map<std::string, std::shared_ptr<const offgrid::Model>> cache;
    auto & m = cache[preset];
    if (!m) m = model_of(glm::gen_preset(preset));
    return m;
}

const glm::Model & impl(const offgrid::Model & m) { return dynamic_cast<const glm::Model &>(m.impl()); }

ContextParams params(uint32_t n_seq_max = 1, bool unified = false) {
    ContextParams p;
    p.n_ctx = 1024 * n_seq_max;
    p.n_seq_max = n_seq_max;
    p.unified = unified;
    p.type_k = p.type_v = "f32";
    return p;
}

std::vector<int32_t> tokens(int n, uint32_t seed, int32_t n_vocab = 128) {
    std::vector<int32_t> out;
    uint32_t x = seed * 2654435761u + 1;
    for (int i = 0; i < n; ++i) {
        x = x * 1664525u + 1013904223u;
        out.push_back(static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(n_vocab)));
    }
    return out;
}

Rows decode(Context & ctx, int32_t seq, const std::vector<int32_t> & toks, size_t chunk = SIZE_MAX) {
    Rows rows;
    const int32_t n_vocab = ctx.model().n_vocab();
    for (size_t i = 0; i < toks.size(); i += chunk) {
        std::vector<BatchToken> b;
        const int32_t p0 = ctx.seq_pos_max(seq) + 1;
        for (size_t j = i; j < std::min(toks.size(), i + chunk); ++j) {
            b.push_back({toks[j], p0 + static_cast<int32_t>(j - i), {seq}, true});
        }
        const auto r = ctx.decode(b);
        EXPECT_TRUE(r.ok()) << r.message;
        for (int32_t k = 0; k < ctx.n_outputs(); ++k) rows.emplace_back(ctx.logits(k), ctx.logits(k) + n_vocab);
    }
    return rows;
}

double max_diff(const Rows & a, const Rows & b) {
    EXPECT_EQ(a.size(), b.size());
    double worst = 0;
    for (size_t r = 0; r < std::min(a.size(), b.size()); ++r) {
        EXPECT_EQ(a[r].size(), b[r].size());
        for (size_t i = 0; i < std::min(a[r].size(), b[r].size()); ++i) {
            const double d = std::fabs(double(a[r][i]) - double(b[r][i]));
            worst = std::max(worst, std::isnan(d) ? 1e30 : d);
        }
    }
    return worst;
}

void expect_close(const char * what, const Rows & a, const Rows & b, double tol) {
    const double d = max_diff(a, b);
    std::printf("[glm5-next] %s: %zu rows, max |diff| %.3g (tolerance %.0e)\n", what, a.size(), d, tol);
    EXPECT_LE(d, tol) << what;
}

Rows tail(const Rows & rows, size_t n) { return Rows(rows.end() - static_cast<long>(n), rows.end()); }

// ---------------------------------------------------------------- loading

TEST(Glm5Next, LoadsTheTinyPresetWithItsCacheShape) {
    const auto m = tiny();
    EXPECT_EQ(m->architecture(), "glm5-next");
    const glm::Model & g = impl(*m);
    const auto s = g.cache_shape(offgrid::tensor::ElemType::F32, offgrid::tensor::ElemType::F32);
    EXPECT_EQ(s.n_attn_layers(), 2u);
    EXPECT_EQ(s.n_recr_layers(), 4u);
    for (uint32_t l = 0; l < 2; ++l) {
        EXPECT_EQ(s.attn(l).k_width, 32u);   // the latent R
        EXPECT_EQ(s.attn(l).v_width, 0u);    // no V cache
        EXPECT_EQ(s.attn(l).idx_width, 16u);
        EXPECT_EQ(s.attn(l).idx_parts, 3u);  // key | gate | pooled
    }
    for (uint32_t l = 0; l < 4; ++l) {
        EXPECT_EQ(s.recr(l).conv_floats, 3u * 3u * 64u);
        EXPECT_EQ(s.recr(l).state_floats, 16u * 16u * 4u);
    }
    EXPECT_EQ(g.memory_traits().kpool, 4u);
    EXPECT_FALSE(g.memory_traits().kpool_by_order);
    EXPECT_FALSE(g.hparams().idx_full[5]);
    EXPECT_NE(m->describe().find("glm5-next"), std::string::npos);
    Context ctx(m, params());
    EXPECT_EQ(ctx.memory_breakdown().attention_bytes, 1024ull * 32 * 4 * 2);  // K only: 2 layers x 1024 cells x R
}

TEST(Glm5Next, LoadRefusesWhatTheSpecForbids) {
    struct Case {
        const char * what;
        std::function<void(offgrid::gguf::Writer &)> edit;
        const char * needle;
    };
    const std::string a = "glm5-next.";
    const std::vector<Case> cases = {
        {"key_length != kv_lora_rank", [&](auto & w) { w.set_u32(a + "attention.key_length", 16); }, "attention.key_length"},
        {"rope dims", [&](auto & w) { w.set_u32(a + "rope.dimension_count", 8); }, "rope.dimension_count"},
        {"rope dims absent", [&](auto & w) { w.erase(a + "rope.dimension_count"); }, "rope.dimension_count"},
        {"kpool 1", [&](auto & w) { w.set_u32(a + "attention.indexer.kpool", 1); }, "kpool"},
        {"top_k not a multiple", [&](auto & w) { w.set_u32(a + "attention.indexer.top_k", 6); }, "top_k"},
        {"hc 3", [&](auto & w) { w.set_u32(a + "hyper_connection.count", 3); }, "hyper_connection.count"},
        {"no sinkhorn", [&](auto & w) { w.set_u32(a + "hyper_connection.sinkhorn_iterations", 0); }, "sinkhorn"},
        {"no tail", [&](auto & w) { w.set_bool(a + "attention.indexer.kpool_select_tail", false); }, "kpool_select_tail"},
        {"kv 2", [&](auto & w) { w.set_u32s(a + "attention.head_count_kv", {0, 0, 0, 2, 0, 1}); }, "head_count_kv"},
        {"kv length", [&](auto & w) { w.set_u32s(a + "attention.head_count_kv", {0, 0, 0, 1, 0}); }, "head_count_kv"},
        {"types length", [&](auto & w) { w.set_bools(a + "attention.indexer.types", {true, true}); }, "indexer.types"},
        {"first DSA shared", [&](auto & w) { w.set_bools(a + "attention.indexer.types", {1, 1, 1, 0, 1, 1}); }, "indexer.types"},
        {"missing mla key", [&](auto & w) { w.erase(a + "attention.kv_lora_rank"); }, "kv_lora_rank"},
        {"gating softmax", [&](auto & w) { w.set_u32(a + "expert_gating_func", 1); }, "expert_gating_func"},
        {"expert groups", [&](auto & w) { w.set_u32(a + "expert_group_count", 2); }, "expert_group_count"},
        {"fused kda qkv", [&](auto & w) { w.add_tensor_f32("blk.0.attn_qkv.weight", {64, 192}, offgrid::tensor::ElemType::F32, std::vector<float>(64 * 192)); }, "attn_qkv"},
        {"no output", [&](auto & w) { w.set_string("general.architecture", "glm5next"); }, "general.architecture"},
    };
    for (const Case & c : cases) {
        offgrid::gguf::Writer w = glm::generate_model(glm::gen_preset("tiny"));
        c.edit(w);
        try {
            load(w);
            ADD_FAILURE() << c.what << ": loaded";
        } catch (const std::exception & e) {
            EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << c.what << ": " << e.what();
        }
    }
}

TEST(Glm5Next, AbsentLayerNormEpsilonIsZeroAsTheReference) {
    offgrid::gguf::Writer w = glm::generate_model(glm::gen_preset("tiny"));
    w.erase("glm5-next.attention.layer_norm_epsilon");
    EXPECT_EQ(impl(*load(w)).hparams().ln_eps, 0.0f);
}

TEST(Glm5Next, MtpBlockLoadsAndTheFileStillRuns) {
    GenConfig c = glm::gen_preset("tiny");
    c.nextn = true;
    const auto with = model_of(c);
    EXPECT_TRUE(impl(*with).has_mtp());
    EXPECT_EQ(impl(*with).hparams().n_layer, 6u);
    const auto without = tiny();
    const auto toks = tokens(40, 3);
    Context a(with, params()), b(without, params());
    // The trunk weights are seeded by name, so the MTP block changes nothing the trunk computes.
    expect_close("file with MTP vs without", decode(b, 0, toks), decode(a, 0, toks), 0.0);
}

// ---------------------------------------------------------------- engine vs reference

Rows reference(const offgrid::Model & m, const std::vector<int32_t> & toks, bool dense = false) {
    offgrid::test::GlmReferenceOptions o;
    o.dense = dense;
    return offgrid::test::glm_reference(impl(m), toks, o);
}

TEST(Glm5Next, EngineEqualsReferenceSparse512Tokens) {
    const auto m = tiny();
    const auto toks = tokens(512, 1);
    Context ctx(m, params());
    const Rows got = decode(ctx, 0, toks, 64);
    expect_close("engine vs reference, sparse (top_k 8), 512 tokens", reference(*m, toks), got, 1e-4);
    // Every token attends to at most 2 whole pools and a tail of at most 3 cells (the reference's explicit sets).
    size_t most = 0;
    for (const auto & sel : offgrid::test::glm_reference_selections()) most = std::max(most, sel.size());
    EXPECT_EQ(most, 11u);
    // The sparse selection really matters here: the dense reference is far from it.
    EXPECT_GT(max_diff(reference(*m, toks, true), got), 1e-2);
}

TEST(Glm5Next, EngineEqualsReferenceDense512Tokens) {
    const auto m = tiny("tiny-dense");
    const auto toks = tokens(512, 2);
    Context ctx(m, params());
    expect_close("engine vs reference, dense (top_k 131072), 512 tokens", reference(*m, toks), decode(ctx, 0, toks, 100), 1e-4);
    // Forced dense on the sparse model is the same as the dense budget.
    ContextParams pd = params();
    pd.qsa_dense = true;
    Context forced(tiny(), pd);
    expect_close("engine forced dense vs reference dense", reference(*tiny(), toks, true), decode(forced, 0, toks, 100), 1e-4);
}

TEST(Glm5Next, VariantsEqualReference) {
    struct Variant {
        const char * what;
        std::function<void(GenConfig &)> edit;
    };
    const std::vector<Variant> variants = {
        {"softplus decay (no gate_lower_bound)", [](GenConfig & c) { c.bounded_decay = false; }},
        {"no clamp keys", [](GenConfig & c) { c.clamp = false; }},
        {"f16 weights", [](GenConfig & c) { c.weight_type = offgrid::tensor::ElemType::F16; }},
    };
    for (const Variant & v : variants) {
        GenConfig c = glm::gen_preset("tiny");
        v.edit(c);
        const auto m = model_of(c);
        const auto toks = tokens(160, 5);
        Context ctx(m, params());
        expect_close(v.what, reference(*m, toks), decode(ctx, 0, toks, 33), 1e-4);
    }
}

// F16 latents and indexer rows round at 1e-3 relative; with dense selection (no pool choice to flip) the logits
// stay close to the F32 reference.
TEST(Glm5Next, F16CachesStayCloseToTheReference) {
    const auto m = tiny("tiny-dense");
    const auto toks = tokens(128, 6);
    ContextParams p = params();
    p.type_k = p.type_v = "f16";
    Context ctx(m, p);
    expect_close("f16 caches vs reference (dense selection)", reference(*m, toks), decode(ctx, 0, toks, 16), 5e-2);
}

// The embeddings' hidden state is the head's input, RMSNorm(mean of the streams) * output_norm.
TEST(Glm5Next, HiddenStatesEqualTheReferences) {
    const auto m = tiny();
    const auto toks = tokens(64, 30);
    Rows want;
    offgrid::test::glm_reference(impl(*m), toks, {}, &want);
    ContextParams p = params();
    p.embeddings = true;
    Context ctx(m, p);
    std::vector<BatchToken> b;
    for (size_t i = 0; i < toks.size(); ++i) b.push_back({toks[i], static_cast<int32_t>(i), {0}, true});
    ASSERT_TRUE(ctx.decode(b).ok());
    Rows got;
    for (int32_t i = 0; i < ctx.n_outputs(); ++i) got.emplace_back(ctx.embeddings(i), ctx.embeddings(i) + m->n_embd());
    expect_close("hidden states vs reference", want, got, 1e-4);
}

// ---------------------------------------------------------------- engine vs engine

TEST(Glm5Next, OneBatchEqualsTokenByTokenEqualsChunksOf7EqualsUbatch5) {
    const auto toks = tokens(200, 7);
    Context one(tiny(), params());
    const Rows ref = decode(one, 0, toks);
    Context each(tiny(), params());
    expect_close("token by token vs one batch", ref, decode(each, 0, toks, 1), 1e-5);
    Context chunks(tiny(), params());
    expect_close("chunks of 7 vs one batch", ref, decode(chunks, 0, toks, 7), 1e-5);
    ContextParams p5 = params();
    p5.n_ubatch = 5;
    Context ub5(tiny(), p5);
    expect_close("ubatch 5 vs one batch", ref, decode(ub5, 0, toks), 1e-5);
}

TEST(Glm5Next, ResultsDoNotDependOnTheThreadCount) {
    const auto toks = tokens(90, 31);
    Context one(tiny(), params());
    ContextParams p3 = params();
    p3.n_threads = 3;
    Context three(tiny(), p3);
    expect_close("3 threads vs 1", decode(one, 0, toks, 9), decode(three, 0, toks, 9), 0.0);
}

// A step of several sequences, one token each (how a server decodes), takes another path through the KDA layers
// (every conv first, then all (sequence, head) pairs on the pool): each sequence's logits equal its own run alone,
// bit for bit, with 1 and 2 threads.
TEST(Glm5Next, StepsOfOneTokenPerSequenceEqualEachSequenceAlone) {
    constexpr int32_t kSeqs = 4, kSteps = 6;
    std::vector<std::vector<int32_t>> prompt, gen;
    for (int32_t s = 0; s < kSeqs; ++s) {
        prompt.push_back(tokens(20 + 7 * s, 200 + s));
        gen.push_back(tokens(kSteps, 300 + s));
    }
    for (int threads : {1, 2}) {
        SCOPED_TRACE(threads);
        ContextParams p = params(kSeqs);
        p.n_threads = threads;
        Context together(tiny(), p);
        for (int32_t s = 0; s < kSeqs; ++s) decode(together, s, prompt[s]);
        std::vector<Rows> got(kSeqs);
        const int32_t n_vocab = together.model().n_vocab();
        for (int32_t step = 0; step < kSteps; ++step) {
            std::vector<BatchToken> b;
            for (int32_t s = 0; s < kSeqs; ++s) b.push_back({gen[s][step], together.seq_pos_max(s) + 1, {s}, true});
            ASSERT_TRUE(together.decode(b).ok());
            for (int32_t s = 0; s < kSeqs; ++s) got[s].emplace_back(together.logits(s), together.logits(s) + n_vocab);
        }
        for (int32_t s = 0; s < kSeqs; ++s) {
            Context alone(tiny(), params());
            decode(alone, 0, prompt[s]);
            expect_close("one token per sequence vs alone", decode(alone, 0, gen[s], 1), got[s], 0.0);
        }
    }
}

TEST(Glm5Next, UnifiedEqualsPerSequenceStreams) {
    auto run = [](bool unified) {
        Context ctx(tiny(), params(4, unified));
        Rows rows;
        const int32_t n_vocab = ctx.model().n_vocab();
        for (int call = 0; call < 10; ++call) {
            std::vector<BatchToken> b;
            for (int32_t s = 0; s < 4; ++s) {
                const auto t = tokens(5 + s, 100 * call + s);
                const int32_t p0 = ctx.seq_pos_max(s) + 1;
                for (size_t j = 0; j < t.size(); ++j) b.push_back({t[j], p0 + static_cast<int32_t>(j), {s}, true});
            }
            EXPECT_TRUE(ctx.decode(b).ok());
            for (int32_t k = 0; k < ctx.n_outputs(); ++k) rows.emplace_back(ctx.logits(k), ctx.logits(k) + n_vocab);
        }
        return rows;
    };
    expect_close("unified vs per-sequence streams", run(true), run(false), 1e-5);
}

TEST(Glm5Next, SaveRestoreContinueEqualsUninterrupted) {
    const auto a = tokens(150, 8), b = tokens(60, 9);
    Context ref(tiny(), params(2));
    decode(ref, 1, a);
    const Rows want = decode(ref, 1, b);
    Context first(tiny(), params(2));
    decode(first, 1, a);
    const auto whole = first.state_get();
    const auto one = first.state_get(1);
    Context second(tiny(), params(2));
    second.state_set(whole);
    expect_close("whole-state restore + continue vs uninterrupted", want, decode(second, 1, b), 1e-6);
    Context third(tiny(), params(2));
    third.state_set(one, 0);
    expect_close("sequence restore into another id + continue vs uninterrupted", want, decode(third, 0, b), 1e-6);
}

TEST(Glm5Next, RollbackOfASuffixAndRedecodeEqualsFresh) {
    ContextParams p = params();
    p.n_rs_seq = 4;
    const auto prefix = tokens(120, 10), last = tokens(8, 11), redo = tokens(3, 12), more = tokens(30, 13);
    Context edited(tiny(), p);
    decode(edited, 0, prefix);
    decode(edited, 0, last);
    ASSERT_TRUE(edited.seq_rm(0, 120 + 5, -1));  // the last 3 tokens: within the 4 snapshots
    EXPECT_EQ(edited.seq_pos_max(0), 124);
    Rows got = decode(edited, 0, redo);
    const Rows got_more = decode(edited, 0, more);
    got.insert(got.end(), got_more.begin(), got_more.end());
    Context fresh(tiny(), p);
    std::vector<int32_t> all = prefix;
    all.insert(all.end(), last.begin(), last.begin() + 5);
    all.insert(all.end(), redo.begin(), redo.end());
    all.insert(all.end(), more.begin(), more.end());
    expect_close("rollback + re-decode vs fresh", tail(decode(fresh, 0, all), redo.size() + more.size()), got, 1e-5);
    // Beyond the snapshots the rollback is refused and nothing changes.
    EXPECT_FALSE(edited.seq_rm(0, 120, -1));
}

TEST(Glm5Next, CopyThenDivergentContinuationsEqualFresh) {
    for (bool unified : {true, false}) {
        SCOPED_TRACE(unified ? "unified" : "per-sequence streams");
        const auto prefix = tokens(90, 14), a = tokens(70, 15), b = tokens(50, 16);
        Context ctx(tiny(), params(2, unified));
        decode(ctx, 0, prefix);
        ctx.seq_cp(0, 1);
        const Rows got_a = decode(ctx, 0, a, 13);
        const Rows got_b = decode(ctx, 1, b, 11);
        auto fresh = [&](const std::vector<int32_t> & cont) {
            Context f(tiny(), params());
            std::vector<int32_t> all = prefix;
            all.insert(all.end(), cont.begin(), cont.end());
            return tail(decode(f, 0, all), cont.size());
        };
        expect_close("copy, continuation A vs fresh", fresh(a), got_a, 1e-5);
        expect_close("copy, continuation B vs fresh", fresh(b), got_b, 1e-5);
    }
}

}  // namespace

namespace {

// ---------------------------------------------------------------- position-mode gaps (spec 5.4, H8)

// With KDA layers a removal in the middle of a sequence is refused (the recurrent state holds every position),
// and the sequence continues as if nothing had been asked.
TEST(Glm5Next, MiddleRemovalIsRefusedWithRecurrentLayers) {
    const auto a = tokens(16, 20), b = tokens(10, 21);
    Context plain(tiny(), params());
    decode(plain, 0, a);
    Context edited(tiny(), params());
    decode(edited, 0, a);
    EXPECT_FALSE(edited.seq_rm(0, 5, 7));
    EXPECT_EQ(edited.seq_pos_max(0), 15);
    expect_close("refused middle removal + continue vs plain", decode(plain, 0, b), decode(edited, 0, b), 0.0);
}

// Without recurrent layers the removal happens, and pools stay fixed by position: after removing positions 5..6
// the block [4, 8) is incomplete, so positions 4 and 7 are in no pool and in no later token's tail and are never
// attended again, even with dense selection. The continuation then equals one where the whole block was removed.
TEST(Glm5Next, AGapHidesTheRestOfItsBlockForever) {
    GenConfig c = glm::gen_preset("tiny-dense");
    c.layer_kinds = {1, 1, 1};
    c.indexer_types = {1, 1, 0};
    const auto m = model_of(c);
    const auto a = tokens(16, 22), b = tokens(10, 23);
    auto continuation = [&](int32_t p0, int32_t p1) {
        Context ctx(m, params());
        decode(ctx, 0, a);
        EXPECT_TRUE(ctx.seq_rm(0, p0, p1));
        return decode(ctx, 0, b);
    };
    const Rows gap = continuation(5, 7), block = continuation(4, 8);
    expect_close("gap 5..6 vs whole block 4..7 removed", block, gap, 0.0);
    // The control: without any removal the continuation differs (the hidden cells did matter).
    Context whole(m, params());
    decode(whole, 0, a);
    EXPECT_GT(max_diff(decode(whole, 0, b), gap), 1e-3);
}

// ---------------------------------------------------------------- the command line

#ifdef OFFGRID_BINARY
std::string run(const std::string & args, int * status) {
    const std::string out = temp_path() + ".out";
    *status = std::system((std::string("'") + OFFGRID_BINARY + "' " + args + " >'" + out + "' 2>&1 </dev/null").c_str());
    std::ifstream in(out);
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::filesystem::remove(out);
    return s;
}

TEST(Glm5Next, CommandLineGeneratesListsRunsAndReplaysIt) {
    const std::string dir = temp_path() + ".d";
    std::filesystem::create_directories(dir);
    const std::string file = dir + "/g.gguf";
    int st = 0;
    std::string out = run("gen-model --arch glm5-next --preset tiny --softplus-decay --mtp -o '" + file + "'", &st);
    ASSERT_EQ(st, 0) << out;
    EXPECT_NE(out.find("glm5-next 'tiny'"), std::string::npos) << out;
    out = run("gguf-info '" + file + "'", &st);
    EXPECT_EQ(st, 0) << out;
    EXPECT_NE(out.find("\"glm5-next\""), std::string::npos);
    EXPECT_NE(out.find("blk.6.nextn.eh_proj.weight"), std::string::npos);
    out = run("run -m '" + file + "' -p 'hello' -n 6", &st);
    EXPECT_EQ(st, 0) << out;
    {
        std::ofstream w(dir + "/w.txt");
        w << "set type_k f32\nset type_v f32\ndecode 0 rand(40,1)\ngen 0 4\n";
    }
    out = run("replay '" + file + "' '" + dir + "/w.txt' -o '" + dir + "/out.txt'", &st);
    EXPECT_EQ(st, 0) << out;
    EXPECT_TRUE(std::filesystem::file_size(dir + "/out.txt") > 0);
    out = run("embed -m '" + file + "' -p 'hello' --pooling last", &st);
    EXPECT_EQ(st, 0) << out;
    EXPECT_NE(out.find("n_embd 64, pooling last, glm5-next"), std::string::npos) << out;
    out = run("gen-model --arch glm5-next --layers KX -o '" + dir + "/bad.gguf'", &st);
    EXPECT_NE(st, 0);
    EXPECT_NE(out.find("--layers"), std::string::npos) << out;
    std::filesystem::remove_all(dir);
}
#endif

}  // namespace
