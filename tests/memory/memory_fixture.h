// Test helpers: small memory configurations, a decode driver and a fake model that writes recognisable values
// into the storage, so tests can check what the memory kept, restored or rolled back.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "memory/hybrid_memory.h"

namespace offgrid::memory::test {

// A shape with one attention layer, one recurrent layer (2 state floats: token count and a token hash), an
// indexer of width 2, all rows F32.
inline CacheShape small_shape(bool recurrent = true, bool indexer = true) {
    CacheShape s;
    s.n_attn_layers = 1;
    s.k_width = 2;
    s.v_width = 2;
    s.idx_width = indexer ? 2 : 0;
    s.n_recr_layers = recurrent ? 1 : 0;
    s.conv_floats = recurrent ? 2 : 0;
    s.ssm_floats = recurrent ? 1 : 0;
    s.row_floats = 0;
    s.type_k = tensor::ElemType::F32;
    s.type_v = tensor::ElemType::F32;
    s.type_idx = tensor::ElemType::F32;
    return s;
}

inline MemoryParams small_params(uint32_t n_ctx = 64, uint32_t n_seq_max = 4, bool unified = true,
                                 uint32_t n_rs_seq = 0, uint32_t n_ubatch = 16, uint32_t kpool = 0,
                                 bool by_order = true, bool recurrent = true) {
    MemoryParams p;
    p.shape = small_shape(recurrent, kpool > 0 || true);
    p.n_ctx = n_ctx;
    p.n_seq_max = n_seq_max;
    p.unified = unified;
    p.n_rs_seq = n_rs_seq;
    p.n_ubatch = n_ubatch;
    p.kpool = kpool;
    p.by_order = by_order;
    p.n_vocab = 1000;
    return p;
}

// The fake recurrent state: (tokens absorbed, hash of the tokens), both exact in float.
inline void absorb(float & n, float & h, Token t) {
    n += 1.0f;
    h = (float)std::fmod((double)h * 31.0 + (double)t + 1.0, 65521.0);
}

// Signature a pooled key carries (the first member's position goes next to it).
// A pooled key depends on its members' raw keys, in order, not on where they are stored: a restore that moves the
// cells keeps the pooled keys it saved, as a real model's would be. The raw key here is (token, pos at writing).
inline float pool_signature(HybridMemory & mem, std::span<const uint32_t> members) {
    double sig = 0;
    for (uint32_t c : members) {
        const float * raw = (const float *)mem.idx_row(0, c);
        sig = std::fmod(sig * 7.0 + raw[0] * 3.0 + raw[1] + 1.0, 1048573.0);
    }
    return (float)sig;
}

// Runs what a model would: raw key = (token, pos) into the indexer row, K = (token, pos), new pools get their
// signature in the pooled half of the rep row, recurrent groups absorb their tokens and write snapshots.
inline void fake_forward(const Plan & plan, HybridMemory & mem) {
    const auto & shape = mem.params().shape;
    for (const TokenPlan & t : plan.tokens) {
        if (shape.n_attn_layers == 0) break;  // a pure recurrent memory has no rows
        float * k = (float *)mem.k_row(0, t.cell);
        k[0] = (float)t.token;
        k[1] = (float)t.pos;
        if (shape.idx_width > 0) {
            float * idx = (float *)mem.idx_row(0, t.cell);
            idx[0] = (float)t.token;
            idx[1] = (float)t.pos;
            idx[2] = -1.0f;  // pooled half cleared, as a real model writes [raw | 0]
            idx[3] = -1.0f;
        }
    }
    for (const NewPool & np : plan.new_pools) {
        float * idx = (float *)mem.idx_row(0, np.rep);
        idx[2] = pool_signature(mem, np.members);
        idx[3] = (float)np.pos;
    }
    // As the model does before scoring: the pooled keys in pool order of each sequence of the ubatch.
    if (shape.idx_width > 0 && mem.params().kpool > 0)
        for (const TokenPlan & t : plan.tokens) (void)mem.pool_keys(0, t.seq);
    if (shape.n_recr_layers == 0) return;
    for (const SeqGroup & g : plan.groups) {
        float * st = mem.conv_state(0, g.row);
        float n = st[0], h = st[1];
        std::vector<std::pair<float, float>> before;
        for (uint32_t ti : g.tokens) {
            before.push_back({n, h});
            absorb(n, h, plan.tokens[ti].token);
        }
        for (size_t k = 1; k <= g.snapshots.size(); ++k) {
            float * snap = mem.conv_state(0, g.snapshots[k - 1]);
            snap[0] = before[before.size() - k].first;
            snap[1] = before[before.size() - k].second;
        }
        st[0] = n;
        st[1] = h;
    }
}

// One decode call of n tokens of sequence s at positions p..p+n-1 (tokens 100 + position unless given).
inline DecodeStatus dec(HybridMemory & mem, SeqId s, Pos p, int n, std::vector<Token> toks = {},
                        std::string * message = nullptr) {
    Batch b;
    for (int i = 0; i < n; ++i) {
        b.tokens.push_back(toks.empty() ? 100 + (p + i) % 800 : toks[i]);
        b.pos.push_back(p + i);
        b.seqs.push_back({s});
    }
    BeginResult r = mem.begin(b);
    if (message) *message = r.message;
    if (r.status != DecodeStatus::Ok) return r.status;
    while (mem.has_next()) fake_forward(mem.apply(), mem);
    mem.finish();
    return DecodeStatus::Ok;
}

inline DecodeStatus dec_batch(HybridMemory & mem, const Batch & b, std::string * message = nullptr) {
    BeginResult r = mem.begin(b);
    if (message) *message = r.message;
    if (r.status != DecodeStatus::Ok) return r.status;
    while (mem.has_next()) fake_forward(mem.apply(), mem);
    mem.finish();
    return DecodeStatus::Ok;
}

inline std::pair<Pos, Pos> mm(const HybridMemory & mem, SeqId s) { return {mem.seq_pos_min(s), mem.seq_pos_max(s)}; }
inline std::pair<Pos, Pos> span(const HybridMemory & mem, SeqId s) {
    return {mem.seq_first_pos(s), mem.seq_pos_max(s)};
}

// The fake recurrent state of s: (tokens absorbed, hash).
inline std::pair<float, float> rec_state(HybridMemory & mem, SeqId s) {
    const float * st = mem.conv_state(0, mem.recurrent().row(0, mem.recurrent().slot_of(s)));
    return {st[0], st[1]};
}

// What the state of s should be: its tokens in position order, as the attention cells hold them.
inline std::pair<float, float> expected_state(const HybridMemory & mem, SeqId s) {
    float n = 0, h = 0;
    const KvCache & kv = mem.kv();
    const uint32_t st = kv.stream_of(s);
    for (auto & [p, c] : kv.stream(st).seq_cells(s)) absorb(n, h, kv.stream(st).ext(c).tok);
    return {n, h};
}

}  // namespace offgrid::memory::test

