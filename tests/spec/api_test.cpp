// The API pieces: Context::mtp_hidden (every token's wide residual, whose stream mean is the embedding), and what
// SpeculativeDecoder checks and configures.
#include <gtest/gtest.h>

#include "spec/spec_helpers.h"

namespace offgrid::spec_test {
namespace {

TEST(MtpHidden, EveryTokensWideResidualWhoseStreamMeanIsTheEmbedding) {
    const auto model = load_generated(mtp_config(), "hidden");
    ContextParams cp;
    cp.n_ctx = 256;
    cp.mtp_hidden = true;
    cp.embeddings = true;
    Context ctx(model, cp);
    ASSERT_EQ(ctx.mtp_hidden_width(), 4u * 64u);
    std::vector<BatchToken> b;
    for (int i = 0; i < 9; ++i) b.push_back({3 + i, i, {0}, true});
    ASSERT_TRUE(ctx.decode(b).ok());
    const size_t E = 64, hc = 4;
    for (int i = 0; i < 9; ++i) {
        const float * w = ctx.mtp_hidden(i);
        const float * e = ctx.embeddings(i);
        for (size_t j = 0; j < E; ++j) {
            float sum = 0.0f;
            for (size_t s = 0; s < hc; ++s) sum += w[s * E + j];
            ASSERT_EQ(sum * (1.0f / float(hc)), e[j]) << "token " << i << " element " << j;
        }
    }
    EXPECT_THROW(ctx.mtp_hidden(9), Error);
    ContextParams plain;
    plain.n_ctx = 256;
    Context other(model, plain);
    ASSERT_TRUE(other.decode(b).ok());
    EXPECT_THROW(other.mtp_hidden(0), Error);
}

TEST(SpeculativeDecoder, ConfigureAndChecks) {
    const auto model = load_generated(mtp_config(), "checks");
    SpecParams sp = spec_of(SpecType::DraftMtp, 5);
    ContextParams cp;
    cp.n_ctx = 256;
    cp.n_ubatch = 2;
    {
        Context bare(model, cp);
        EXPECT_THROW(SpeculativeDecoder(bare, sp), Error);  // no snapshots, no mtp_hidden
    }
    SpeculativeDecoder::configure(cp, sp);
    EXPECT_GE(cp.n_rs_seq, 5u);
    EXPECT_GE(cp.n_ubatch, 6u);
    EXPECT_TRUE(cp.mtp_hidden);
    Context ctx(model, cp);
    EXPECT_NO_THROW(SpeculativeDecoder(ctx, sp));
    SpecParams bad = sp;
    bad.n_min = 6;
    EXPECT_THROW(SpeculativeDecoder(ctx, bad), Error);
    bad = sp;
    bad.p_min = 1.5f;
    EXPECT_THROW(SpeculativeDecoder(ctx, bad), Error);
    bad = sp;
    bad.n_max = 9;  // more than the context's snapshots
    EXPECT_THROW(SpeculativeDecoder(ctx, bad), Error);
    EXPECT_EQ(spec_type_from_name("ngram-simple"), SpecType::NgramSimple);
    EXPECT_STREQ(spec_type_name(SpecType::DraftMtp), "draft-mtp");
    EXPECT_THROW(spec_type_from_name("eagle3"), Error);

    // A draft token out of the vocabulary is refused before anything is decoded.
    SpeculativeDecoder dec(ctx, sp);
    ASSERT_TRUE(dec.prefill(0, {1, 2, 3}).ok());
    Sampler sampler(greedy());
    std::vector<SpeculativeDecoder::Request> reqs(1);
    reqs[0].last = 4;
    reqs[0].sampler = &sampler;
    reqs[0].max_tokens = 4;
    reqs[0].draft = {5, 100000};
    EXPECT_THROW(dec.step(reqs), Error);
    EXPECT_EQ(ctx.seq_pos_max(0), 2);
}

}  // namespace
}  // namespace offgrid::spec_test
