// C entry points of contexts (decode, logits, embeddings, sequence edits, state files) and samplers.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "capi/handles.h"

using offgrid::capi::copy_out;
using offgrid::capi::guard;
using offgrid::capi::require;
using offgrid::capi::StatusError;

namespace {

offgrid_status status_of(offgrid::DecodeStatus s) {
    switch (s) {
        case offgrid::DecodeStatus::Ok: return OFFGRID_OK;
        case offgrid::DecodeStatus::NoSpace: return OFFGRID_ERROR_NO_SPACE;
        case offgrid::DecodeStatus::InvalidBatch: return OFFGRID_ERROR_INVALID_BATCH;
        case offgrid::DecodeStatus::Aborted: return OFFGRID_ERROR_ABORTED;
        case offgrid::DecodeStatus::Failed: return OFFGRID_ERROR_FAILED;
    }
    return OFFGRID_ERROR_INTERNAL;
}

void run_decode(offgrid_context * ctx, const std::vector<offgrid::BatchToken> & batch) {
    const offgrid::DecodeResult r = require(ctx, "context")->ctx->decode(batch);
    if (!r.ok()) throw StatusError(status_of(r.status), r.message);
}

offgrid::SamplingParams sampling_params(const offgrid_sampler_params & p) {
    offgrid::SamplingParams s;
    s.temperature = p.temperature;
    s.top_k = p.top_k;
    s.top_p = p.top_p;
    s.min_p = p.min_p;
    s.repeat_penalty = p.repeat_penalty;
    s.frequency_penalty = p.frequency_penalty;
    s.presence_penalty = p.presence_penalty;
    s.repeat_last_n = p.repeat_last_n;
    s.seed = p.seed;
    return s;
}

}  // namespace

