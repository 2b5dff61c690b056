// The MTP head against the plain reference of qwen4exp-mtp.md 3.2 (both hnorm modes, chained h_out), and the
// loading rules of MTP-only draft files (spec 2.4, 5.9).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/qwen4exp/model.h"
#include "model/qwen4exp/mtp_head.h"
#include "model/qwen4exp/mtp_draft_file.h"
#include "spec/mtp_reference.h"
#include "spec/spec_helpers.h"

namespace offgrid::spec_test {
namespace {

namespace q4 = model::qwen4exp;

const q4::Model & qwen(const Model & m) { return dynamic_cast<const q4::Model &>(m.impl()); }

// Largest |a - b| relative to max(1, |b|).
double max_rel_diff(const std::vector<float> & a, const std::vector<float> & b) {
    EXPECT_EQ(a.size(), b.size());
    double d = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i]))));
    return d;
}

void check_head_against_reference(q4::HnormMode mode) {
    const auto model = load_generated(mtp_config(), "head");
    const q4::Model & m = qwen(*model);
    ASSERT_TRUE(m.weights().mtp.present);
    const q4::MtpHead head(m.hparams(), m.weights().mtp, m.weights().token_embd, m.weights().output, mode);
    const size_t W = head.wide_width(), V = head.n_vocab();
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    // Rows 0..5 caught up (K/V only), rows 6..9 full steps, each step's hidden the previous step's h_out.
    const int n_catch = 6, n_step = 4;
    std::vector<RefRow> rows;
    for (int i = 0; i < n_catch + 1; ++i) {
        RefRow r{int32_t(1 + (i * 37) % 255), i, std::vector<float>(W)};
        for (float & x : r.h) x = nd(rng) * 3.0f;
        rows.push_back(r);
    }
    q4::MtpCache cache;
    std::vector<int32_t> toks, pos;
    std::vector<float> hs;
    for (int i = 0; i < n_catch; ++i) {
        toks.push_back(rows[i].token);
        pos.push_back(rows[i].pos);
        hs.insert(hs.end(), rows[i].h.begin(), rows[i].h.end());
    }
    head.catch_up(cache, toks.data(), pos.data(), hs.data(), toks.size());
    EXPECT_EQ(cache.n, size_t(n_catch));

    std::vector<float> logits(V), h = rows[n_catch].h, h_out(W);
    std::vector<RefRow> ref_rows(rows.begin(), rows.begin() + n_catch + 1);
    int32_t tok = rows[n_catch].token;
    std::vector<std::vector<float>> eng_logits, eng_h;
    for (int j = 0; j < n_step; ++j) {
        head.step(cache, tok, n_catch + j, h.data(), logits.data(), h_out.data());
        eng_logits.push_back(logits);
        eng_h.push_back(h_out);
        h = h_out;
        tok = int32_t(1 + (tok * 11 + 5) % 255);
    }
    // The reference chains its own h_out the same way.
    tok = rows[n_catch].token;
    for (int j = 0; j < n_step; ++j) {
        const auto ref = mtp_reference(m, ref_rows, mode == q4::HnormMode::Global);
        const RefOut & last = ref.back();
        const double dl = max_rel_diff(eng_logits[j], last.logits), dh = max_rel_diff(eng_h[j], last.h_out);
        EXPECT_LE(dl, 1e-5) << "step " << j << " logits";
        EXPECT_LE(dh, 1e-5) << "step " << j << " h_out";
        tok = int32_t(1 + (tok * 11 + 5) % 255);
        ref_rows.push_back({tok, n_catch + j + 1, last.h_out});
    }
    EXPECT_EQ(cache.n, size_t(n_catch + n_step));
}

TEST(MtpHead, MatchesReferenceGroupedHnorm) { check_head_against_reference(q4::HnormMode::Grouped); }
TEST(MtpHead, MatchesReferenceGlobalHnorm) { check_head_against_reference(q4::HnormMode::Global); }

