// The qwen4exp NextN (MTP) draft head (../shared/spec/qwen4exp-mtp.md section 3): one MTP row takes a token x at
// position p and the target's final wide residual h of position p-1 (hc x E floats, before the output mixer),
// and predicts the token at p+1. Its attention is dense over the head's own small KV cache (MtpCache), one row
// per position, written by every row the head runs.
//
// Invariants:
//  1. An MtpCache holds the rows of one run of consecutive positions [first, end()); row p was computed from
//     (x_p, h_{p-1}) by whoever ran it last. Writing at a position below end() first drops every row from it
//     (stale draft rows); a position beyond end() restarts the cache there (a gap: draft quality only).
//  2. The head never touches the target's memory: draft quality may vary, the target's output cannot.
#pragma once

#include <cstdint>
#include <vector>

#include "model/qwen4exp/hparams.h"
#include "model/qwen4exp/weights.h"
#include "ops/thread_pool.h"
#include "ops/workspace.h"

namespace offgrid::model::qwen4exp {

// How the hidden input is normalised before eh_proj (spec 3.2 HAZARD): one RMSNorm per stream (llama.cpp, and
// how offgrid's trainer trained the built-in head) or one over all hc x E values (the vLLM reference).
enum class HnormMode { Grouped, Global };

struct MtpCache {
    int32_t first = 0;          // position of row 0
    size_t n = 0;               // rows held
    std::vector<float> k, v;    // n rows of D * Hkv each (k after its norm and rope)

    int32_t end() const { return first + static_cast<int32_t>(n); }
    // Drops the rows at positions >= pos.
    void truncate(int32_t pos);
    void clear() { n = 0; }
};

class MtpHead {
public:
    // `hp` and `mtp` describe the head; `embed` and `head` are the tables it reads when the block has no
    // nextn.embed_tokens / nextn.shared_head_head of its own (the model's, or a target's for an MTP-only file).
    // Throws offgrid::Error when the block is absent or a table does not have E x V.
    MtpHead(const Hparams & hp, const MtpWeights & mtp, const ops::Matrix & embed, const ops::Matrix & head,
            HnormMode mode = HnormMode::Grouped);

    uint32_t wide_width() const { return hp_.hc * hp_.n_embd; }
    uint32_t n_vocab() const { return hp_.n_vocab; }
    HnormMode hnorm_mode() const { return mode_; }

    // Rows with no output: only their K and V are computed and written to `cache` (the attention output of a
    // row feeds nothing but its own logits). tokens[i] at pos[i] with hidden h + i * wide_width().
    // Scratch comes from `ws` (reset here; it grows to what the head takes, then allocates nothing; null: a
    // private one), its arenas one per thread of `pool`.
    void catch_up(MtpCache & cache, const int32_t * tokens, const int32_t * pos, const float * h, size_t n,
                  ops::ThreadPool * pool = nullptr, ops::Workspace * ws = nullptr) const;

    // One full row: writes its K/V at `pos`, then logits (n_vocab floats) and the row's own final residual
    // h_out (wide_width() floats: the hidden of the next draft step).
    void step(MtpCache & cache, int32_t token, int32_t pos, const float * h, float * logits, float * h_out,
              ops::ThreadPool * pool = nullptr, ops::Workspace * ws = nullptr) const;

private:
    // R0 (n x hc x E) of rows (tokens, h): eh_proj of [enorm(e) | hnorm(h_s)] per stream.
    void project(const int32_t * tokens, const float * h, size_t n, float * R0, ops::ThreadPool * pool,
                 ops::Arena & scratch) const;
    // The block's attention input a (n x E) and inject (n x hc) from R0; q (n x 2DH, normed and roped) when
    // q is non-null; k, v (n x D Hkv) appended to the cache.
    void attention_inputs(MtpCache & cache, const int32_t * pos, const float * R0, size_t n, float * a, float * inject,
                          float * q, ops::ThreadPool * pool, ops::Arena & scratch) const;

    Hparams hp_;
    const MtpWeights & w_;
    ops::Matrix embed_, head_;
    HnormMode mode_;
};

}  // namespace offgrid::model::qwen4exp