extern "C" {

offgrid_context_params offgrid_context_default_params(void) {
    const offgrid::ContextParams d;
    offgrid_context_params p{};
    p.n_ctx = d.n_ctx;
    p.n_batch = d.n_batch;
    p.n_ubatch = d.n_ubatch;
    p.n_seq_max = d.n_seq_max;
    p.n_threads = d.n_threads;
    p.embeddings = d.embeddings ? 1 : 0;
    p.pooling = static_cast<int32_t>(d.pooling);
    p.type_k = nullptr;
    p.type_v = nullptr;
    return p;
}

offgrid_status offgrid_context_new(const offgrid_model * model, const offgrid_context_params * params,
                                   offgrid_context ** out) {
    return guard(OFFGRID_ERROR_INVALID_ARGUMENT, [&] {
        require(model, "model");
        require(out, "out");
        const offgrid_context_params p = params ? *params : offgrid_context_default_params();
        if (p.pooling < 0 || p.pooling > 3) {
            throw StatusError(OFFGRID_ERROR_INVALID_ARGUMENT, "pooling must be 0 (none), 1 (mean), 2 (last) or 3 (cls)");
        }
        offgrid::ContextParams cp;
        cp.n_ctx = p.n_ctx;
        cp.n_batch = p.n_batch;
        cp.n_ubatch = p.n_ubatch;
        cp.n_seq_max = p.n_seq_max;
        cp.n_threads = p.n_threads;
        cp.embeddings = p.embeddings != 0;
        cp.pooling = static_cast<offgrid::Pooling>(p.pooling);
        if (p.type_k) cp.type_k = p.type_k;
        if (p.type_v) cp.type_v = p.type_v;
        auto handle = std::make_unique<offgrid_context>();
        handle->model = model->model;
        handle->ctx = std::make_unique<offgrid::Context>(model->model, cp);
        *out = handle.release();
    });
}

void offgrid_context_free(offgrid_context * ctx) { delete ctx; }

offgrid_context_params offgrid_context_params_of(const offgrid_context * ctx) {
    offgrid_context_params p = offgrid_context_default_params();
    if (!ctx) return p;
    const offgrid::ContextParams & cp = ctx->ctx->params();
    p.n_ctx = cp.n_ctx;
    p.n_batch = cp.n_batch;
    p.n_ubatch = cp.n_ubatch;
    p.n_seq_max = cp.n_seq_max;
    p.n_threads = cp.n_threads;
    p.embeddings = cp.embeddings ? 1 : 0;
    p.pooling = static_cast<int32_t>(cp.pooling);
    p.type_k = cp.type_k.c_str();
    p.type_v = cp.type_v.c_str();
    return p;
}

offgrid_status offgrid_decode(offgrid_context * ctx, const offgrid_batch_token * batch, size_t n) {
    return guard(OFFGRID_ERROR_FAILED, [&] {
        if (n > 0) require(batch, "batch");
        std::vector<offgrid::BatchToken> b(n);
        for (size_t i = 0; i < n; ++i) b[i] = {batch[i].token, batch[i].pos, {batch[i].seq}, batch[i].output != 0};
        run_decode(ctx, b);
    });
}

offgrid_status offgrid_decode_tokens(offgrid_context * ctx, const int32_t * tokens, size_t n, int32_t seq) {
    return guard(OFFGRID_ERROR_FAILED, [&] {
        if (n > 0) require(tokens, "tokens");
        std::vector<offgrid::BatchToken> b(n);
        for (size_t i = 0; i < n; ++i) b[i] = {tokens[i], -1, {seq}, i + 1 == n};
        run_decode(ctx, b);
    });
}

int32_t offgrid_n_outputs(const offgrid_context * ctx) { return ctx ? ctx->ctx->n_outputs() : 0; }

const float * offgrid_logits(const offgrid_context * ctx, int32_t i) {
    const float * row = nullptr;
    guard(OFFGRID_ERROR_INVALID_ARGUMENT, [&] {
        const offgrid::Context & c = *require(ctx, "context")->ctx;
        row = c.logits(i < 0 ? c.n_outputs() + i : i);
    });
    return row;
}

offgrid_status offgrid_embed(offgrid_context * ctx, const int32_t * tokens, size_t n, int32_t seq, int normalize,
                             float * out, size_t cap) {
    return guard(OFFGRID_ERROR_FAILED, [&] {
        require(ctx, "context");
        if (n > 0) require(tokens, "tokens");
        const size_t width = ctx->model->n_embd();
        if (cap < width) {
            throw StatusError(OFFGRID_ERROR_BUFFER_TOO_SMALL, "an embedding has " + std::to_string(width) + " floats");
        }
        require(out, "out");
        std::vector<float> v = ctx->ctx->embed(std::vector<int32_t>(tokens, tokens + n), seq);
        if (normalize) {
            double sum = 0;
            for (const float x : v) sum += static_cast<double>(x) * x;
            const double norm = std::sqrt(sum);
            if (norm > 0) {
                for (float & x : v) x = static_cast<float>(x / norm);
            }
        }
        std::memcpy(out, v.data(), width * sizeof(float));
    });
}

offgrid_status offgrid_seq_rm(offgrid_context * ctx, int32_t seq, int32_t p0, int32_t p1) {
    return guard(OFFGRID_ERROR_INVALID_ARGUMENT, [&] {
        if (!require(ctx, "context")->ctx->seq_rm(seq, p0, p1)) {
            // Refused with nothing changed: a partial removal beyond the rollback snapshots of a recurrent model,
            // or one that splits cells other sequences share.
            throw StatusError(OFFGRID_ERROR_FAILED, "seq_rm: the memory refuses to remove [" + std::to_string(p0) +
                                                        ", " + std::to_string(p1) + ") of sequence " + std::to_string(seq));
        }
    });
}

offgrid_status offgrid_seq_cp(offgrid_context * ctx, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    return guard(OFFGRID_ERROR_INVALID_ARGUMENT, [&] { require(ctx, "context")->ctx->seq_cp(src, dst, p0, p1); });
}

int32_t offgrid_seq_pos_max(const offgrid_context * ctx, int32_t seq) {
    int32_t pos = -1;
    guard(OFFGRID_ERROR_INVALID_ARGUMENT, [&] { pos = require(ctx, "context")->ctx->seq_pos_max(seq); });
    return pos;
}

void offgrid_clear(offgrid_context * ctx) {
    if (ctx) ctx->ctx->clear();
}

offgrid_status offgrid_state_save_file(const offgrid_context * ctx, const char * path, int32_t seq,
                                       const int32_t * tokens, size_t n_tokens) {
    return guard(OFFGRID_ERROR_FILE, [&] {
        require(ctx, "context");
        require(path, "path");
        if (n_tokens > 0) require(tokens, "tokens");
        ctx->ctx->state_save_file(path, std::vector<int32_t>(tokens, tokens + n_tokens), seq);
    });
}

offgrid_status offgrid_state_load_file(offgrid_context * ctx, const char * path, int32_t seq, int32_t ** tokens,
                                       size_t * n_tokens) {
    return guard(OFFGRID_ERROR_FILE, [&] {
        require(ctx, "context");
        require(path, "path");
        require(tokens, "tokens");
        require(n_tokens, "n_tokens");
        const std::vector<int32_t> ids = ctx->ctx->state_load_file(path, seq);
        int32_t * copy = nullptr;
        if (!ids.empty()) {
            copy = static_cast<int32_t *>(std::malloc(ids.size() * sizeof(int32_t)));
            if (!copy) throw std::bad_alloc();
            std::memcpy(copy, ids.data(), ids.size() * sizeof(int32_t));
        }
        *tokens = copy;
        *n_tokens = ids.size();
    });
}

void offgrid_tokens_free(int32_t * tokens) { std::free(tokens); }

offgrid_sampler_params offgrid_sampler_default_params(void) {
    const offgrid::SamplingParams d;
    return {d.temperature, d.top_k,           d.top_p,         d.min_p, d.repeat_penalty,
            d.frequency_penalty, d.presence_penalty, d.repeat_last_n, d.seed};
}

offgrid_status offgrid_sampler_new(const offgrid_sampler_params * params, offgrid_sampler ** out) {
    return guard(OFFGRID_ERROR_INVALID_ARGUMENT, [&] {
        require(out, "out");
        const offgrid_sampler_params p = params ? *params : offgrid_sampler_default_params();
        *out = new offgrid_sampler{offgrid::Sampler(sampling_params(p))};
    });
}

void offgrid_sampler_free(offgrid_sampler * sampler) { delete sampler; }

offgrid_status offgrid_sampler_sample(offgrid_sampler * sampler, const offgrid_context * ctx, int32_t i,
                                      int32_t * token) {
    return guard(OFFGRID_ERROR_INVALID_ARGUMENT, [&] {
        require(sampler, "sampler");
        require(ctx, "context");
        require(token, "token");
        *token = sampler->sampler.sample(*ctx->ctx, i);
    });
}

offgrid_status offgrid_sampler_sample_logits(offgrid_sampler * sampler, const float * logits, size_t n,
                                             int32_t * token) {
    return guard(OFFGRID_ERROR_INVALID_ARGUMENT, [&] {
        require(sampler, "sampler");
        require(token, "token");
        if (n > 0) require(logits, "logits");
        *token = sampler->sampler.sample({logits, n});
    });
}

void offgrid_sampler_accept(offgrid_sampler * sampler, int32_t token) {
    if (sampler) sampler->sampler.accept(token);
}

void offgrid_sampler_reset(offgrid_sampler * sampler) {
    if (sampler) sampler->sampler.reset();
}

}  // extern "C"