TEST(MtpHead, CacheDropsStaleRowsAndRestartsAfterAGap) {
    q4::MtpCache c;
    c.first = 5;
    c.n = 4;  // positions 5..8
    c.truncate(7);
    EXPECT_EQ(c.end(), 7);
    c.truncate(100);
    EXPECT_EQ(c.end(), 7);
    c.truncate(2);
    EXPECT_EQ(c.n, 0u);

    const auto model = load_generated(mtp_config(), "gap");
    const q4::Model & m = qwen(*model);
    const q4::MtpHead head(m.hparams(), m.weights().mtp, m.weights().token_embd, m.weights().output);
    std::vector<float> h(head.wide_width() * 3, 0.5f);
    const int32_t toks[3] = {3, 4, 5};
    const int32_t pos_a[3] = {0, 1, 2};
    q4::MtpCache cache;
    head.catch_up(cache, toks, pos_a, h.data(), 3);
    EXPECT_EQ(cache.first, 0);
    EXPECT_EQ(cache.end(), 3);
    const int32_t again[1] = {1};  // rewriting position 1 drops 1 and 2
    head.catch_up(cache, toks, again, h.data(), 1);
    EXPECT_EQ(cache.end(), 2);
    const int32_t gap[1] = {9};
    head.catch_up(cache, toks, gap, h.data(), 1);
    EXPECT_EQ(cache.first, 9);
    EXPECT_EQ(cache.n, 1u);
}

TEST(MtpDraftFile, SidecarBorrowsTheTargetsTablesAndDraftsLikeTheSameBlockInFile) {
    q4::GenConfig c = mtp_config();
    const auto target = load_generated(c, "target");
    c.mtp_only = true;
    const std::string side = temp_path("sidecar");
    q4::generate_model(c).write_file(side);
    SpecParams in_file = spec_of(SpecType::DraftMtp), from_side = in_file;
    from_side.draft_model = side;
    GenOptions o;
    o.n_predict = 24;
    const std::vector<std::vector<int32_t>> prompts{prompt_of(1, 20, 256)};
    SpecStats a, b;
    const auto out_a = generate_spec(target, prompts, in_file, o, &a);
    const auto out_b = generate_spec(target, prompts, from_side, o, &b);
    std::filesystem::remove(side);
    EXPECT_EQ(out_a, out_b);
    EXPECT_EQ(a.drafted, b.drafted);
    EXPECT_EQ(a.accepted, b.accepted);
    EXPECT_GT(a.drafted, 0u);
}

TEST(MtpDraftFile, MismatchedSidecarsAreRefused) {
    q4::GenConfig c = mtp_config();
    const auto target = load_generated(c, "target2");
    const q4::Model & tm = qwen(*target);
    auto refused = [&](const q4::GenConfig & side_cfg, const std::string & what, void (*edit)(gguf::Writer &) = nullptr) {
        const std::string side = temp_path("bad");
        gguf::Writer w = q4::generate_model(side_cfg);
        if (edit) edit(w);
        w.write_file(side);
        try {
            model::qwen4exp::MtpDraftFile f(side, tm);
            ADD_FAILURE() << "accepted a sidecar with " << what;
        } catch (const Error & e) {
            EXPECT_NE(std::string(e.what()).find(side), std::string::npos) << e.what();
        }
        std::filesystem::remove(side);
    };
    q4::GenConfig wide = c;
    wide.mtp_only = true;
    wide.n_embd = 128;
    refused(wide, "another width");
    q4::GenConfig vocab = c;  // a whole model with its own tables of another vocabulary
    vocab.n_vocab = 300;
    refused(vocab, "another vocabulary");
    q4::GenConfig no_mtp = c;
    no_mtp.mtp = false;
    refused(no_mtp, "no MTP block");
    q4::GenConfig partial = c;
    partial.mtp_only = true;
    refused(partial, "one trunk tensor", [](gguf::Writer & w) {
        w.add_tensor_f32("blk.0.hc_attn_norm.weight", {64, 4}, tensor::ElemType::F32, std::vector<float>(256, 1.0f));
    });
}

}  // namespace
}  // namespace offgrid::spec_test
