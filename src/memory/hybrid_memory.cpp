#include "memory/hybrid_memory.h"

#include <algorithm>

#include "common/error.h"

namespace offgrid::memory {

uint32_t cells_per_stream(uint32_t n_ctx, uint32_t n_seq_max, bool unified) {
    auto pad256 = [](uint64_t n) { return (uint32_t)((n + 255) / 256 * 256); };
    if (n_seq_max == 0) throw Error("n_seq_max: must be at least 1");
    const uint32_t total = pad256(std::max<uint32_t>(n_ctx, 1));
    if (unified) return total;
    return pad256(std::max<uint32_t>(total / n_seq_max, 1));
}

uint32_t window_cells_per_stream(uint32_t cells, const Window & window, uint32_t n_seq_max, bool unified,
                                 uint32_t n_ubatch) {
    window.check();
    if (!window.active()) return cells;
    const uint64_t want = (uint64_t)window.n_swa * (unified ? n_seq_max : 1) + n_ubatch;
    const uint64_t n = std::min<uint64_t>(cells, want);
    return (uint32_t)std::min<uint64_t>((n + 255) / 256 * 256, std::max<uint64_t>(cells, 1));
}

namespace {

uint32_t stream_cells(const MemoryParams & p) {
    if (p.n_seq_max == 0 || p.n_seq_max > (uint32_t)kMaxSeq) throw Error("n_seq_max: must be in [1, 256]");
    if (p.unified) return p.n_ctx;
    if (p.n_ctx / p.n_seq_max == 0) throw Error("n_ctx: fewer cells than sequences");
    return p.n_ctx / p.n_seq_max;
}

const MemoryParams & checked(const MemoryParams & p) {
    if (p.n_ubatch == 0) throw Error("n_ubatch: must be at least 1");
    if (p.n_rs_seq > 0 && p.n_ubatch < p.n_rs_seq + 1)
        throw Error("n_ubatch: must be at least n_rs_seq + 1 = " + std::to_string(p.n_rs_seq + 1) +
                    " to keep a sequence's last tokens in one ubatch");
    for (const LayerCache & l : p.shape.layers) {
        for (uint32_t w : {l.k_width, l.v_width, l.idx_width, l.idx_parts, l.conv_floats, l.state_floats}) {
            if (w >= kMaxCacheWidth)
                throw Error("cache shape: a layer declares a width of " + std::to_string(w) + ", over the limit of " +
                            std::to_string(kMaxCacheWidth));
        }
    }
    if (p.kpool > 0 && !p.shape.has_indexer()) throw Error("kpool: pools need an indexer (a layer with idx_width > 0)");
    if (!p.held.empty() && p.held.size() != p.shape.layers.size())
        throw Error("held layers: " + std::to_string(p.held.size()) + " flags for " + std::to_string(p.shape.layers.size()) + " layers");
    if (p.kpool > 4096) throw Error("kpool: " + std::to_string(p.kpool) + " is too large");
    p.window.check();
    if (p.window.active() && p.kpool > 0)
        throw Error("window: a " + p.window.describe() + " sliding window cannot be combined with k-pools (kpool " +
                    std::to_string(p.kpool) + "): pools group a sequence's cells in order, and each cell the window "
                    "lets go would regroup every later pool");
    return p;
}

}  // namespace

class HybridMemory::PlanImpl final : public Plan {
public:
    explicit PlanImpl(const HybridMemory * mem) : mem_(mem) {}
    SeqView seq_view(SeqId seq) const override {
        if (seq < 0 || seq >= kMaxSeq) return {};
        const SeqLayout & sq = mem_->layout_.seq(seq);
        return SeqView{std::span<const PosCell>(sq.cells), std::span<const uint32_t>(sq.pools),
                       std::span<const uint32_t>(sq.reps)};
    }
    Token cell_token(uint32_t cell) const override {
        if (cell >= mem_->kv_.n_cells()) return -1;
        return mem_->kv_.stream(cell / mem_->kv_.kv_size()).ext(cell % mem_->kv_.kv_size()).tok;
    }
    // Makes `groups` n long with every group's lists empty. Groups dropped from the end are kept aside with their
    // lists' capacity and come back first, so a plan of as many groups as an earlier one allocates nothing.
    void set_groups(size_t n) {
        while (groups.size() > n) {
            spare_groups_.push_back(std::move(groups.back()));
            groups.pop_back();
        }
        while (groups.size() < n) {
            if (spare_groups_.empty()) {
                groups.emplace_back();
            } else {
                groups.push_back(std::move(spare_groups_.back()));
                spare_groups_.pop_back();
            }
        }
        for (SeqGroup & g : groups) {
            g.tokens.clear();
            g.snapshots.clear();
        }
    }
    void reserve(size_t n_ubatch, uint32_t kpool) {
        tokens.reserve(n_ubatch);
        groups.reserve(n_ubatch);
        spare_groups_.reserve(n_ubatch);
        new_pools.reserve(n_ubatch);
        arena.reserve(2 * n_ubatch * kpool);
    }
    std::vector<uint32_t> arena;  // tails and pool members; spans are set once it is complete

private:
    const HybridMemory * mem_;
    std::vector<SeqGroup> spare_groups_;
};

// The state of one decode call between begin() and finish() / undo(). One Call lives as long as the memory: its
// buffers keep their capacity from call to call (clear() and resize() keep it), so a decode step like the one
// before takes nothing from the heap. Everything in it is valid from begin() to the next begin(); `plan` is the
// plan of the ubatch apply() returned last and stays readable after finish() until the next begin().
struct HybridMemory::Call {
    explicit Call(const HybridMemory * mem) : plan(mem) {}
    ValidBatch batch;
    Split split;
    SplitScratch split_scratch;
    std::vector<uint32_t> cells;  // every token's cell, in the split's order (Ubatch::first)
    size_t next = 0;
    std::vector<uint32_t> heads_before;
    std::array<Pos, kMaxSeq> stale_before;
    SeqSet seqs;
    PlanImpl plan;
    // apply()'s working buffers.
    struct FreshCell {
        SeqId s;
        PosCell pc;
    };
    struct PendingPool {
        SeqId s;
        uint32_t start;
    };
    std::vector<FreshCell> fresh;                     // the ubatch's new (sequence, cell) entries
    std::vector<PosCell> run;                         // one sequence's new entries
    std::vector<std::pair<SeqId, Pos>> regrouped;     // sequences rebuilt in this ubatch, re-pooled from there
    std::vector<PendingPool> pending;                 // pools to (re)pool
    std::vector<size_t> members_at;                   // each pending pool's members in the plan's arena
    std::vector<std::pair<size_t, size_t>> tail_at;   // each token's tail in the plan's arena
};

HybridMemory::HybridMemory(const MemoryParams & params)
    : params_(checked(params)),
      has_recurrent_(params.shape.n_recr_layers() > 0 || params.shape.row_floats > 0),
      kv_(params.shape, stream_cells(params), params.unified ? 1 : params.n_seq_max, params.window, params.held),
      rec_(params.shape, params.n_seq_max, params.n_rs_seq, params.held, params.row_state_held),
      layout_(params.kpool, params.by_order),
      call_storage_(std::make_unique<Call>(this)),
      memory_range_([this](SeqId s) { return SeqRange{seq_pos_min(s), seq_pos_max(s)}; }),
      rep_mark_(kv_.n_cells(), 0) {
    if (has_pools()) pool_keys_.assign(params_.shape.n_attn_layers(), std::vector<PoolKeys>(params_.n_seq_max));
    // A call's buffers, sized for one full ubatch: a steady decode step then needs nothing more.
    Call & c = *call_storage_;
    const size_t n_ub = params_.n_ubatch;
    c.split.reserve(n_ub);
    c.cells.reserve(n_ub);
    c.heads_before.reserve(kv_.n_stream());
    c.plan.reserve(n_ub, params_.kpool);
    c.fresh.reserve(n_ub);
    c.run.reserve(n_ub);
    c.pending.reserve(n_ub);
    c.members_at.reserve(n_ub);
    c.tail_at.reserve(n_ub);
    kv_.reserve_journal(n_ub);
    layout_.set_capacity(kv_.kv_size());  // a sequence never holds more cells than its stream
}

HybridMemory::~HybridMemory() = default;

void HybridMemory::check_seq(SeqId s, const char * op, bool allow_all) const {
    if (allow_all && s == -1) return;
    if (s < 0 || (uint32_t)s >= params_.n_seq_max)
        throw Error(std::string(op) + ": sequence id " + std::to_string(s) + " is outside [0, " +
                    std::to_string(params_.n_seq_max) + ")");
}

void HybridMemory::check_idle(const char * op) const {
    if (call_) throw Error(std::string(op) + ": not allowed while a decode call is in progress");
}

const ValidBatch & HybridMemory::call_batch() const {
    if (!call_) throw Error("call_batch: no decode call in progress");
    return call_->batch;
}

BeginResult HybridMemory::begin(const Batch & batch) {
    check_idle("begin");
    // K rows of shifted cells are still roped at their old positions until the model re-rotates them.
    if (kv_.has_shift()) throw Error("begin: position shifts are pending; call apply_pending_shifts first");
    BeginResult res;
    Call * call = call_storage_.get();
    call->next = 0;
    call->seqs.reset();
    try {
        BatchLimits limits{params_.n_vocab, params_.n_seq_max, params_.multi_pos};
        validate_batch(batch, limits, memory_range_, call->batch);
    } catch (const Error & e) {
        res.status = DecodeStatus::InvalidBatch;
        res.message = e.what();
        return res;
    }
    if (std::string conflict = coupling_conflict(call->batch); !conflict.empty()) {
        res.status = DecodeStatus::InvalidBatch;
        res.message = conflict;
        return res;
    }
    std::string why;
    kv_.journal_clear();
    const uint32_t keep_tail = has_recurrent_ && params_.n_rs_seq > 0 ? params_.n_rs_seq + 1 : 0;
    if (!split_equal(call->batch, params_.n_ubatch, kv_.n_stream() > 1, keep_tail, call->split, why,
                     call->split_scratch) ||
        !kv_.find_slots(call->batch, call->split, call->cells, why)) {
        res.status = DecodeStatus::NoSpace;
        res.message = "decode: " + why;
        return res;
    }
    kv_.heads(call->heads_before);
    call->stale_before = layout_.stale_all();
    for (auto & set : call->batch.seqs) call->seqs |= set;
    rec_.journal_begin();
    res.n_ubatches = call->split.size();
    call_ = call;
    return res;
}

bool HybridMemory::has_next() const { return call_ && call_->next < call_->split.size(); }

const Plan & HybridMemory::apply() {
    if (!has_next()) throw Error("apply: no ubatch left in this decode call");
    Call & c = *call_;
    const size_t u = c.next++;
    const Ubatch ub = c.split[u];
    const ValidBatch & b = c.batch;
    const std::span<const uint32_t> cells(c.cells.data() + ub.first, ub.size());

    // Sequences that lost out-of-window cells to this ubatch get their layouts rebuilt (new cells included).
    const SeqSet lost = kv_.place(b, ub, cells);
    c.seqs |= lost;
    if (lost.any()) relayout(lost);

    // Extend each sequence's layout with its new cells (only these are scanned): the entries sorted by sequence,
    // then (position, cell).
    std::vector<Call::FreshCell> & fresh = c.fresh;
    fresh.clear();
    for (size_t j = 0; j < ub.size(); ++j) {
        const SeqSet & set = b.seqs[ub.idx[j]];
        for (size_t s = seq_begin(set); s < set.size(); s = seq_next(set, s))
            fresh.push_back({(SeqId)s, PosCell{b.pos[ub.idx[j]], cells[j]}});
    }
    std::sort(fresh.begin(), fresh.end(), [](const Call::FreshCell & x, const Call::FreshCell & y) {
        if (x.s != y.s) return x.s < y.s;
        return x.pc.pos != y.pc.pos ? x.pc.pos < y.pc.pos : x.pc.cell < y.pc.cell;
    });
    // New entries sort after the old ones (batch rule V5 / V4). Should they not, the sequence is rebuilt and its
    // pools from the first new position on are pooled again in this very ubatch.
    std::vector<std::pair<SeqId, Pos>> & regrouped = c.regrouped;
    regrouped.clear();
    for (size_t at = 0; at < fresh.size();) {
        const SeqId s = fresh[at].s;
        size_t end = at;
        while (end < fresh.size() && fresh[end].s == s) ++end;
        std::vector<PosCell> & run = c.run;
        run.clear();
        for (size_t k = at; k < end; ++k) run.push_back(fresh[k].pc);
        at = end;
        if (lost.test(s)) continue;
        if (!layout_.append(s, run)) {
            relayout(SeqSet().set(s));
            regrouped.push_back({s, stale_pos(s, run.front().pos)});
        }
    }

    PlanImpl * plan = &c.plan;
    plan->tokens.clear();
    plan->new_pools.clear();
    plan->arena.clear();
    plan->kpool = params_.kpool;
    const uint32_t kpool = params_.kpool;

    // Pools to (re)pool: stale ones (first ubatch of the call only), then those holding a token of this ubatch.
    // A rep cell is pooled once, even when several sequences share the pool.
    if (++generation_ == 0) {
        std::fill(rep_mark_.begin(), rep_mark_.end(), 0);
        generation_ = 1;
    }
    std::vector<Call::PendingPool> & pending = c.pending;
    pending.clear();
    auto mark = [&](SeqId s, size_t k) {
        const SeqLayout & sq = layout_.seq(s);
        const uint32_t start = sq.pools[k];
        const uint32_t rep = sq.cells[start + kpool - 1].cell;
        if (rep_mark_[rep] == generation_) return;
        rep_mark_[rep] = generation_;
        forget_repooled_keys(rep);
        pending.push_back({s, start});
    };
    auto mark_from = [&](SeqId s, Pos from) {  // every pool of s whose last member is at or after `from`
        const SeqLayout & sq = layout_.seq(s);
        auto first = std::lower_bound(sq.pools.begin(), sq.pools.end(), from,
                                      [&](uint32_t j, Pos p) { return sq.cells[j + kpool - 1].pos < p; });
        for (auto it = first; it != sq.pools.end(); ++it) mark(s, (size_t)(it - sq.pools.begin()));
    };
    if (kpool > 0) {
        if (u == 0) {
            for (SeqId s = 0; s < kMaxSeq; ++s)
                if (layout_.stale(s) != kPosInf) mark_from(s, layout_.stale(s));
            layout_.clear_stale();
        }
        for (auto & [s, from] : regrouped) mark_from(s, from);
        for (size_t j = 0; j < ub.size(); ++j) {
            const SeqSet & set = b.seqs[ub.idx[j]];
            for (size_t s = seq_begin(set); s < set.size(); s = seq_next(set, s)) {
                const size_t r = layout_.rank((SeqId)s, b.pos[ub.idx[j]], cells[j]);
                const int64_t k = layout_.pool_of((SeqId)s, r);
                if (k >= 0) mark((SeqId)s, (size_t)k);
            }
        }
    }

    // Tokens: cell, visibility, selectable pools and tail. Spans into the arena are fixed up at the end.
    std::vector<std::pair<size_t, size_t>> & tail_at = c.tail_at;
    tail_at.resize(ub.size());
    plan->tokens.resize(ub.size());
    for (size_t j = 0; j < ub.size(); ++j) {
        const uint32_t i = ub.idx[j];
        TokenPlan & t = plan->tokens[j];
        t.token = b.tokens[i];
        t.pos = b.pos[i];
        t.seq = b.first[i];
        t.cell = cells[j];
        t.output = b.output[i] != 0;
        t.index = i;
        const SeqLayout & sq = layout_.seq(t.seq);
        auto vis = std::upper_bound(sq.cells.begin(), sq.cells.end(), t.pos,
                                    [](Pos p, const PosCell & pc) { return p < pc.pos; });
        t.n_visible = (uint32_t)(vis - sq.cells.begin());
        t.first_visible = 0;
        if (kv_.window().active()) {
            auto lo = std::lower_bound(sq.cells.begin(), vis, kv_.window().lowest_visible(t.pos),
                                       [](const PosCell & pc, Pos p) { return pc.pos < p; });
            t.first_visible = (uint32_t)(lo - sq.cells.begin());
        }
        const size_t r = layout_.rank(t.seq, t.pos, t.cell);
        t.n_pools = layout_.visible_pools(t.seq, t.pos, r);
        const size_t at = plan->arena.size();
        layout_.tail(t.seq, t.pos, r, plan->arena);
        tail_at[j] = {at, plan->arena.size() - at};
    }
    std::vector<size_t> & members_at = c.members_at;
    members_at.clear();
    for (auto & pp : pending) {
        const SeqLayout & sq = layout_.seq(pp.s);
        members_at.push_back(plan->arena.size());
        for (uint32_t k = 0; k < kpool; ++k) plan->arena.push_back(sq.cells[pp.start + k].cell);
    }
    for (size_t j = 0; j < ub.size(); ++j)
        plan->tokens[j].tail = std::span<const uint32_t>(plan->arena.data() + tail_at[j].first, tail_at[j].second);
    for (size_t q = 0; q < pending.size(); ++q) {
        const SeqLayout & sq = layout_.seq(pending[q].s);
        const PosCell & first = sq.cells[pending[q].start];
        NewPool np;
        np.members = std::span<const uint32_t>(plan->arena.data() + members_at[q], kpool);
        np.rep = sq.cells[pending[q].start + kpool - 1].cell;
        np.pos = first.pos;
        plan->new_pools.push_back(np);
    }

    // Recurrent groups: one per sequence set, led by the set's first token's first sequence.
    plan->set_groups(ub.sets.size());
    for (size_t k = 0; k < ub.sets.size(); ++k) {
        SeqGroup & g = plan->groups[k];
        const uint32_t n = ub.n_seq_tokens;
        g.seq = b.first[ub.idx[k * n]];
        for (uint32_t t = 0; t < n; ++t) g.tokens.push_back((uint32_t)(k * n + t));
        rec_.prepare_group(g.seq, ub.sets[k]);
        g.row = rec_.row(0, (uint32_t)g.seq);
        const uint32_t snaps = std::min(params_.n_rs_seq, n);
        for (uint32_t p = 1; p <= snaps; ++p) g.snapshots.push_back(rec_.row(p, (uint32_t)g.seq));
        rec_.finish_group(g.seq, ub.sets[k], b.pos[ub.idx[k * n + n - 1]], n);
    }
    return *plan;
}

void HybridMemory::finish() {
    if (!call_) return;
    if (has_next())
        throw Error("finish: " + std::to_string(call_->split.size() - call_->next) +
                    " ubatches were not applied; a call that stops early must be undone");
    rec_.journal_commit();
    kv_.journal_clear();
    call_ = nullptr;  // the last plan stays readable until the next begin()
    debug_check();
}

void HybridMemory::undo() {
    if (!call_) return;
    kv_.rollback(0, call_->heads_before);
    rec_.journal_undo();
    const SeqSet seqs = call_->seqs;
    const auto stale = call_->stale_before;
    call_ = nullptr;
    relayout(seqs);
    layout_.set_stale_all(stale);
    debug_check();
}

void HybridMemory::relayout(const SeqSet & seqs) {
    for (SeqId s = 0; s < kMaxSeq; ++s) {
        if (!seqs.test(s)) continue;
        forget_pool_keys(s, 0);  // the pools, or the rows behind them, may have changed
        if ((uint32_t)s >= params_.n_seq_max && kv_.n_stream() > 1) {
            layout_.clear_seq(s);
            continue;
        }
        const uint32_t st = kv_.stream_of(s);
        layout_.rebuild(s, kv_.stream(st).seq_cells(s), kv_.global(st, 0));
    }
}

// A token shared by several sequences gets one cell, and so one pooled-key row. When it completes a pool in two of
// them, the two pools must have the same members, else one row would need two pooled keys. Sequences holding the
// same cells always agree; otherwise (by-order pools) the check compares the members each pool would get.
std::string HybridMemory::coupling_conflict(const ValidBatch & b) const {
    const uint32_t kpool = params_.kpool;
    std::array<uint32_t, kMaxSeq> seen{};  // tokens of each sequence before the current one
    for (size_t i = 0; i < b.size(); ++i) {
        const SeqSet & set = b.seqs[i];
        const SeqId s0 = b.first[i];
        const uint32_t j = seen[s0];
        for (size_t s = seq_begin(set); s < set.size(); s = seq_next(set, s)) ++seen[s];
        if (kpool <= 1 || set.count() < 2) continue;
        const auto & c0 = layout_.seq(s0).cells;
        for (size_t s = seq_begin(set); s < set.size(); s = seq_next(set, s)) {
            const auto & c1 = layout_.seq((SeqId)s).cells;
            if ((SeqId)s == s0 || c0 == c1) continue;
            bool clash = !params_.by_order;
            const size_t n0 = c0.size(), n1 = c1.size();
            if (!clash && (n0 + j + 1) % kpool == 0 && (n1 + j + 1) % kpool == 0)
                for (size_t m = 1; m + j < kpool; ++m) clash = clash || c0[n0 - m].cell != c1[n1 - m].cell;
            if (clash)
                return "batch: token " + std::to_string(i) + ": V7 coupled sequences " + std::to_string(s0) + " and " +
                       std::to_string(s) + " hold different cells, so this token would complete different pools in one row";
        }
    }
    return "";
}

// True when a cell of s in [p0, p1) is shared with a sequence whose cells differ from s's (any_sharer: with any
// other sequence): moving or dropping it would regroup the sequences' pools differently behind the same rep cells.
bool HybridMemory::shares_cells_unevenly(SeqId s, Pos p0, Pos p1, bool any_sharer) const {
    std::tie(p0, p1) = normalize_range(p0, p1);
    const CellStream & cs = kv_.stream(kv_.stream_of(s));
    const SeqCells & sc = cs.seq_cells(s);
    SeqSet others;
    for (auto it = sc.lower_bound({p0, 0}); it != sc.end() && it->first < p1; ++it) others |= cs.seqs(it->second);
    others.reset(s);
    if (any_sharer) return others.any();
    for (size_t q = seq_begin(others); q < others.size(); q = seq_next(others, q))
        if (layout_.seq((SeqId)q).cells != layout_.seq(s).cells) return true;
    return false;
}

Pos HybridMemory::stale_pos(SeqId s, Pos p0) const {
    // An edit at or below the first position moves the pool alignment: the whole sequence regroups.
    if (s < 0 || p0 <= kv_.seq_pos_min(s)) return 0;
    return p0;
}

void HybridMemory::sync_after_edit(const SeqSet & changed, const std::function<Pos(SeqId)> & stale, bool forget_snapshots) {
    for (SeqId q = 0; q < kMaxSeq; ++q) {
        if (!changed.test(q)) continue;
        layout_.mark_stale(q, stale(q));
        if ((uint32_t)q >= params_.n_seq_max) continue;
        if (kv_.seq_pos_max(q) < 0) {
            rec_.drop(q);
        } else {
            rec_.set_pos(q, kv_.seq_pos_max(q));
            if (forget_snapshots) rec_.forget_snapshots(q);
        }
    }
    relayout(changed);
}

void HybridMemory::debug_check() const {
#ifndef NDEBUG
    check_invariants();
#endif
}

void HybridMemory::remove_whole(SeqId s) {
    const SeqSet changed = kv_.seq_rm(s, -1, -1);
    sync_after_edit(changed | SeqSet().set(s), [s](SeqId q) { return q == s ? 0 : kPosInf; }, false);
}

bool HybridMemory::seq_rm(SeqId s, Pos p0, Pos p1) {
    check_idle("seq_rm");
    check_seq(s, "seq_rm", true);
    std::tie(p0, p1) = normalize_range(p0, p1);
    if (p0 >= p1) return true;
    if (!has_recurrent_) {
        // A partial removal from cells other sequences share (with other cells of their own) is refused.
        const bool whole = p0 <= 0 && p1 == kPosInf;
        // Removing shared cells for s alone would regroup s's pools over rep cells the sharers keep.
        if (!whole && s >= 0 && shares_cells_unevenly(s, p0, p1, true)) return false;
        if (!whole && s < 0)
            for (SeqId q = 0; q < (SeqId)params_.n_seq_max; ++q)
                if (shares_cells_unevenly(q, p0, p1)) return false;
        const Pos stale = stale_pos(s, p0);
        const SeqSet changed = kv_.seq_rm(s, p0, p1);
        if (s < 0) layout_.mark_all_stale(0);
        sync_after_edit(changed, [&](SeqId q) { return q == s ? stale : kPosInf; }, false);
        debug_check();
        return true;
    }
    // What removing [p0, p1) means for one sequence: nothing, all of it, a rollback of k tokens, or refused.
    struct Kind {
        enum { Nothing, Whole, Rollback, Refused } what;
        uint32_t k = 0;
    };
    auto classify = [&](SeqId q) -> Kind {
        const SeqCells & sc = kv_.stream(kv_.stream_of(q)).seq_cells(q);
        if (sc.empty()) return {rec_.present(q) ? Kind::Whole : Kind::Nothing};
        uint32_t k = 0;
        for (auto it = sc.lower_bound({p0, 0}); it != sc.end() && it->first < p1; ++it) ++k;
        if (k == 0) return {Kind::Nothing};
        // With a window, older positions may have left the attention cache while the recurrent state still holds
        // them: only a range from 0 removes the whole sequence, and a range from later that covers every cell
        // left cannot say what the state should become.
        if (k == sc.size()) return {!kv_.window().active() || p0 <= 0 ? Kind::Whole : Kind::Refused};
        if (p1 > sc.rbegin()->first && k <= rec_.seq(q).snaps) return {Kind::Rollback, k};  // the last k tokens
        return {Kind::Refused};
    };
    std::vector<std::pair<SeqId, Kind>> todo;
    for (SeqId q = 0; q < (SeqId)params_.n_seq_max; ++q) {
        if (s >= 0 && q != s) continue;
        const Kind kind = classify(q);
        if (kind.what == Kind::Refused) return false;  // nothing changed yet
        if (kind.what != Kind::Nothing) todo.push_back({q, kind});
    }
    for (auto & [q, kind] : todo) {
        if (kind.what == Kind::Whole) {
            remove_whole(q);
            continue;
        }
        const Pos stale = stale_pos(q, p0);
        const SeqSet changed = kv_.seq_rm(q, p0, kPosInf);
        rec_.rollback(q, kind.k, kv_.seq_pos_max(q));
        layout_.mark_stale(q, stale);
        relayout(changed);
    }
    debug_check();
    return true;
}

void HybridMemory::seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) {
    check_idle("seq_cp");
    check_seq(src, "seq_cp");
    check_seq(dst, "seq_cp");
    if (!(p0 <= 0 && p1 < 0))
        throw Error("seq_cp: only whole-sequence copies are supported (p0 <= 0 and p1 < 0), got [" +
                    std::to_string(p0) + ", " + std::to_string(p1) + ")");
    if (src == dst) return;
    remove_whole(dst);
    const SeqSet changed = kv_.seq_cp(src, dst, -1, -1);
    rec_.copy(src, dst);
    // The destination gets the source's pools and rep rows; it regroups and pools them once more.
    layout_.mark_stale(dst, 0);
    relayout(changed | SeqSet().set(dst));
    debug_check();
}

