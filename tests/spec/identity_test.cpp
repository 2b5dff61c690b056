// Output with speculation is the output without it (qwen4exp-mtp.md 4.7), on generated test models: greedy for
// both draft types, past the QSA budget, four sequences in one verify call, after a state restore, and sampled
// with a fixed seed; sampled token frequencies against the plain sampler's (chi-square).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "spec/spec_helpers.h"

namespace offgrid::spec_test {
namespace {

const std::shared_ptr<const Model> & tiny_mtp() {
    static const auto m = load_generated(mtp_config(), "identity");
    return m;
}

class GreedyIdentity : public ::testing::TestWithParam<SpecType> {};

TEST_P(GreedyIdentity, ManyPromptsOneSequence) {
    const auto & model = tiny_mtp();
    GenOptions o;
    o.n_predict = 20;
    uint64_t drafted = 0, accepted = 0;
    for (int i = 0; i < 12; ++i) {
        const std::vector<int32_t> prompt = prompt_of(i, 6 + 3 * i, model->n_vocab());
        SpecStats st;
        const auto spec = generate_spec(model, {prompt}, spec_of(GetParam(), 1 + i % 4), o, &st);
        EXPECT_EQ(spec[0], generate_plain(model, prompt, o)) << "prompt " << i;
        drafted += st.drafted;
        accepted += st.accepted;
    }
    EXPECT_GT(drafted, 0u);  // rounds with rejected drafts: the rollback ran
    std::printf("drafted %llu, accepted %llu\n", (unsigned long long)drafted, (unsigned long long)accepted);
}

// Contexts of more than 4 x top_k (32 cells) with top_k 8, ratio 4: selection is sparse and pools close inside
// verify batches and rolled-back tails.
TEST_P(GreedyIdentity, BeyondTheQsaBudget) {
    const auto & model = tiny_mtp();
    GenOptions o;
    o.n_predict = 90;
    uint64_t drafted = 0, accepted = 0;
    for (int i = 0; i < 3; ++i) {
        const std::vector<int32_t> prompt = prompt_of(20 + i, 40, model->n_vocab());
        SpecStats st;
        EXPECT_EQ(generate_spec(model, {prompt}, spec_of(GetParam(), 4), o, &st)[0], generate_plain(model, prompt, o)) << i;
        drafted += st.drafted;
        accepted += st.accepted;
    }
    std::printf("drafted %llu, accepted %llu\n", (unsigned long long)drafted, (unsigned long long)accepted);
    EXPECT_GT(drafted, 0u);
}

TEST_P(GreedyIdentity, FourSequencesInOneVerifyCall) {
    const auto & model = tiny_mtp();
    for (const bool unified : {false, true}) {
        GenOptions o;
        o.n_predict = 40;
        o.unified = unified;
        std::vector<std::vector<int32_t>> prompts;
        for (int s = 0; s < 4; ++s) prompts.push_back(prompt_of(30 + s, 10 + 7 * s, model->n_vocab()));
        const auto spec = generate_spec(model, prompts, spec_of(GetParam(), 3), o);
        for (int s = 0; s < 4; ++s) EXPECT_EQ(spec[s], generate_plain(model, prompts[s], o)) << "seq " << s << " unified " << unified;
    }
}

TEST_P(GreedyIdentity, AfterAStateRestore) {
    const auto & model = tiny_mtp();
    const SpecParams spec = spec_of(GetParam(), 3);
    ContextParams cp;
    cp.n_ctx = 512;
    SpeculativeDecoder::configure(cp, spec);
    const std::vector<int32_t> prompt = prompt_of(5, 30, model->n_vocab());
    const std::vector<int32_t> head(prompt.begin(), prompt.end() - 1);
    std::vector<uint8_t> state;
    {
        Context a(model, cp);
        std::vector<BatchToken> b;
        for (size_t i = 0; i < head.size(); ++i) b.push_back({head[i], int32_t(i), {0}, false});
        ASSERT_TRUE(a.decode(b).ok());
        state = a.state_get();
    }
    GenOptions o;
    o.n_predict = 30;
    const auto plain = generate_plain(model, prompt, o);

    Context c(model, cp);
    c.state_set(state);
    SpeculativeDecoder dec(c, spec);
    dec.reset(0, head);
    Sampler sampler(o.sampling);
    for (int32_t t : head) sampler.accept(t);
    ASSERT_TRUE(dec.prefill(0, {prompt.back()}).ok());
    sampler.accept(prompt.back());
    std::vector<int32_t> out{sampler.sample({c.logits(c.n_outputs() - 1), size_t(model->n_vocab())})};
    sampler.accept(out[0]);
    while (int(out.size()) < o.n_predict) {
        std::vector<SpeculativeDecoder::Request> reqs(1);
        reqs[0].last = out.back();
        reqs[0].sampler = &sampler;
        reqs[0].max_tokens = o.n_predict - int(out.size());
        ASSERT_TRUE(dec.step(reqs).ok());
        out.insert(out.end(), reqs[0].out.begin(), reqs[0].out.end());
    }
    EXPECT_EQ(out, plain);
}

INSTANTIATE_TEST_SUITE_P(Spec, GreedyIdentity, ::testing::Values(SpecType::DraftMtp, SpecType::NgramSimple),
                         [](const auto & info) { return info.param == SpecType::DraftMtp ? "DraftMtp" : "NgramSimple"; });

SamplingParams sampled(uint64_t seed) {
    SamplingParams sp;
    sp.temperature = 1.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.seed = seed;
    return sp;
}

// Sample and match draws one token per emitted token from the target's row with one sampler: with a seed, the
// stream is the plain stream.
TEST(SampledIdentity, SameSeedSameTokens) {
    const auto & model = tiny_mtp();
    for (const SpecType type : {SpecType::DraftMtp, SpecType::NgramSimple}) {
        for (uint64_t seed = 0; seed < 8; ++seed) {
            GenOptions o;
            o.n_predict = 24;
            o.sampling = sampled(seed);
            const std::vector<int32_t> prompt = prompt_of(int(seed), 16, model->n_vocab());
            EXPECT_EQ(generate_spec(model, {prompt}, spec_of(type, 3), o)[0], generate_plain(model, prompt, o))
                << spec_type_name(type) << " seed " << seed;
        }
    }
}

// Upper 0.1 % point of chi-square with `df` degrees of freedom (Wilson-Hilferty).
double chi2_critical_0001(double df) {
    const double z = 3.090232;
    const double a = 2.0 / (9.0 * df);
    return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

// The token 6 steps into generation, over many seeds: speculative runs on seeds 0..N-1, plain runs on seeds
// N..2N-1 (independent draws), compared by a two-sample chi-square test of their frequencies.
TEST(SampledDistribution, MatchesThePlainSamplerChiSquare) {
    const auto & model = tiny_mtp();
    const int N = 400, at = 5;
    const std::vector<int32_t> prompt = prompt_of(3, 12, model->n_vocab());
    for (const SpecType type : {SpecType::DraftMtp, SpecType::NgramSimple}) {
        std::map<int32_t, std::pair<int, int>> counts;
        for (int i = 0; i < N; ++i) {
            GenOptions o;
            o.n_predict = at + 1;
            o.sampling = sampled(uint64_t(i));
            counts[generate_spec(model, {prompt}, spec_of(type, 3), o)[0][at]].first++;
            o.sampling = sampled(uint64_t(N + i));
            counts[generate_plain(model, prompt, o)[at]].second++;
        }
        // Bins with at least 10 draws in all; the rest pooled.
        double chi2 = 0;
        int bins = 0, rest_a = 0, rest_b = 0;
        for (const auto & [tok, ab] : counts) {
            if (ab.first + ab.second < 10) {
                rest_a += ab.first;
                rest_b += ab.second;
                continue;
            }
            chi2 += double(ab.first - ab.second) * (ab.first - ab.second) / (ab.first + ab.second);
            ++bins;
        }
        if (rest_a + rest_b > 0) {
            chi2 += double(rest_a - rest_b) * (rest_a - rest_b) / (rest_a + rest_b);
            ++bins;
        }
        ASSERT_GE(bins, 3) << "the test model's distribution is too peaked to test";
        const double crit = chi2_critical_0001(bins - 1);
        std::printf("%s: chi2 %.2f over %d bins (0.1 %% critical %.2f)\n", spec_type_name(type), chi2, bins, crit);
        EXPECT_LT(chi2, crit) << spec_type_name(type);
    }
}

}  // namespace
}  // namespace offgrid::spec_test

namespace offgrid::spec_test {
namespace {

// Forced rounds (qwen4exp-mtp.md 6, check 4): drafts from an oracle that knows the plain output, right for the
// first k tokens and wrong after (k cycling over 0..n, so full acceptance with its bonus token and rejection at
// every depth), then a probe token decoded after the committed tokens gives bit-identical logits to a fresh
// context fed them: KV and indexer cells, pooled keys, GDN and PLE state all as if the drafts never happened.
TEST(ForcedRounds, OracleDraftsAtEveryDepthLeaveTheStateOfAFreshDecode) {
    const auto & model = tiny_mtp();
    const int32_t V = model->n_vocab();
    for (const SpecType type : {SpecType::None, SpecType::DraftMtp}) {
        for (const int n_max : {1, 3}) {
            GenOptions o;
            o.n_predict = 70;
            const std::vector<int32_t> prompt = prompt_of(9, 30, V);
            const std::vector<int32_t> plain = generate_plain(model, prompt, o);
            SpecParams spec = spec_of(type, n_max);
            ContextParams cp;
            cp.n_ctx = 512;
            SpeculativeDecoder::configure(cp, spec);
            Context ctx(model, cp);
            SpeculativeDecoder dec(ctx, spec);
            Sampler sampler(o.sampling);
            ASSERT_TRUE(dec.prefill(0, prompt).ok());
            for (int32_t t : prompt) sampler.accept(t);
            std::vector<int32_t> out{sampler.sample({ctx.logits(ctx.n_outputs() - 1), size_t(V)})};
            sampler.accept(out[0]);
            int round = 0;
            while (int(out.size()) < o.n_predict) {
                std::vector<SpeculativeDecoder::Request> reqs(1);
                reqs[0].last = out.back();
                reqs[0].sampler = &sampler;
                reqs[0].max_tokens = o.n_predict - int(out.size());
                const int right = round++ % (n_max + 1);
                for (int j = 0; j < n_max; ++j) {
                    const size_t at = out.size() + size_t(j);
                    const int32_t truth = at < plain.size() ? plain[at] : 1;
                    reqs[0].draft.push_back(j < right ? truth : (truth + 1 + j) % V);
                }
                ASSERT_TRUE(dec.step(reqs).ok());
                const size_t expect = std::min<size_t>(size_t(right) + 1, size_t(reqs[0].max_tokens));
                EXPECT_EQ(reqs[0].out.size(), expect) << "round " << round;
                out.insert(out.end(), reqs[0].out.begin(), reqs[0].out.end());
            }
            ASSERT_EQ(out, plain) << spec_type_name(type) << " n_max " << n_max;
            // Committed: prompt + out minus its last token. Probe with the last token in both contexts.
            std::vector<int32_t> committed = prompt;
            committed.insert(committed.end(), out.begin(), out.end() - 1);
            EXPECT_EQ(ctx.seq_pos_max(0) + 1, int32_t(committed.size()));
            Context fresh(model, cp);
            std::vector<BatchToken> b;
            for (size_t i = 0; i < committed.size(); ++i) b.push_back({committed[i], int32_t(i), {0}, false});
            ASSERT_TRUE(fresh.decode(b).ok());
            const BatchToken probe{out.back(), int32_t(committed.size()), {0}, true};
            ASSERT_TRUE(fresh.decode({probe}).ok());
            ASSERT_TRUE(ctx.decode({probe}).ok());
            EXPECT_EQ(0, std::memcmp(fresh.logits(0), ctx.logits(0), size_t(V) * sizeof(float)))
                << spec_type_name(type) << " n_max " << n_max;
        }
    }
}

}  // namespace
}  // namespace offgrid::spec_test
