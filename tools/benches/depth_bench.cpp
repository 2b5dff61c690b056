#include "benches/depth_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "offgrid/error.h"

namespace offgrid::tools {

namespace {

class TokenSource {
public:
    TokenSource(uint64_t seed, int32_t n_vocab) : state_(seed), n_vocab_(static_cast<uint64_t>(n_vocab)) {}
    int32_t next() {
        uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return static_cast<int32_t>((z ^ (z >> 31)) % n_vocab_);
    }

private:
    uint64_t state_;
    uint64_t n_vocab_;
};

void decode_or_throw(Context & ctx, const std::vector<BatchToken> & batch, const char * what) {
    const DecodeResult r = ctx.decode(batch);
    if (!r.ok()) throw Error(std::string("bench: ") + what + ": " + r.message);
}

// Appends n tokens in calls of at most n_batch; only the last token of each call asks for logits. The tokens
// are also appended to `record` when given.
void append(Context & ctx, TokenSource & src, uint32_t n, uint32_t n_batch, const char * what,
            std::vector<int32_t> * record = nullptr) {
    for (uint32_t i = 0; i < n; i += n_batch) {
        const uint32_t m = std::min(n_batch, n - i);
        std::vector<BatchToken> b(m);
        for (auto & t : b) t.token = src.next();
        b.back().output = true;
        decode_or_throw(ctx, b, what);
        if (record) for (const auto & t : b) record->push_back(t.token);
    }
}

double seconds(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string depth_state_path(const std::string & dir, uint32_t depth) {
    return dir + (dir.empty() || dir.back() == '/' ? "" : "/") + "depth-" + std::to_string(depth) + ".ogstate";
}

std::vector<DepthBenchResult> run_depth_bench(const std::shared_ptr<const Model> & model, const DepthBenchParams & p) {
    if (p.depths.empty() && p.load_state.empty()) throw Error("bench: no depth given");
    if (!p.sparse && !p.dense) throw Error("bench: neither sparse nor dense mode selected");
    const bool with_states = !p.save_states_dir.empty() || !p.load_state.empty();
    const uint32_t n_test = std::max(p.n_prompt, p.n_gen);
    ContextParams cp;
    cp.n_ctx = p.n_ctx != 0 ? p.n_ctx : with_states ? model->n_ctx_train() : 0;
    cp.n_batch = std::max(1u, p.n_batch);
    cp.n_ubatch = std::max(1u, p.n_ubatch);
    cp.n_threads = p.n_threads;
    cp.type_k = p.type_k;
    cp.type_v = p.type_v;

    // The starting state, if any: its depth is its token count, which must match the restored positions.
    std::vector<int32_t> filled_tokens;
    std::unique_ptr<Context> loaded;
    if (!p.load_state.empty()) {
        if (cp.n_ctx == 0) throw Error("bench: the model has no context length");
        loaded = std::make_unique<Context>(model, cp);
        filled_tokens = loaded->state_load_file(p.load_state);
        const int64_t n_pos = static_cast<int64_t>(loaded->seq_pos_max(0)) + 1;
        if (n_pos != static_cast<int64_t>(filled_tokens.size()) || loaded->seq_pos_min(0) > 0) {
            throw Error(p.load_state + ": the state holds positions " + std::to_string(loaded->seq_pos_min(0)) + ".." +
                        std::to_string(n_pos - 1) + " but lists " + std::to_string(filled_tokens.size()) +
                        " tokens (not a filled bench context)");
        }
    }
    const uint32_t start = static_cast<uint32_t>(filled_tokens.size());
    std::vector<uint32_t> depths = p.depths;
    if (depths.empty()) depths.push_back(start);
    std::sort(depths.begin(), depths.end());
    depths.erase(std::unique(depths.begin(), depths.end()), depths.end());
    if (depths.front() < start) {
        throw Error("bench: depth " + std::to_string(depths.front()) + " is below the depth " + std::to_string(start) +
                    " of " + p.load_state);
    }
    const uint64_t need = static_cast<uint64_t>(depths.back()) + n_test + 1;
    if (need > (1u << 24)) throw Error("bench: depth " + std::to_string(depths.back()) + " is too large");
    if (cp.n_ctx == 0) cp.n_ctx = static_cast<uint32_t>(need);
    if (need > cp.n_ctx) {
        throw Error("bench: depth " + std::to_string(depths.back()) + " plus " + std::to_string(n_test) +
                    " test tokens does not fit the context of " + std::to_string(cp.n_ctx) + " cells");
    }
    std::unique_ptr<Context> filler_owner = loaded ? std::move(loaded) : std::make_unique<Context>(model, cp);
    Context & filler = *filler_owner;
    std::vector<std::pair<std::string, std::unique_ptr<Context>>> modes;
    for (const bool dense : {false, true}) {
        if (dense ? !p.dense : !p.sparse) continue;
        ContextParams mp = cp;
        mp.qsa_dense = dense;
        modes.emplace_back(dense ? "dense" : "sparse", std::make_unique<Context>(model, mp));
    }
    const uint32_t n_batch = filler.params().n_batch;

    std::vector<DepthBenchResult> out;
    TokenSource fill_tokens(p.seed, model->n_vocab());
    for (uint32_t i = 0; i < start; ++i) fill_tokens.next();  // continue the stream past the loaded tokens
    uint32_t filled = start;
    for (const uint32_t depth : depths) {
        // Fill further to this depth (sparse), in pieces so the status line can follow.
        while (filled < depth) {
            const uint32_t step = std::min(depth - filled, n_batch * 8);
            append(filler, fill_tokens, step, n_batch, "filling the context", with_states ? &filled_tokens : nullptr);
            filled += step;
            if (p.status) p.status("filling to depth " + std::to_string(depth) + ": " + std::to_string(filled));
        }
        if (!p.save_states_dir.empty()) filler.state_save_file(depth_state_path(p.save_states_dir, depth), filled_tokens);
        // A speed figure of a model whose activations blew up would mean nothing: check the last row (none right
        // after loading a state).
        if (filler.n_outputs() > 0) {
            const float * row = filler.logits(filler.n_outputs() - 1);
            for (int32_t v = 0; v < model->n_vocab(); ++v) {
                if (!std::isfinite(row[v])) throw Error("bench: non-finite logits at depth " + std::to_string(filled));
            }
        }
        const std::vector<uint8_t> state = filler.state_get();
        for (auto & [mode, ctx] : modes) {
            if (p.status) p.status("measuring " + mode + " at depth " + std::to_string(depth));
            DepthBenchResult r;
            r.mode = mode;
            r.depth = depth;
            TokenSource src(p.seed ^ (0x51ull + depth), model->n_vocab());
            if (p.n_prompt > 0) {
                ctx->state_set(state);
                const auto t0 = std::chrono::steady_clock::now();
                append(*ctx, src, p.n_prompt, n_batch, "prompt test");
                r.prompt_seconds = seconds(t0);
                r.n_prompt = p.n_prompt;
            }
            if (p.n_gen > 0) {
                ctx->state_set(state);
                // The first call pays for nothing the others do not; all n_gen calls are timed.
                const auto t0 = std::chrono::steady_clock::now();
                for (uint32_t i = 0; i < p.n_gen; ++i) decode_or_throw(*ctx, {BatchToken{src.next(), -1, {0}, true}}, "decode test");
                r.gen_seconds = seconds(t0);
                r.n_gen = p.n_gen;
            }
            out.push_back(r);
        }
    }
    return out;
}

std::vector<ParallelBenchResult> run_parallel_bench(const std::shared_ptr<const Model> & model,
                                                    const DepthBenchParams & p, const std::vector<uint32_t> & n_seqs,
                                                    uint32_t rounds) {
    if (p.depths.empty()) throw Error("bench: no depth given");
    if (p.n_gen == 0) throw Error("bench: --parallel needs decode steps (-n)");
    rounds = std::max(1u, rounds);
    std::vector<ParallelBenchResult> out;
    for (const uint32_t depth : p.depths) {
        // One context per sequence count, filled first; then the rounds go over the counts in turn, so a busy
        // machine disturbs all of them alike, and each count keeps its best round.
        struct Run {
            std::unique_ptr<Context> ctx;
            std::vector<BatchToken> step;
            ParallelBenchResult best;
        };
        std::vector<Run> runs;
        TokenSource src(p.seed ^ (0x9000ull + depth), model->n_vocab());
        for (const uint32_t n : n_seqs) {
            if (n == 0 || n > 256) throw Error("bench: --parallel: " + std::to_string(n) + " sequences (1..256)");
            if (p.status) p.status("filling " + std::to_string(n) + " sequences to depth " + std::to_string(depth));
            ContextParams cp;
            // One stream per sequence, as the server makes them; every stream holds the depth and the rounds.
            const uint64_t per_seq = (static_cast<uint64_t>(depth) + uint64_t(p.n_gen) * rounds + 1 + 255) / 256 * 256;
            if (per_seq * n > (1u << 30)) throw Error("bench: --parallel: the context would be too large");
            // -c, as in `serve -c`: all cells, split into one stream per sequence (stream size can cost time).
            cp.n_ctx = static_cast<uint32_t>(std::max<uint64_t>(per_seq * n, p.n_ctx));
            cp.n_seq_max = n;
            cp.n_batch = std::max({1u, p.n_batch, n});
            cp.n_ubatch = std::max({1u, p.n_ubatch, n});
            cp.n_threads = p.n_threads;
            cp.type_k = p.type_k;
            cp.type_v = p.type_v;
            Run r;
            r.ctx = std::make_unique<Context>(model, cp);
            for (uint32_t s = 0; s < n; ++s) {
                for (uint32_t i = 0; i < depth; i += cp.n_batch) {
                    std::vector<BatchToken> b(std::min(cp.n_batch, depth - i));
                    for (auto & t : b) {
                        t.token = src.next();
                        t.seqs = {static_cast<int32_t>(s)};
                    }
                    b.back().output = true;
                    decode_or_throw(*r.ctx, b, "filling the context");
                }
            }
            r.step.resize(n);
            for (uint32_t s = 0; s < n; ++s) {
                r.step[s].seqs = {static_cast<int32_t>(s)};
                r.step[s].output = true;
            }
            r.best.n_seq = n;
            r.best.depth = depth;
            r.best.n_gen = p.n_gen;
            runs.push_back(std::move(r));
        }
        for (uint32_t round = 0; round < rounds; ++round) {
            for (Run & r : runs) {
                if (p.status) {
                    p.status("measuring " + std::to_string(r.best.n_seq) + " parallel sequences at depth " +
                             std::to_string(depth));
                }
                const auto t0 = std::chrono::steady_clock::now();
                for (uint32_t i = 0; i < p.n_gen; ++i) {
                    for (auto & t : r.step) t.token = src.next();
                    decode_or_throw(*r.ctx, r.step, "parallel decode test");
                }
                const double s = seconds(t0);
                if (r.best.gen_seconds == 0 || s < r.best.gen_seconds) r.best.gen_seconds = s;
            }
        }
        for (const Run & r : runs) out.push_back(r.best);
    }
    return out;
}

}  // namespace offgrid::tools