namespace offgrid::memory::test {

// Every pool of every sequence has the right pooled key in its rep row (written by fake_forward), and every
// present sequence's recurrent state holds exactly its tokens. Returns "" or what is wrong.
// Storage::pool_keys of every sequence equals the pooled parts of its rep rows, key for key.
inline std::string check_pool_keys(HybridMemory & mem) {
    if (mem.params().kpool == 0 || mem.params().shape.idx_width == 0) return "";
    for (SeqId s = 0; s < (SeqId)mem.params().n_seq_max; ++s) {
        const SeqLayout & sq = mem.layout().seq(s);
        const PoolKeyTable keys = mem.pool_keys(0, s);
        const size_t part = mem.kv().idx_row_bytes() / 2;
        if (!sq.reps.empty() && (keys.base == nullptr || keys.dim * keys.elem != part))
            return "seq " + std::to_string(s) + ": no pool keys";
        for (size_t k = 0; k < sq.reps.size(); ++k) {
            const uint8_t * row = (const uint8_t *)mem.idx_row(0, sq.reps[k]) + part;
            for (size_t e = 0; e < keys.dim; ++e)
                if (std::memcmp(keys.element(k, e), row + e * keys.elem, keys.elem) != 0)
                    return "seq " + std::to_string(s) + " pool " + std::to_string(k) + ": pool_keys differs from the rep row";
        }
    }
    return "";
}

inline std::string check_contents(HybridMemory & mem) {
    const uint32_t kpool = mem.params().kpool;
    if (std::string e = check_pool_keys(mem); !e.empty()) return e;
    for (SeqId s = 0; s < (SeqId)mem.params().n_seq_max; ++s) {
        const SeqLayout & sq = mem.layout().seq(s);
        if (kpool > 0) {
            for (size_t k = 0; k < sq.pools.size(); ++k) {
                // Stale pools are pooled again by the next decode; until then their rows may be old.
                if (sq.cells[sq.pools[k] + kpool - 1].pos >= mem.layout().stale(s)) continue;
                std::vector<uint32_t> members;
                for (uint32_t m = 0; m < kpool; ++m) members.push_back(sq.cells[sq.pools[k] + m].cell);
                const float * row = (const float *)mem.idx_row(0, members.back());
                if (row[2] != pool_signature(mem, members) || row[3] != (float)sq.cells[sq.pools[k]].pos)
                    return "seq " + std::to_string(s) + " pool " + std::to_string(k) + " (rep cell " +
                           std::to_string(members.back()) + ") holds a stale pooled key";
            }
        }
        if (mem.params().shape.n_recr_layers > 0 && mem.recurrent().present(s)) {
            if (rec_state(mem, s) != expected_state(mem, s))
                return "seq " + std::to_string(s) + " recurrent state does not hold exactly its tokens (" +
                       std::to_string(rec_state(mem, s).first) + " vs " + std::to_string(expected_state(mem, s).first) +
                       " tokens)";
        }
    }
    return "";
}

}  // namespace offgrid::memory::test
