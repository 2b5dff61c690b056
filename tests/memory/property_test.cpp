// Property test: random operation sequences against a naive model of which (sequence, position, token) triples
// exist and which tokens each recurrent state absorbed. After every step: the caches hold exactly the naive
// content, the incremental pool layout equals one rebuilt from scratch, every non-stale pool's pooled key was
// computed from its current members, every plan re-pools exactly the stale pools and those its tokens touch,
// and position ranges agree.
//
// OFFGRID_PROPERTY_SEQS=N raises the number of sequences created (default 10000).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>
#include <set>

#include "common/error.h"
#include "memory/state_io.h"
#include "memory_fixture.h"

namespace offgrid::memory {
namespace {

using namespace test;

struct NaiveSeq {
    std::vector<std::pair<Pos, Token>> entries;  // sorted by position (stable for equal positions)
    std::vector<Token> absorbed;                 // tokens in the recurrent state, in order
    uint32_t snaps = 0;
    bool empty() const { return entries.empty(); }
    Pos max() const { return entries.empty() ? -1 : entries.back().first; }
    Pos min() const { return entries.empty() ? -1 : entries.front().first; }
};
using Naive = std::vector<NaiveSeq>;

struct Config {
    bool recurrent = true;
    bool unified;
    uint32_t kpool;
    bool by_order;
    uint32_t n_rs_seq;
    uint32_t n_seq_max;
    uint32_t n_ctx;
    uint32_t n_ubatch;
    Window window;  // with a window: kpool 0
};

class Runner {
public:
    Runner(const Config & c, uint64_t seed) : cfg_(c), rng_(seed), naive_(c.n_seq_max) {
        MemoryParams p = small_params(c.n_ctx, c.n_seq_max, c.unified, c.n_rs_seq, c.n_ubatch, c.kpool, c.by_order,
                                      c.recurrent);
        p.window = c.window;
        mem_ = std::make_unique<HybridMemory>(p);
    }