void HybridMemory::seq_keep(SeqId s) {
    check_idle("seq_keep");
    check_seq(s, "seq_keep");
    SeqSet changed;
    if (kv_.n_stream() == 1) changed |= kv_.seq_keep(s);
    for (SeqId q = 0; q < (SeqId)params_.n_seq_max; ++q) {
        if (q == s) continue;
        if (kv_.n_stream() > 1) changed |= kv_.seq_rm(q, -1, -1);
        changed.set(q);
    }
    layout_.mark_all_stale(0);
    sync_after_edit(changed, [](SeqId) { return kPosInf; }, false);
    debug_check();
}

void HybridMemory::seq_add(SeqId s, Pos p0, Pos p1, Pos delta) {
    check_idle("seq_add");
    check_seq(s, "seq_add");
    if (delta == 0) return;
    if ((int64_t)kv_.seq_pos_max(s) + delta >= (int64_t)kPosInf - 1)
        throw Error("seq_add: shifting sequence " + std::to_string(s) + " by " + std::to_string(delta) +
                    " overflows the position range");
    if (shares_cells_unevenly(s, p0, p1))
        throw Error("seq_add: sequence " + std::to_string(s) +
                    " shares cells with a sequence holding other cells; shifting them would split their pools");
    const Pos stale = stale_pos(s, delta < 0 ? normalize_range(p0, p1).first + delta : normalize_range(p0, p1).first);
    const SeqSet changed = kv_.seq_add(s, p0, p1, delta);
    // Other sequences sharing a moved cell moved too: they regroup from the start. A rollback by position is
    // ambiguous once positions moved: snapshots are forgotten.
    sync_after_edit(changed, [&](SeqId q) { return q == s ? stale : 0; }, true);
    debug_check();
}

