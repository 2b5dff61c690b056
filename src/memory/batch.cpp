#include "memory/batch.h"

#include <algorithm>
#include <map>
#include <set>
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
    const size_t n = batch.tokens.size();
    if (n == 0) fail("n_tokens > 0", "the batch has no tokens");
    check_size(batch.pos.size(), n, "pos");
    check_size(batch.seqs.size(), n, "seqs");
    check_size(batch.output.size(), n, "output");
    check_size(batch.pos_x.size(), n, "pos_x");
    check_size(batch.pos_y.size(), n, "pos_y");
    if (limits.n_seq_max == 0 || limits.n_seq_max > (uint32_t)kMaxSeq)  // V1
        fail("V1 n_seq_max <= 256", "n_seq_max = " + std::to_string(limits.n_seq_max));

    ValidBatch out;
    out.tokens = batch.tokens;
    out.seqs.resize(n);
    out.first.resize(n);
    for (size_t i = 0; i < n; ++i) {
        const Token t = batch.tokens[i];
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
    std::map<SeqId, SeqRange> mem;
    for (size_t i = 0; i < n; ++i)
        for (int s = 0; s < kMaxSeq; ++s)
            if (out.seqs[i].test(s) && !mem.count(s)) mem[s] = memory_range(s);

    // Positions: explicit, or each sequence continues at pos_max + 1 (8.3).
    out.pos.resize(n);
    if (batch.pos.empty()) {
        std::map<SeqId, Pos> next;
        for (auto & [s, r] : mem) next[s] = r.max + 1;
        for (size_t i = 0; i < n; ++i) {
            const Pos p = next[out.first[i]];
            if (p >= kPosInf - 1) fail_at(i, "position range", "automatic position overflows");
            out.pos[i] = p;
            for (int s = 0; s < kMaxSeq; ++s)
                if (out.seqs[i].test(s)) next[s] = p + 1;
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
    out.pos_x = batch.pos_x.empty() ? out.pos : batch.pos_x;
    out.pos_y = batch.pos_y.empty() ? out.pos : batch.pos_y;

    // Per-sequence position rules V4-V6 and V9, reported at the first offending token.
    struct SeqInfo {
        Pos min = kPosInf, max = -1;
        size_t first_tok = 0, last_tok = 0;
        std::set<Pos> distinct;
    };
    std::map<SeqId, SeqInfo> info;
    for (size_t i = 0; i < n; ++i) {
        for (int s = 0; s < kMaxSeq; ++s) {
            if (!out.seqs[i].test(s)) continue;
            auto [it, fresh] = info.try_emplace(s);
            SeqInfo & si = it->second;
            if (fresh) si.first_tok = i;
            if (!fresh && out.pos[i] < out.pos[si.last_tok])  // V9
                fail_at(i, "V9 positions of a sequence never decrease",
                        "sequence " + std::to_string(s) + " goes from " + std::to_string(out.pos[si.last_tok]) +
                            " to " + std::to_string(out.pos[i]));
            si.last_tok = i;
            si.min = std::min(si.min, out.pos[i]);
            si.max = std::max(si.max, out.pos[i]);
            si.distinct.insert(out.pos[i]);
        }
    }
    for (auto & [s, si] : info) {
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
        if ((int64_t)si.max - si.min + 1 > (int64_t)si.distinct.size())  // V6
            fail_at(si.first_tok, "V6 sequence positions have no gaps",
                    "sequence " + std::to_string(s) + " spans " + std::to_string(si.min) + ".." +
                        std::to_string(si.max) + " with " + std::to_string(si.distinct.size()) + " distinct positions");
    }
    // V8 (the reference's rule never fires, Q4): every token of a sequence carries the same sequence set, so
    // coupled sequences advance in lock step and keep identical cells (and identical pools).
    {
        std::map<SeqId, size_t> first_tok;
        for (size_t i = 0; i < n; ++i) {
            for (size_t s = seq_begin(out.seqs[i]); s < out.seqs[i].size(); s = seq_next(out.seqs[i], s)) {
                auto [it, fresh] = first_tok.try_emplace((SeqId)s, i);
                if (!fresh && out.seqs[it->second] != out.seqs[i])
                    fail_at(i, "V8 a sequence keeps one sequence set within a batch",
                            "sequence " + std::to_string(s) + " is in a different set of sequences than at token " +
                                std::to_string(it->second));
            }
        }
    }
    // V7: sequences coupled in one token must agree in memory.
    for (size_t i = 0; i < n; ++i) {
        const SeqId s0 = out.first[i];
        for (int s1 = 0; s1 < kMaxSeq; ++s1) {
            if (s1 == s0 || !out.seqs[i].test(s1)) continue;
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
    return out;
}

bool split_equal(const ValidBatch & batch, uint32_t n_ubatch, bool separate_streams, uint32_t keep_tail,
                 std::vector<Ubatch> & out, std::string & why) {
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
    // Distinct sequence sets in order of first appearance, each with its token queue.
    std::vector<SeqSet> sets;
    std::vector<std::vector<uint32_t>> queue;
    for (size_t i = 0; i < n; ++i) {
        size_t k = 0;
        while (k < sets.size() && sets[k] != batch.seqs[i]) ++k;
        if (k == sets.size()) {
            sets.push_back(batch.seqs[i]);
            queue.emplace_back();
        }
        queue[k].push_back((uint32_t)i);
    }
    std::vector<size_t> used(sets.size(), 0);

    for (;;) {
        // Pick sets in order of their next unused token, skipping sets overlapping a picked one.
        std::vector<size_t> order;
        for (size_t k = 0; k < sets.size(); ++k)
            if (used[k] < queue[k].size()) order.push_back(k);
        if (order.empty()) break;
        std::sort(order.begin(), order.end(),
                  [&](size_t a, size_t b) { return queue[a][used[a]] < queue[b][used[b]]; });
        std::vector<size_t> pick;
        SeqSet taken;
        for (size_t k : order) {
            if ((sets[k] & taken).any()) continue;
            pick.push_back(k);
            taken |= sets[k];
            if (pick.size() >= n_ubatch) break;  // Q5 fixed: never more sets than n_ubatch
        }
        // Grow the picked sets in lock step.
        uint32_t per = 0;
        for (;;) {
            bool all = true;
            for (size_t k : pick)
                if (used[k] + per >= queue[k].size()) all = false;
            if (!all || (uint64_t)(per + 1) * pick.size() > n_ubatch) break;
            ++per;
        }
        if (keep_tail > 0) {
            size_t keep = 0;
            while (keep < pick.size()) {
                const size_t rem = queue[pick[keep]].size() - used[pick[keep]] - per;
                if (rem != 0 && rem < keep_tail) break;
                ++keep;
            }
            if (keep == 0) {
                // The first set alone: all of it if it fits, else leave keep_tail tokens for the next ubatch.
                const size_t total = queue[pick[0]].size() - used[pick[0]];
                per = (uint32_t)(total <= n_ubatch ? total : std::min<size_t>(n_ubatch, total - keep_tail));
                keep = 1;
            }
            pick.resize(keep);
        }
        Ubatch ub;
        ub.n_seq_tokens = per;
        for (size_t k : pick) {
            ub.sets.push_back(sets[k]);
            for (uint32_t t = 0; t < per; ++t) ub.idx.push_back(queue[k][used[k] + t]);
            used[k] += per;
        }
        out.push_back(std::move(ub));
    }
    return true;
}

bool split_simple(const ValidBatch & batch, uint32_t n_ubatch, std::vector<Ubatch> & out, std::string & why) {
    out.clear();
    if (n_ubatch == 0) {
        why = "n_ubatch is 0";
        return false;
    }
    for (size_t i = 0; i < batch.size(); i += n_ubatch) {
        Ubatch ub;
        ub.n_seq_tokens = 1;
        for (size_t j = i; j < batch.size() && j < i + n_ubatch; ++j) {
            ub.idx.push_back((uint32_t)j);
            ub.sets.push_back(batch.seqs[j]);
        }
        out.push_back(std::move(ub));
    }
    return true;
}

bool split_seq(const ValidBatch & batch, uint32_t n_ubatch, std::vector<Ubatch> & out, std::string & why) {
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
        Ubatch ub;
        ub.sets.push_back(batch.seqs[first]);
        SeqSet current = batch.seqs[first];
        // Only forward from the last taken token: tokens skipped here start or join a later ubatch.
        for (size_t i = first; i < n && ub.idx.size() < n_ubatch; ++i) {
            if (used[i] || (batch.seqs[i] & current) != batch.seqs[i]) continue;
            ub.idx.push_back((uint32_t)i);
            used[i] = true;
            current = batch.seqs[i];
        }
        ub.n_seq_tokens = (uint32_t)ub.idx.size();
        out.push_back(std::move(ub));
    }
    return true;
}

}  // namespace offgrid::memory