    int rnd(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

    // Checks everything; returns "" or the first violation.
    std::string check() {
        HybridMemory & mem = *mem_;
        if (std::string v = mem.invariant_violation(); !v.empty()) return "invariant " + v;
        const KvCache & kv = mem.kv();
        KPoolLayout fresh(cfg_.kpool, cfg_.by_order);
        for (SeqId s = 0; s < (SeqId)cfg_.n_seq_max; ++s) {
            const NaiveSeq & n = naive_[s];
            const uint32_t st = kv.stream_of(s);
            const SeqCells & sc = kv.stream(st).seq_cells(s);
            std::multiset<std::pair<Pos, Token>> have, want(n.entries.begin(), n.entries.end());
            for (auto & [p, c] : sc) have.insert({p, kv.stream(st).ext(c).tok});
            if (have != want) return "seq " + std::to_string(s) + ": attention cells differ from the naive model";
            if (mem.seq_pos_max(s) != n.max()) return "seq " + std::to_string(s) + ": pos_max";
            if (mem.seq_first_pos(s) != n.min()) return "seq " + std::to_string(s) + ": first pos";
            if (mem.seq_pos_min(s) != (cfg_.recurrent ? n.max() : n.min())) return "seq " + std::to_string(s) + ": hybrid pos_min";
            const RecurrentCache & rec = mem.recurrent();
            if (rec.present(s) != !n.empty()) return "seq " + std::to_string(s) + ": recurrent presence";
            if (!n.empty()) {
                if (rec.pos(s) != n.max()) return "seq " + std::to_string(s) + ": recurrent pos";
            }
            if (!n.empty() && cfg_.recurrent) {
                const RecurrentCache & rec = mem.recurrent();
                float cnt = 0, h = 0;
                for (Token t : n.absorbed) absorb(cnt, h, t);
                if (rec_state(mem, s) != std::make_pair(cnt, h))
                    return "seq " + std::to_string(s) + ": recurrent state is not its absorbed tokens";
                if (rec.seq(s).snaps != n.snaps) return "seq " + std::to_string(s) + ": snapshot count";
            }
            fresh.rebuild(s, sc, kv.global(st, 0));
            if (!(fresh.seq(s) == mem.layout().seq(s))) return "seq " + std::to_string(s) + ": layout differs from a rebuild";
        }
        return check_contents_pools();
    }

    std::string check_contents_pools() {
        HybridMemory & mem = *mem_;
        const uint32_t kpool = cfg_.kpool;
        if (std::string e = check_pool_keys(mem); !e.empty()) return e;
        for (SeqId s = 0; s < (SeqId)cfg_.n_seq_max; ++s) {
            const SeqLayout & sq = mem.layout().seq(s);
            for (size_t k = 0; k < sq.pools.size(); ++k) {
                if (sq.cells[sq.pools[k] + kpool - 1].pos >= mem.layout().stale(s)) continue;
                std::vector<uint32_t> members;
                for (uint32_t m = 0; m < kpool; ++m) members.push_back(sq.cells[sq.pools[k] + m].cell);
                const float * row = (const float *)mem.idx_row(0, members.back());
                if (row[2] != pool_signature(mem, members) || row[3] != (float)sq.cells[sq.pools[k]].pos)
                    return "seq " + std::to_string(s) + " pool " + std::to_string(k) + " holds a stale pooled key";
            }
        }
        return "";
    }

    // The plan re-pools exactly: stale pools (first ubatch) and pools holding a token of the ubatch, once per rep.
    std::string check_plan(const Plan & plan, bool first, const std::array<Pos, kMaxSeq> & stale) {
        HybridMemory & mem = *mem_;
        const uint32_t kpool = cfg_.kpool;
        std::set<uint32_t> want, got;
        std::set<uint32_t> ub_cells;
        for (auto & t : plan.tokens) ub_cells.insert(t.cell);
        for (SeqId s = 0; s < (SeqId)cfg_.n_seq_max; ++s) {
            const SeqLayout & sq = mem.layout().seq(s);
            for (size_t k = 0; k < sq.pools.size(); ++k) {
                bool touched = first && sq.cells[sq.pools[k] + kpool - 1].pos >= stale[s];
                for (uint32_t m = 0; m < kpool; ++m) touched = touched || ub_cells.count(sq.cells[sq.pools[k] + m].cell);
                if (touched) want.insert(sq.cells[sq.pools[k] + kpool - 1].cell);
            }
        }
        for (auto & np : plan.new_pools) {
            if (!got.insert(np.rep).second) return "plan pools a rep cell twice";
            if (np.members.size() != kpool || np.members.back() != np.rep) return "plan pool members";
        }
        if (want != got) return "plan re-pools " + std::to_string(got.size()) + " pools, expected " + std::to_string(want.size());
        for (auto & t : plan.tokens) {
            const SeqLayout & sq = mem.layout().seq(t.seq);
            uint32_t vis = 0;
            for (auto & pc : sq.cells) vis += pc.pos <= t.pos;
            if (t.n_visible != vis) return "token visibility";
            uint32_t outside = 0;  // entries at or before the token that its window masks
            for (auto & pc : sq.cells) outside += pc.pos <= t.pos && cfg_.window.masked(pc.pos, t.pos);
            if (t.first_visible != outside) return "token window";
            if (t.n_pools > sq.pools.size()) return "token pools";
            if (kpool > 0 && t.tail.size() >= kpool) return "tail too long";
            if (!t.tail.empty() && t.tail[0] != t.cell) return "tail does not start with the token";
        }
        return "";
    }

    // One decode call; `fail_after` >= 0 undoes the call after that many ubatches.
    std::string decode(const std::vector<std::pair<std::vector<SeqId>, int>> & parts, int fail_after) {
        HybridMemory & mem = *mem_;
        Batch b;
        std::map<SeqId, Pos> next;
        for (auto & [seqs, n] : parts) {
            for (int i = 0; i < n; ++i) {
                const SeqId lead = seqs[0];
                if (!next.count(lead)) next[lead] = naive_[lead].empty() ? rnd(0, 3) : naive_[lead].max() + 1;
                const Pos p = next[lead];
                for (SeqId s : seqs) next[s] = p + 1;
                b.tokens.push_back(rnd(0, 999));
                b.pos.push_back(p);
                b.seqs.push_back(seqs);
            }
        }
        trace = "decode";
        for (size_t i = 0; i < b.tokens.size(); ++i) {  // appends: GCC 12 warns (falsely) on " " + std::string
            trace += ' ';
            trace += std::to_string(b.seqs[i][0]);
            if (b.seqs[i].size() > 1) trace += '+';
            trace += '@';
            trace += std::to_string(b.pos[i]);
        }
        trace += " fail_after " + std::to_string(fail_after);
        const BeginResult r = mem.begin(b);
        if (r.status == DecodeStatus::InvalidBatch) {
            // Allowed only for coupled sequences whose own cells would clash in a pool row.
            if (r.message.find("would complete different pools") != std::string::npos) return check();
            return "unexpected invalid batch: " + r.message;
        }
        if (r.status == DecodeStatus::NoSpace) return "";
        Naive after = naive_;
        for (size_t i = 0; i < b.tokens.size(); ++i)
            for (SeqId s : b.seqs[i]) after[s].entries.push_back({b.pos[i], b.tokens[i]});
        int u = 0;
        while (mem.has_next()) {
            if (fail_after >= 0 && u == fail_after) {
                mem.undo();
                return check();
            }
            const auto stale = mem.layout().stale_all();
            const Plan & plan = mem.apply();
            if (auto e = check_plan(plan, u == 0, stale); !e.empty()) return e;
            for (auto & g : plan.groups) {
                const TokenPlan & t0 = plan.tokens[g.tokens[0]];
                const SeqSet & set = mem.call_batch().seqs[t0.index];
                std::vector<Token> toks;
                for (uint32_t ti : g.tokens) toks.push_back(plan.tokens[ti].token);
                for (size_t s = memory::seq_begin(set); s < set.size(); s = memory::seq_next(set, s)) {
                    after[s].absorbed.insert(after[s].absorbed.end(), toks.begin(), toks.end());
                    after[s].snaps = std::min<uint32_t>(cfg_.n_rs_seq, (uint32_t)toks.size());
                }
            }
            fake_forward(plan, mem);
            ++u;
        }
        if (fail_after >= 0 && u <= fail_after) {
            mem.undo();  // failing after the last ubatch still undoes the whole call
            return check();
        }
        mem.finish();
        for (auto & [seqs, n] : parts)
            for (SeqId s : seqs)
                if (naive_[s].empty()) ++created;
        naive_ = after;
        if (cfg_.window.active()) {
            if (auto e = follow_window(); !e.empty()) return e;
        }
        return check();
    }

    // A windowed cache may have let go of keys during a decode call or a sequence restore. Every key it let go of must be one the sequence
    // can never see again (outside the window of its next position, not its newest); the naive model then
    // forgets them too. The recurrent states keep every token.
    std::string follow_window() {
        const KvCache & kv = mem_->kv();
        for (SeqId s = 0; s < (SeqId)cfg_.n_seq_max; ++s) {
            NaiveSeq & n = naive_[s];
            const CellStream & cs = kv.stream(kv.stream_of(s));
            std::multiset<std::pair<Pos, Token>> have, want(n.entries.begin(), n.entries.end());
            for (auto & [p, c] : cs.seq_cells(s)) have.insert({p, cs.ext(c).tok});
            if (n.empty()) continue;
            const Pos next = n.max() + 1;
            for (auto & e : have) {
                auto it = want.find(e);
                if (it == want.end()) return "seq " + std::to_string(s) + ": a key the naive model never had";
                want.erase(it);
            }
            for (auto & e : want)
                if (e.first >= n.max() || !cfg_.window.masked(e.first, next))
                    return "seq " + std::to_string(s) + ": the window let go of position " + std::to_string(e.first) +
                           ", which position " + std::to_string(next) + " may still see";
            if (!want.empty()) {
                ++evicted;
                std::vector<std::pair<Pos, Token>> kept;
                for (auto & e : n.entries) {
                    auto it = want.find(e);
                    if (it != want.end()) want.erase(it); else kept.push_back(e);
                }
                n.entries = kept;
            }
        }
        return "";
    }
    uint64_t evicted = 0;

    std::string step() {
        std::string e = step_inner();
        if (std::getenv("OFFGRID_PROPERTY_TRACE")) std::printf("%s -> %s\n", trace.c_str(), e.c_str());
        return e;
    }
    std::string trace;

    std::string step_inner() {
        HybridMemory & mem = *mem_;
        const SeqId n_seq = (SeqId)cfg_.n_seq_max;
        const SeqId s = rnd(0, n_seq - 1);
        const int op = rnd(0, 99);
        if (op < 45) {
            std::vector<std::pair<std::vector<SeqId>, int>> parts;
            std::set<SeqId> used;
            const int n_parts = rnd(1, std::min(3, (int)n_seq));
            for (int k = 0; k < n_parts; ++k) {
                const SeqId q = rnd(0, n_seq - 1);
                if (used.count(q)) continue;
                used.insert(q);
                std::vector<SeqId> seqs{q};
                // Coupled tokens: only in one stream, with partners at the same place and with the same content.
                if (cfg_.unified && rnd(0, 4) == 0) {
                    for (SeqId o = 0; o < n_seq; ++o)
                        if (!used.count(o) && naive_[o].entries == naive_[q].entries &&
                            naive_[o].absorbed == naive_[q].absorbed && rnd(0, 1)) {
                            seqs.push_back(o);
                            used.insert(o);
                        }
                }
                parts.push_back({seqs, rnd(1, 7)});
            }
            return decode(parts, rnd(0, 9) == 0 ? rnd(0, 2) : -1);
        }
        if (op < 60) {  // rm: whole, rollback, or something refused
            NaiveSeq & n = naive_[s];
            const int kind = rnd(0, 3);
            Pos p0 = -1, p1 = -1;
            if (kind == 1 && !n.empty()) p0 = n.max() - rnd(0, 4) + 0;
            if (kind == 2 && !n.empty()) { p0 = n.min() + rnd(0, 3); p1 = p0 + rnd(1, 3); }
            if (kind == 3) p0 = n.max() + 1 + rnd(0, 2);
            auto [a, z] = normalize_range(p0, p1);
            // Prediction.
            bool ok;
            uint32_t k = 0;
            for (auto & e : n.entries) k += e.first >= a && e.first < z;
            bool shared = false;  // a cell in range that another sequence also holds
            {
                const KvCache & kv = mem.kv();
                const CellStream & cs = kv.stream(kv.stream_of(s));
                for (auto & [p, c] : cs.seq_cells(s)) shared = shared || (p >= a && p < z && cs.seqs(c).count() > 1);
            }
            const bool whole_range = a == 0 && z == kPosInf;
            if (n.empty() || k == 0) ok = true;
            else if (!cfg_.recurrent) ok = whole_range || !shared;
            else if (k == n.entries.size()) ok = !cfg_.window.active() || a == 0;  // see HybridRemoval... in window_test
            else if (z > n.max() && k <= n.snaps) ok = true;
            else ok = false;
            const bool got = mem.seq_rm(s, p0, p1);
            trace = "rm " + std::to_string(s) + " " + std::to_string(p0) + " " + std::to_string(p1) + " -> " + std::to_string(got);
            if (got != ok) return "seq_rm(" + std::to_string(s) + ", " + std::to_string(p0) + ", " + std::to_string(p1) +
                                  ") returned " + std::to_string(got);
            if (ok && k > 0 && !cfg_.recurrent) {
                std::vector<std::pair<Pos, Token>> kept;
                for (auto & e : n.entries)
                    if (e.first < a || e.first >= z) kept.push_back(e);
                n.entries = kept;
                if (n.empty()) n = NaiveSeq{};
            } else if (ok && k > 0) {
                if (k == n.entries.size()) n = NaiveSeq{};
                else {
                    n.entries.resize(n.entries.size() - k);
                    n.absorbed.resize(n.absorbed.size() - k);
                    n.snaps = 0;
                }
            }
            return check();
        }
        if (op < 68) {
            const SeqId d = rnd(0, n_seq - 1);
            mem.seq_cp(s, d);
            trace = "cp " + std::to_string(s) + " " + std::to_string(d);
            if (d != s) naive_[d] = naive_[s];
            return check();
        }
        if (op < 71) {
            mem.seq_keep(s);
            trace = "keep " + std::to_string(s);
            for (SeqId q = 0; q < n_seq; ++q)
                if (q != s) naive_[q] = NaiveSeq{};
            return check();
        }
        if (op < 78) {
            // Shifts: only on sequences whose cells no other sequence shares (a shared cell moves for all).
            bool alone = true;
            if (cfg_.unified)
                for (SeqId q = 0; q < n_seq; ++q) alone = alone && (q == s || naive_[q].empty());
            if (!alone || naive_[s].empty()) return "";
            NaiveSeq & n = naive_[s];
            if (rnd(0, 1)) {
                const Pos p0 = n.min() + rnd(0, 4), delta = rnd(1, 5);
                mem.seq_add(s, p0, -1, delta);
                trace = "add " + std::to_string(s) + " " + std::to_string(p0) + " " + std::to_string(delta);
                for (auto & e : n.entries)
                    if (e.first >= p0) {
                        e.first += delta;
                        n.snaps = 0;
                    }
            } else {
                const int d = rnd(2, 3);
                mem.seq_div(s, 0, -1, d);
                trace = "div " + std::to_string(s) + " " + std::to_string(d);
                for (auto & e : n.entries) e.first /= d;
                n.snaps = 0;
            }
            mem.apply_pending_shifts([](uint32_t, Pos, Pos) {});
            return check();
        }
        if (op < 80) {
            mem.clear();
            trace = "clear";
            for (auto & n : naive_) n = NaiveSeq{};
            return check();
        }
        // Save and restore: one sequence into the same or another id, or the whole context; sometimes cut short.
        const bool whole = rnd(0, 3) == 0;
        const SeqId src = whole ? -1 : s;
        const SeqId dst = whole ? -1 : rnd(0, n_seq - 1);
        std::vector<uint8_t> blob = state_save(mem, src);
        Naive saved = naive_;
        if (rnd(0, 4) == 0 && !whole) {  // change things in between
            mem.seq_rm(dst, -1, -1);
            naive_[dst] = NaiveSeq{};
        }
        const bool cut = rnd(0, 3) == 0;
        trace = "state " + std::to_string(src) + " -> " + std::to_string(dst) + (cut ? " cut" : "");
        if (cut) blob.resize(rnd(0, (int)blob.size() - 1));
        try {
            state_load(mem, blob, dst);
            if (cut) return "a cut state was accepted";
            if (whole) naive_ = saved;
            else naive_[dst] = saved[src];
        } catch (const Error & e) {
            // Only "no room" may refuse an intact state (the destination's stream can be full).
            if (!cut && std::string(e.what()).find("no room") == std::string::npos)
                return std::string("a state was refused: ") + e.what();
            // A cut state fails its framing or checksums: refused, nothing changed. Finding no room drops the
            // destination from all three caches.
            if (!cut) {
                if (whole) for (auto & n : naive_) n = NaiveSeq{};
                else naive_[dst] = NaiveSeq{};
            }
        }
        if (!cut && !whole && state_save(mem, dst) != state_save(mem, dst)) return "unstable save";
        if (cfg_.window.active()) {  // a sequence restore may take other sequences' out-of-window cells
            if (auto e = follow_window(); !e.empty()) return e;
        }
        return check();
    }

    uint64_t created = 0;

private:
    Config cfg_;
    std::mt19937_64 rng_;
    Naive naive_;
    std::unique_ptr<HybridMemory> mem_;
};

// Runs episodes until `target` sequences were created; `windowed` gives every episode a sliding window (and no
// pools, which a window refuses).
void run_episodes(uint64_t target, bool windowed) {
    uint64_t created = 0, steps = 0, episodes = 0, evicted = 0;
    const uint32_t kpools[] = {1, 2, 4, 8};
    const WindowType types[] = {WindowType::Standard, WindowType::Chunked, WindowType::Symmetric};
    while (created < target) {
        const uint64_t seed = (windowed ? 500000 : 1000) + episodes;
        std::mt19937_64 pick(seed);
        Config c;
        c.recurrent = pick() % 4 != 0;
        c.unified = pick() % 2 == 0;
        c.kpool = kpools[pick() % 4];
        c.by_order = pick() % 2 == 0;
        c.n_rs_seq = pick() % 2 == 0 ? 0 : 3;
        c.n_seq_max = 1 + pick() % 6;
        c.n_ctx = c.n_seq_max * (16 + 16 * (pick() % 3));
        c.n_ubatch = 4 + pick() % 6;
        if (windowed) {
            c.kpool = 0;
            c.window = Window{types[pick() % 3], (uint32_t)(1 + pick() % 8)};
        }
        const int n_steps = pick() % 8 == 0 ? 300 : 60;  // some long episodes fill the cache
        Runner run(c, seed);
        for (int i = 0; i < n_steps; ++i) {
            const std::string e = run.step();
            ++steps;
            ASSERT_EQ(e, "") << "episode seed " << seed << " step " << i << " (unified " << c.unified << ", kpool "
                             << c.kpool << ", by_order " << c.by_order << ", n_rs_seq " << c.n_rs_seq << ", n_seq_max "
                             << c.n_seq_max << ", window " << c.window.describe() << ")";
        }
        created += run.created;
        evicted += run.evicted;
        ++episodes;
    }
    std::printf("property%s: %llu sequences, %llu steps, %llu episodes, %llu decodes that let keys go\n",
                windowed ? " (windowed)" : "", (unsigned long long)created, (unsigned long long)steps,
                (unsigned long long)episodes, (unsigned long long)evicted);
    if (windowed) {
        EXPECT_GT(evicted, 0u);  // the windowed run must exercise reuse
    }
}

TEST(Property, RandomOperationsAgreeWithNaiveModel) {
    uint64_t target = 10000;
    if (const char * env = std::getenv("OFFGRID_PROPERTY_SEQS")) target = std::strtoull(env, nullptr, 10);
    run_episodes(target, false);
}

TEST(Property, WindowedCachesAgreeWithNaiveModel) {
    uint64_t target = 4000;
    if (const char * env = std::getenv("OFFGRID_PROPERTY_SEQS")) target = std::strtoull(env, nullptr, 10);
    run_episodes(target, true);
}

}  // namespace
}  // namespace offgrid::memory
