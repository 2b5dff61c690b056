// Shared pieces of the speculative-decoding tests: generated test models, and generation with and without
// speculation through the public API only.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/qwen4exp/gen_model.h"
#include "offgrid/context.h"
#include "offgrid/sampler.h"
#include "offgrid/speculative.h"

namespace offgrid::spec_test {

inline std::string temp_path(const std::string & tag) {
    static std::atomic<int> counter{0};
    return (std::filesystem::temp_directory_path() /
            ("offgrid_spec_" + tag + "_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + ".gguf")).string();
}

// The tiny configuration of qwen4exp-mtp.md section 6: layers 0-2 Gated DeltaNet (PLE on 0), layer 3 QSA with
// top_k 8 and ratio 4 (sparse once a sequence has more than 11 cells), an MTP block.
inline model::qwen4exp::GenConfig mtp_config() {
    model::qwen4exp::GenConfig c;
    c.name = "spec-tiny";
    c.n_vocab = 256;
    c.n_ctx = 1024;
    c.n_embd = 64;
    c.n_layer = 4;
    c.attn_interval = 4;
    c.n_head = 4;
    c.n_head_kv = 2;
    c.head_dim = 16;
    c.n_rot = 8;
    c.n_expert = 8;
    c.n_expert_used = 2;
    c.n_ff_exp = 16;
    c.n_ff_shexp = 16;
    c.ssm_d_state = 16;
    c.ssm_n_v_heads = 4;
    c.ssm_n_k_heads = 2;
    c.hc = 4;
    c.hc_lr = 8;
    c.qsa_ratio = 4;
    c.top_k = 8;
    c.idx_heads = 2;
    c.idx_dim = 16;
    c.mtp = true;
    return c;
}

// Writes the configuration to a temporary file and loads it (the mapping outlives the file).
inline std::shared_ptr<const Model> load_generated(const model::qwen4exp::GenConfig & c, const std::string & tag) {
    const std::string path = temp_path(tag);
    model::qwen4exp::generate_model(c).write_file(path);
    auto m = Model::load(path);
    std::filesystem::remove(path);
    return m;
}

inline SamplingParams greedy() {
    SamplingParams sp;
    sp.temperature = 0.0f;
    return sp;
}

struct GenOptions {
    int n_predict = 16;
    SamplingParams sampling = greedy();
    uint32_t n_ctx = 512;
    uint32_t n_ubatch = 512;
    bool unified = false;
};

// Plain one-token decoding of one sequence: decode the prompt, then sample, accept, decode.
inline std::vector<int32_t> generate_plain(const std::shared_ptr<const Model> & model, const std::vector<int32_t> & prompt,
                                           const GenOptions & o, const ContextParams * like = nullptr) {
    ContextParams cp;
    if (like) cp = *like;
    cp.n_ctx = o.n_ctx;
    cp.n_ubatch = o.n_ubatch;
    Context ctx(model, cp);
    Sampler sampler(o.sampling);
    std::vector<BatchToken> batch;
    for (size_t i = 0; i < prompt.size(); ++i) batch.push_back({prompt[i], int32_t(i), {0}, i + 1 == prompt.size()});
    EXPECT_TRUE(ctx.decode(batch).ok());
    for (int32_t t : prompt) sampler.accept(t);
    std::vector<int32_t> out;
    const size_t V = size_t(model->n_vocab());
    for (;;) {
        const int32_t t = sampler.sample({ctx.logits(ctx.n_outputs() - 1), V});
        sampler.accept(t);
        out.push_back(t);
        if (int(out.size()) >= o.n_predict) break;
        const DecodeResult r = ctx.decode({BatchToken{t, -1, {0}, true}});
        EXPECT_TRUE(r.ok()) << r.message;
        if (!r.ok()) break;
    }
    return out;
}

// The same with speculation, for several sequences at once (one prompt each, sequence ids 0..n-1): every round
// verifies all sequences in one decode call.
inline std::vector<std::vector<int32_t>> generate_spec(const std::shared_ptr<const Model> & model,
                                                       const std::vector<std::vector<int32_t>> & prompts,
                                                       const SpecParams & spec, const GenOptions & o,
                                                       SpecStats * stats = nullptr) {
    ContextParams cp;
    cp.n_ctx = o.n_ctx * uint32_t(prompts.size());
    cp.n_ubatch = o.n_ubatch;
    cp.n_seq_max = uint32_t(prompts.size());
    cp.unified = o.unified;
    SpeculativeDecoder::configure(cp, spec);
    Context ctx(model, cp);
    SpeculativeDecoder dec(ctx, spec);
    const size_t V = size_t(model->n_vocab());
    std::vector<Sampler> samplers;
    std::vector<std::vector<int32_t>> out(prompts.size());
    std::vector<SpeculativeDecoder::Request> reqs;
    for (size_t s = 0; s < prompts.size(); ++s) {
        samplers.emplace_back(o.sampling);
        const DecodeResult r = dec.prefill(int32_t(s), prompts[s]);
        EXPECT_TRUE(r.ok()) << r.message;
        for (int32_t t : prompts[s]) samplers[s].accept(t);
        const int32_t t = samplers[s].sample({ctx.logits(ctx.n_outputs() - 1), V});
        samplers[s].accept(t);
        out[s].push_back(t);
    }
    for (;;) {
        reqs.clear();
        for (size_t s = 0; s < prompts.size(); ++s) {
            if (int(out[s].size()) >= o.n_predict) continue;
            SpeculativeDecoder::Request q;
            q.seq = int32_t(s);
            q.last = out[s].back();
            q.sampler = &samplers[s];
            q.max_tokens = o.n_predict - int(out[s].size());
            reqs.push_back(q);
        }
        if (reqs.empty()) break;
        const DecodeResult r = dec.step(reqs);
        EXPECT_TRUE(r.ok()) << r.message;
        if (!r.ok()) break;
        for (const auto & q : reqs) {
            EXPECT_LE(int(q.out.size()), q.max_tokens);
            out[size_t(q.seq)].insert(out[size_t(q.seq)].end(), q.out.begin(), q.out.end());
        }
    }
    if (stats) *stats = dec.stats();
    return out;
}

inline SpecParams spec_of(SpecType type, int n_max = 3) {
    SpecParams sp;
    sp.type = type;
    sp.n_max = n_max;
    return sp;
}

// Prompt i of a family: repetitive enough that n-gram drafts find matches, different per i.
inline std::vector<int32_t> prompt_of(int i, int len, int32_t n_vocab) {
    std::vector<int32_t> p;
    const int period = 3 + i % 5;
    for (int j = 0; j < len; ++j) p.push_back(1 + ((j % period) * (7 + i) + i * 13 + (j / 17)) % (n_vocab - 1));
    return p;
}

}  // namespace offgrid::spec_test