void HybridMemory::seq_div(SeqId s, Pos p0, Pos p1, int d) {
    check_idle("seq_div");
    check_seq(s, "seq_div");
    if (d < 1) throw Error("seq_div: divisor " + std::to_string(d) + " must be at least 1");
    if (shares_cells_unevenly(s, p0, p1))
        throw Error("seq_div: sequence " + std::to_string(s) +
                    " shares cells with a sequence holding other cells; dividing them would split their pools");
    const SeqSet changed = kv_.seq_div(s, p0, p1, d);
    sync_after_edit(changed, [](SeqId) { return 0; }, true);
    debug_check();
}

Pos HybridMemory::seq_pos_max(SeqId s) const {
    if (s < 0 || (uint32_t)s >= params_.n_seq_max) return -1;
    return kv_.seq_pos_max(s);
}

Pos HybridMemory::seq_pos_min(SeqId s) const {
    if (s < 0 || (uint32_t)s >= params_.n_seq_max) return -1;
    return has_recurrent_ ? kv_.seq_pos_max(s) : kv_.seq_pos_min(s);
}

Pos HybridMemory::seq_first_pos(SeqId s) const {
    if (s < 0 || (uint32_t)s >= params_.n_seq_max) return -1;
    return kv_.seq_pos_min(s);
}

