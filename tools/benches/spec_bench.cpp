#include "benches/spec_bench.h"

#include <chrono>

#include "offgrid/sampler.h"

namespace offgrid::tools {

namespace {

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

SamplingParams greedy() {
    SamplingParams sp;
    sp.temperature = 0.0f;
    return sp;
}

void decode_prompt(Context & ctx, const std::vector<int32_t> & prompt, uint32_t n_batch, SpeculativeDecoder * dec) {
    for (size_t i = 0; i < prompt.size(); i += n_batch) {
        const size_t n = std::min<size_t>(n_batch, prompt.size() - i);
        const std::vector<int32_t> chunk(prompt.begin() + i, prompt.begin() + i + n);
        DecodeResult r;
        if (dec) {
            r = dec->prefill(0, chunk);
        } else {
            std::vector<BatchToken> b(n);
            for (size_t j = 0; j < n; ++j) b[j] = {chunk[j], int32_t(i + j), {0}, i + j + 1 == prompt.size()};
            r = ctx.decode(b);
        }
        if (!r.ok()) throw Error("bench: prompt: " + r.message);
    }
}

// Greedy generation of n tokens after the prompt; returns the tokens and adds the loop's time to *seconds.
std::vector<int32_t> generate(const std::shared_ptr<const Model> & model, const SpecBenchParams & p,
                              const std::vector<int32_t> & prompt, bool speculative, double * seconds, SpecStats * stats) {
    ContextParams cp;
    cp.n_ctx = static_cast<uint32_t>(prompt.size() + p.n_gen + 2);
    cp.n_batch = p.n_batch;
    cp.n_ubatch = p.n_batch;
    cp.n_threads = p.n_threads;
    if (speculative) SpeculativeDecoder::configure(cp, p.spec);
    Context ctx(model, cp);
    std::unique_ptr<SpeculativeDecoder> dec;
    if (speculative) dec = std::make_unique<SpeculativeDecoder>(ctx, p.spec);
    decode_prompt(ctx, prompt, p.n_batch, dec.get());
    offgrid::Sampler sampler(greedy());
    const size_t V = static_cast<size_t>(model->n_vocab());
    std::vector<int32_t> out;
    const double t0 = now_seconds();
    out.push_back(sampler.sample({ctx.logits(ctx.n_outputs() - 1), V}));
    sampler.accept(out.back());
    std::vector<SpeculativeDecoder::Request> reqs(1);
    while (out.size() < p.n_gen) {
        if (dec) {
            reqs[0].last = out.back();
            reqs[0].sampler = &sampler;
            reqs[0].max_tokens = static_cast<int32_t>(p.n_gen - out.size());
            const DecodeResult r = dec->step(reqs);
            if (!r.ok()) throw Error("bench: speculative step: " + r.message);
            out.insert(out.end(), reqs[0].out.begin(), reqs[0].out.end());
        } else {
            const DecodeResult r = ctx.decode({BatchToken{out.back(), -1, {0}, true}});
            if (!r.ok()) throw Error("bench: decode: " + r.message);
            out.push_back(sampler.sample({ctx.logits(0), V}));
            sampler.accept(out.back());
        }
    }
    *seconds += now_seconds() - t0;
    if (dec && stats) {
        const SpecStats & s = dec->stats();
        stats->rounds += s.rounds;
        stats->drafted += s.drafted;
        stats->accepted += s.accepted;
        stats->emitted += s.emitted;
    }
    return out;
}

// The cost of the verify call against one decoded token, in a speculative context holding `prompt`: the best of
// `reps` one-token calls and of `reps` calls of n_max + 1 tokens, each rolled back again.
void verify_cost(const std::shared_ptr<const Model> & model, const SpecBenchParams & p, const std::vector<int32_t> & prompt,
                 SpecBenchResult & r) {
    ContextParams cp;
    constexpr int kReps = 20;
    cp.n_ctx = static_cast<uint32_t>(prompt.size() + 2 * kReps + p.spec.n_max + 2);
    cp.n_batch = p.n_batch;
    cp.n_ubatch = p.n_batch;
    cp.n_threads = p.n_threads;
    SpeculativeDecoder::configure(cp, p.spec);
    Context ctx(model, cp);
    decode_prompt(ctx, prompt, p.n_batch, nullptr);
    int32_t pos = static_cast<int32_t>(prompt.size());
    // Each call keeps its first token (as a round keeps `last`) and rolls the rest back.
    auto best = [&](size_t n) {
        double b = 1e30;
        for (int rep = 0; rep < kReps; ++rep) {
            std::vector<BatchToken> batch;
            for (size_t j = 0; j < n; ++j) batch.push_back({prompt[(j * 7 + size_t(rep)) % prompt.size()], pos + int32_t(j), {0}, true});
            const double t0 = now_seconds();
            const DecodeResult d = ctx.decode(batch);
            b = std::min(b, now_seconds() - t0);
            if (!d.ok()) throw Error("bench: verify cost: " + d.message);
            if (n > 1 && !ctx.seq_rm(0, pos + 1, -1)) throw Error("bench: verify cost: the rollback was refused");
            ++pos;
        }
        return b * 1e3;
    };
    r.decode_ms = best(1);
    r.verify_ms = best(static_cast<size_t>(p.spec.n_max) + 1);
}

}  // namespace

std::vector<SpecBenchResult> run_spec_bench(const std::shared_ptr<const Model> & model, const SpecBenchParams & p) {
    std::vector<SpecBenchResult> results;
    size_t offset = 0;
    for (const uint32_t depth : p.depths) {
        const size_t passage = size_t(depth) + p.n_prompt;
        if (p.text.size() < passage + 1) {
            throw Error("bench: the text has " + std::to_string(p.text.size()) + " tokens, fewer than one prompt of " +
                        std::to_string(passage));
        }
        const size_t total = passage + (p.repeat ? p.n_prompt / 2 : 0) + p.n_gen + 2;
        if (total > model->n_ctx_train()) {
            throw Error("bench: a test needs " + std::to_string(total) + " cells, more than the model's context length " +
                        std::to_string(model->n_ctx_train()));
        }
        SpecBenchResult r;
        r.depth = depth;
        for (uint32_t i = 0; i < p.n_prompts; ++i) {
            if (offset + passage > p.text.size()) offset = 0;
            std::vector<int32_t> prompt(p.text.begin() + offset, p.text.begin() + offset + passage);
            offset += passage;
            if (p.repeat) {
                const std::vector<int32_t> again(prompt.end() - p.n_prompt, prompt.end() - p.n_prompt / 2);
                prompt.insert(prompt.end(), again.begin(), again.end());
            }
            if (p.status) p.status("depth " + std::to_string(depth) + ": prompt " + std::to_string(i + 1));
            // Plain and speculative in turns, so slow drifts of the machine hit both.
            const auto plain = generate(model, p, prompt, false, &r.plain_seconds, nullptr);
            const auto spec = generate(model, p, prompt, true, &r.spec_seconds, &r.stats);
            r.identical += plain == spec ? 1 : 0;
            r.tokens += plain.size();
            ++r.prompts;
            if (i + 1 == p.n_prompts) verify_cost(model, p, prompt, r);
        }
        results.push_back(r);
    }
    return results;
}

}  // namespace offgrid::tools
