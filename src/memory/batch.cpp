#include "memory/batch.h"

#include <algorithm>
#include <array>
#include <string>

#include "common/error.h"

namespace offgrid::memory {

namespace {

[[noreturn]] void fail_at(size_t i, const std::string & rule, const std::string & what) {
    throw Error("batch: token " + std::to_string(i) + ": " + rule + ": " + what);
}

[[noreturn]] void fail(const std::string & rule, const std::string & what) {
    throw Error("batch: " + rule + ": " + what);
}

void check_size(size_t have, size_t n, const char * field) {
    if (have != 0 && have != n)
        fail("field sizes", std::string(field) + " has " + std::to_string(have) + " entries for " +
                                std::to_string(n) + " tokens");
}

}  // namespace

ValidBatch validate_batch(const Batch & batch, const BatchLimits & limits, const SeqRangeFn & memory_range) {
    ValidBatch out;
    validate_batch(batch, limits, memory_range, out);
    return out;
}

// Per-sequence facts are kept in arrays indexed by sequence id and visited through the set of sequences the
// batch names, in increasing id order (the order the rules are reported in), so validation takes no heap memory
// beyond `out`'s buffers.
void validate_batch(const Batch & batch, const BatchLimits & limits, const SeqRangeFn & memory_range,
                    ValidBatch & out) {
    const size_t n = batch.tokens.size();
    if (n == 0) fail("n_tokens > 0", "the batch has no tokens");
    check_size(batch.pos.size(), n, "pos");
    check_size(batch.seqs.size(), n, "seqs");
    check_size(batch.output.size(), n, "output");
    check_size(batch.pos_x.size(), n, "pos_x");
    check_size(batch.pos_y.size(), n, "pos_y");
    if (limits.n_seq_max == 0 || limits.n_seq_max > (uint32_t)kMaxSeq)  // V1
        fail("V1 n_seq_max <= 256", "n_seq_max = " + std::to_string(limits.n_seq_max));

    out.tokens.assign(batch.tokens.begin(), batch.tokens.end());
    out.seqs.resize(n);
    out.first.resize(n);
    for (size_t i = 0; i < n; ++i) {
        const Token t = batch.tokens[i];
        out.seqs[i].reset();
        if (limits.n_vocab != 0 && (t < 0 || (uint32_t)t >= limits.n_vocab))  // V2
            fail_at(i, "V2 token id in [0, n_vocab)",
                    "token id " + std::to_string(t) + " with n_vocab = " + std::to_string(limits.n_vocab));
        if (batch.seqs.empty()) {
            out.seqs[i].set(0);
            out.first[i] = 0;
            continue;
        }
        if (batch.seqs[i].empty()) fail_at(i, "V3 sequence ids", "the token belongs to no sequence");
        for (size_t k = 0; k < batch.seqs[i].size(); ++k) {
            const SeqId s = batch.seqs[i][k];
            if (s < 0 || (uint32_t)s >= limits.n_seq_max)  // V3
                fail_at(i, "V3 sequence id in [0, n_seq_max)",
                        "seq id " + std::to_string(s) + " with n_seq_max = " + std::to_string(limits.n_seq_max));
            out.seqs[i].set(s);
        }
        out.first[i] = batch.seqs[i][0];
    }

    // Memory ranges of every sequence the batch names, read once.
    SeqSet named;
    for (size_t i = 0; i < n; ++i) named |= out.seqs[i];
    std::array<SeqRange, kMaxSeq> mem;
    for (size_t s = seq_begin(named); s < kMaxSeq; s = seq_next(named, s)) mem[s] = memory_range((SeqId)s);

    // Positions: explicit, or each sequence continues at pos_max + 1 (8.3).
    out.pos.resize(n);
    if (batch.pos.empty()) {
        std::array<Pos, kMaxSeq> next;
        for (size_t s = seq_begin(named); s < kMaxSeq; s = seq_next(named, s)) next[s] = mem[s].max + 1;
        for (size_t i = 0; i < n; ++i) {
            const Pos p = next[out.first[i]];
            if (p >= kPosInf - 1) fail_at(i, "position range", "automatic position overflows");
            out.pos[i] = p;
            for (size_t s = seq_begin(out.seqs[i]); s < kMaxSeq; s = seq_next(out.seqs[i], s)) next[s] = p + 1;
        }
    } else {
        for (size_t i = 0; i < n; ++i) {
            const Pos p = batch.pos[i];
            if (p < 0 || p >= kPosInf - 1)
                fail_at(i, "position range", "position " + std::to_string(p) + " is outside [0, 2^31 - 2)");
            out.pos[i] = p;
        }
    }
    // A text token's M-RoPE position is (p, p, p, 0): its 2-D coordinates are its position. Pooled keys are
    // rotated at (pos, y, x, pos) of their first member, so they need these.
    const std::vector<Pos> & px = batch.pos_x.empty() ? out.pos : batch.pos_x;
    const std::vector<Pos> & py = batch.pos_y.empty() ? out.pos : batch.pos_y;
    out.pos_x.assign(px.begin(), px.end());
    out.pos_y.assign(py.begin(), py.end());

    // Per-sequence position rules V4-V6 and V9, reported at the first offending token. Positions of a sequence
    // never decrease (V9, checked on the way), so its distinct positions are its first one plus each change.
    struct SeqInfo {
        Pos min = kPosInf, max = -1;
        size_t first_tok = 0, last_tok = 0;
        size_t distinct = 0;
    };
    std::array<SeqInfo, kMaxSeq> info;
    SeqSet seen;
    for (size_t i = 0; i < n; ++i) {
        for (size_t s = seq_begin(out.seqs[i]); s < kMaxSeq; s = seq_next(out.seqs[i], s)) {
            SeqInfo & si = info[s];
            const bool fresh = !seen.test(s);
            if (fresh) {
                seen.set(s);
                si = SeqInfo{};
                si.first_tok = i;
            }
            if (!fresh && out.pos[i] < out.pos[si.last_tok])  // V9
                fail_at(i, "V9 positions of a sequence never decrease",
                        "sequence " + std::to_string(s) + " goes from " + std::to_string(out.pos[si.last_tok]) +
                            " to " + std::to_string(out.pos[i]));
            if (fresh || out.pos[i] != out.pos[si.last_tok]) ++si.distinct;
            si.last_tok = i;
            si.min = std::min(si.min, out.pos[i]);
            si.max = std::max(si.max, out.pos[i]);
        }
    }
    for (size_t s = seq_begin(seen); s < kMaxSeq; s = seq_next(seen, s)) {
        const SeqInfo & si = info[s];
        const Pos x = mem[s].max;
        if (limits.multi_pos) {
            if (x >= 0 && !(x < si.min))  // V4
                fail_at(si.first_tok, "V4 sequence positions follow the memory",
                        "sequence " + std::to_string(s) + " holds position " + std::to_string(x) +
                            " in memory, the batch starts at " + std::to_string(si.min));
            continue;
        }
        if (x >= 0 && si.min != x + 1)  // V5
            fail_at(si.first_tok, "V5 sequence positions continue at pos_max + 1",
                    "sequence " + std::to_string(s) + " ends at " + std::to_string(x) + " in memory, the batch starts at " +
                        std::to_string(si.min) + " instead of " + std::to_string(x + 1));
        if ((int64_t)si.max - si.min + 1 > (int64_t)si.distinct)  // V6
            fail_at(si.first_tok, "V6 sequence positions have no gaps",
                    "sequence " + std::to_string(s) + " spans " + std::to_string(si.min) + ".." +
                        std::to_string(si.max) + " with " + std::to_string(si.distinct) + " distinct positions");
    }
    // V8 (the reference's rule never fires, Q4): every token of a sequence carries the same sequence set, so
    // coupled sequences advance in lock step and keep identical cells (and identical pools).
    {
        std::array<size_t, kMaxSeq> first_tok;
        SeqSet met;
        for (size_t i = 0; i < n; ++i) {
            for (size_t s = seq_begin(out.seqs[i]); s < kMaxSeq; s = seq_next(out.seqs[i], s)) {
                if (!met.test(s)) {
                    met.set(s);
                    first_tok[s] = i;
                } else if (out.seqs[first_tok[s]] != out.seqs[i]) {
                    fail_at(i, "V8 a sequence keeps one sequence set within a batch",
                            "sequence " + std::to_string(s) + " is in a different set of sequences than at token " +
                                std::to_string(first_tok[s]));
                }
            }
        }
    }
    // V7: sequences coupled in one token must agree in memory.
    for (size_t i = 0; i < n; ++i) {
        const SeqId s0 = out.first[i];
        for (size_t s1 = seq_begin(out.seqs[i]); s1 < kMaxSeq; s1 = seq_next(out.seqs[i], s1)) {
            if ((SeqId)s1 == s0) continue;
            if (mem[s0].min != mem[s1].min || mem[s0].max != mem[s1].max)
                fail_at(i, "V7 coupled sequences agree in memory",
                        "sequence " + std::to_string(s0) + " is coupled to " + std::to_string(s1) +
                            " but they have diverged");
        }
    }

    out.output.assign(n, 0);
    if (batch.output.empty()) {
        out.output[n - 1] = 1;
    } else {
        for (size_t i = 0; i < n; ++i) out.output[i] = batch.output[i] ? 1 : 0;
    }
}

bool split_equal(const ValidBatch & batch, uint32_t n_ubatch, bool separate_streams, uint32_t keep_tail,
                 Split & out, std::string & why) {
    SplitScratch scratch;
    return split_equal(batch, n_ubatch, separate_streams, keep_tail, out, why, scratch);
}

bool split_equal(const ValidBatch & batch, uint32_t n_ubatch, bool separate_streams, uint32_t keep_tail,
                 Split & out, std::string & why, SplitScratch & sc) {
    out.clear();
    const size_t n = batch.size();
    if (n_ubatch == 0) {
        why = "n_ubatch is 0";
        return false;
    }
    if (keep_tail > n_ubatch) {
        why = "n_ubatch " + std::to_string(n_ubatch) + " cannot keep the last " + std::to_string(keep_tail) +
              " tokens of a sequence together";
        return false;
    }
    if (separate_streams) {
        for (size_t i = 0; i < n; ++i) {
            if (batch.seqs[i].count() > 1) {
                why = "token " + std::to_string(i) +
                      " belongs to several sequences, which needs a unified cache (one stream per sequence here)";
                return false;
            }
        }
    }
    // Distinct sequence sets in order of first appearance, each with its token queue (queue_at[k] ..
    // queue_at[k + 1] in `queue`, in batch order).
    sc.sets.clear();
    sc.set_of.resize(n);
    for (size_t i = 0; i < n; ++i) {
        size_t k = 0;
        while (k < sc.sets.size() && sc.sets[k] != batch.seqs[i]) ++k;
        if (k == sc.sets.size()) sc.sets.push_back(batch.seqs[i]);
        sc.set_of[i] = (uint32_t)k;
    }
    const size_t n_sets = sc.sets.size();
    sc.queue_at.assign(n_sets + 1, 0);
    for (size_t i = 0; i < n; ++i) ++sc.queue_at[sc.set_of[i] + 1];
    for (size_t k = 0; k < n_sets; ++k) sc.queue_at[k + 1] += sc.queue_at[k];
    sc.used.assign(n_sets, 0);  // as a fill count first
    sc.queue.resize(n);
    for (size_t i = 0; i < n; ++i) {
        const uint32_t k = sc.set_of[i];
        sc.queue[sc.queue_at[k] + sc.used[k]++] = (uint32_t)i;
    }
    sc.used.assign(n_sets, 0);
    auto queue_size = [&](size_t k) { return sc.queue_at[k + 1] - sc.queue_at[k]; };
    auto queued = [&](size_t k, size_t j) { return sc.queue[sc.queue_at[k] + j]; };

    for (;;) {
        // Pick sets in order of their next unused token, skipping sets overlapping a picked one.
        sc.order.clear();
        for (size_t k = 0; k < n_sets; ++k)
            if (sc.used[k] < queue_size(k)) sc.order.push_back(k);
        if (sc.order.empty()) break;
        std::sort(sc.order.begin(), sc.order.end(),
                  [&](size_t a, size_t b) { return queued(a, sc.used[a]) < queued(b, sc.used[b]); });
        sc.pick.clear();
        SeqSet taken;
        for (size_t k : sc.order) {
            if ((sc.sets[k] & taken).any()) continue;
            sc.pick.push_back(k);
            taken |= sc.sets[k];
            if (sc.pick.size() >= n_ubatch) break;  // Q5 fixed: never more sets than n_ubatch
        }
        // Grow the picked sets in lock step.
        uint32_t per = 0;
        for (;;) {
            bool all = true;
            for (size_t k : sc.pick)
                if (sc.used[k] + per >= queue_size(k)) all = false;
            if (!all || (uint64_t)(per + 1) * sc.pick.size() > n_ubatch) break;
            ++per;
        }
        if (keep_tail > 0) {
            size_t keep = 0;
            while (keep < sc.pick.size()) {
                const size_t rem = queue_size(sc.pick[keep]) - sc.used[sc.pick[keep]] - per;
                if (rem != 0 && rem < keep_tail) break;
                ++keep;
            }
            if (keep == 0) {
                // The first set alone: all of it if it fits, else leave keep_tail tokens for the next ubatch.
                const size_t total = queue_size(sc.pick[0]) - sc.used[sc.pick[0]];
                per = (uint32_t)(total <= n_ubatch ? total : std::min<size_t>(n_ubatch, total - keep_tail));
                keep = 1;
            }
            sc.pick.resize(keep);
        }
        out.start(per);
        for (size_t k : sc.pick) {
            out.add_set(sc.sets[k]);
            for (uint32_t t = 0; t < per; ++t) out.add_token(queued(k, sc.used[k] + t));
            sc.used[k] += per;
        }
    }
    return true;
}

bool split_simple(const ValidBatch & batch, uint32_t n_ubatch, Split & out, std::string & why) {
    out.clear();
    if (n_ubatch == 0) {
        why = "n_ubatch is 0";
        return false;
    }
    for (size_t i = 0; i < batch.size(); i += n_ubatch) {
        out.start(1);
        for (size_t j = i; j < batch.size() && j < i + n_ubatch; ++j) {
            out.add_token((uint32_t)j);
            out.add_set(batch.seqs[j]);
        }
    }
    return true;
}

bool split_seq(const ValidBatch & batch, uint32_t n_ubatch, Split & out, std::string & why) {
    out.clear();
    if (n_ubatch == 0) {
        why = "n_ubatch is 0";
        return false;
    }
    const size_t n = batch.size();
    std::vector<bool> used(n, false);
    size_t first = 0;
    for (;;) {
        while (first < n && used[first]) ++first;
        if (first == n) break;
        out.start(0);
        out.add_set(batch.seqs[first]);
        SeqSet current = batch.seqs[first];
        uint32_t taken = 0;
        // Only forward from the last taken token: tokens skipped here start or join a later ubatch.
        for (size_t i = first; i < n && taken < n_ubatch; ++i) {
            if (used[i] || (batch.seqs[i] & current) != batch.seqs[i]) continue;
            out.add_token((uint32_t)i);
            ++taken;
            used[i] = true;
            current = batch.seqs[i];
        }
        out.set_n_seq_tokens(taken);
    }
    return true;
}

}  // namespace offgrid::memory