void HybridMemory::drop(SeqId s) {
    if (s < 0) {
        clear();
        return;
    }
    remove_whole(s);
}

void HybridMemory::clear() {
    check_idle("clear");
    kv_.clear(true);
    rec_.clear();
    for (SeqId s = 0; s < kMaxSeq; ++s) {
        layout_.clear_seq(s);
        forget_pool_keys(s, 0);
    }
    layout_.mark_all_stale(0);
    debug_check();
}

void HybridMemory::apply_pending_shifts(const RotateFn & rotate) {
    check_idle("apply_pending_shifts");
    kv_.apply_shifts(rotate);
}

std::vector<BreakdownEntry> HybridMemory::breakdown() const {
    std::vector<BreakdownEntry> out;
    out.push_back({"attention", "k", params_.shape.type_k, kv_.k_bytes()});
    out.push_back({"attention", "v", params_.shape.type_v, kv_.v_bytes()});
    out.push_back({"indexer", "rows", params_.shape.type_idx, kv_.idx_bytes()});
    out.push_back({"recurrent", "conv", tensor::ElemType::F32, rec_.conv_bytes()});
    out.push_back({"recurrent", "ssm", tensor::ElemType::F32, rec_.ssm_bytes()});
    out.push_back({"recurrent", "row", tensor::ElemType::F32, rec_.row_state_bytes()});
    out.push_back({"recurrent", "undo bank", tensor::ElemType::F32, rec_.undo_bank_bytes()});
    return out;
}

void HybridMemory::hold_layers(const std::vector<bool> & held, bool row_state_held) {
    check_idle("hold_layers");
    const std::vector<LayerCache> & layers = params_.shape.layers;
    if (!held.empty() && held.size() != layers.size())
        throw Error("held layers: " + std::to_string(held.size()) + " flags for " + std::to_string(layers.size()) + " layers");
    uint32_t a = 0, r = 0;
    for (size_t i = 0; i < layers.size(); ++i) {
        const bool h = held.empty() || held[i];
        if (layers[i].attention()) {
            if (kv_.held(a) != h) kv_.hold(a, h);
            ++a;
        }
        if (layers[i].recurrent()) {
            if (rec_.held(r) != h) rec_.hold(r, h);
            ++r;
        }
    }
    if (params_.row_state_held != row_state_held && params_.shape.row_floats > 0) rec_.hold(r, row_state_held);
    params_.held = held;
    params_.row_state_held = row_state_held;
}

}  // namespace offgrid::memory
