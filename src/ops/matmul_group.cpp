#include "ops/matmul_group.h"

#include <algorithm>
#include <span>

#include "ops/cpu/dispatch.h"
#include "ops/workspace.h"

namespace offgrid::ops {

namespace {

// The group is cut into pieces of about this many weight bytes (at least; fewer pieces for a small group), which
// the threads claim in ranges, largest first (ThreadPool::parallel_claims): the threads end within one piece
// of each other. Below two pieces the group runs on the caller (a hand-off would cost more than the rows).
constexpr uint64_t kMinBytesPerPiece = 32 * 1024;
constexpr int kMaxPieces = 1024;

// The cost of one row tile: its weight bytes (streamed once) and the multiply-adds for its tokens, in one
// unit: a token costs 1/8 of the bytes (decode is memory-bound, prompts compute-bound).
uint64_t tile_cost(const MatmulTask & t) {
    return static_cast<uint64_t>(cpu::kTileMax) * t.w.row_bytes * static_cast<uint64_t>(8 + t.n_tokens);
}

int64_t n_tiles(const MatmulTask & t) { return (t.w.rows + cpu::kTileMax - 1) / cpu::kTileMax; }

// Token rows [t0, t1) of a task's activations to quantise (a unit of the parallel quantisation).
struct QuantJob {
    size_t task;
    int64_t t0, t1;
};
constexpr int64_t kQuantJobTokens = 16;

// Position in the group: task index and tile within it.
struct Cut {
    size_t task;
    int64_t tile;
};

}  // namespace

void matmul_group(std::span<const MatmulTask> tasks, ThreadPool * pool) {
    uint64_t total = 0, bytes = 0;
    for (const MatmulTask & t : tasks) {
        if (t.n_tokens <= 0 || t.w.rows == 0) continue;
        total += tile_cost(t) * static_cast<uint64_t>(n_tiles(t));
        bytes += t.w.row_bytes * static_cast<uint64_t>(t.w.rows);
    }
    if (total == 0) return;
    // Each task's activations quantised once here (when its kernels want quantised rows), not once per range,
    // and once for all tasks that read the same rows in the same format (q/k/v, gate/up: the same input). The
    // rows, the layouts and the cuts below live in the calling thread's scratch arena until the group is done.
    Scope scope(Workspace::scratch());
    const std::span<PreparedActivations> act_prepared = scope.take<PreparedActivations>(tasks.size());
    std::fill(act_prepared.begin(), act_prepared.end(), PreparedActivations{});
    size_t max_jobs = 0;
    for (const MatmulTask & t : tasks) max_jobs += t.n_tokens > 0 ? static_cast<size_t>((t.n_tokens + kQuantJobTokens - 1) / kQuantJobTokens) : 0;
    const std::span<QuantJob> jobs = scope.take<QuantJob>(max_jobs);
    size_t n_jobs = 0;
    int64_t quant_elems = 0;
    for (size_t i = 0; i < tasks.size(); ++i) {
        const MatmulTask & t = tasks[i];
        if (t.n_tokens <= 0 || t.w.rows == 0) continue;
        // The layout alone first (no room taken), so a task that shares an earlier task's rows takes none.
        PreparedActivations a = activation_layout(t.w, t.x);
        if (a.quantize == nullptr) {
            // F32 rows taken as they are: tasks on the same rows share one key, so a gemm entry packs them once
            // per thread for all of them (PreparedActivations::key).
            for (size_t j = 0; j < i; ++j) {
                const PreparedActivations & b = act_prepared[j];
                if (b.quantize == nullptr && b.data == a.data && b.stride == a.stride &&
                    tasks[j].n_tokens == t.n_tokens && tasks[j].w.cols == t.w.cols) {
                    a.key = b.key;
                    break;
                }
            }
        } else {
            bool shared = false;
            for (size_t j = 0; j < i; ++j) {
                const PreparedActivations & b = act_prepared[j];
                if (b.quantize == a.quantize && b.x == a.x && b.cols == a.cols && b.stride == a.stride &&
                    tasks[j].n_tokens == t.n_tokens) {
                    a = b;
                    shared = true;
                    break;
                }
            }
            if (!shared) take_activation_rows(a, t.n_tokens, scope.arena());
        }
        act_prepared[i] = a;
    }
    for (size_t i = 0; i < tasks.size(); ++i) {
        const PreparedActivations & a = act_prepared[i];
        if (a.quantize == nullptr) continue;
        bool shared = false;  // the rows of an earlier task
        for (size_t j = 0; j < i && !shared; ++j) shared = act_prepared[j].data == a.data;
        if (shared) continue;
        for (int64_t t0 = 0; t0 < tasks[i].n_tokens; t0 += kQuantJobTokens) {
            jobs[n_jobs++] = {i, t0, std::min(tasks[i].n_tokens, t0 + kQuantJobTokens)};
        }
        quant_elems += tasks[i].n_tokens * a.cols;
    }
    const std::span<const PreparedActivations> acts = act_prepared;
    const int threads = pool ? pool->n_threads() : 1;
    if (threads > 1 && quant_elems >= kParallelQuantElems) {
        pool->parallel_for(n_jobs, [&](size_t j0, size_t j1) {
            for (size_t j = j0; j < j1; ++j) quantize_activation_rows(acts[jobs[j].task], jobs[j].t0, jobs[j].t1);
        });
    } else {
        for (size_t j = 0; j < n_jobs; ++j) quantize_activation_rows(acts[jobs[j].task], jobs[j].t0, jobs[j].t1);
    }
    const int parts = threads == 1 ? 1 : static_cast<int>(std::clamp<uint64_t>(bytes / kMinBytesPerPiece, 1, kMaxPieces));
    auto run_range = [&](Cut from, Cut to) {
        for (size_t i = from.task; i <= to.task && i < tasks.size(); ++i) {
            const MatmulTask & t = tasks[i];
            if (t.n_tokens <= 0 || t.w.rows == 0) continue;
            const int64_t first = i == from.task ? from.tile : 0;
            const int64_t last = i == to.task ? to.tile : n_tiles(t);
            if (first < last) {
                matmul_rows(t.w, t.x, acts[i], t.n_tokens, t.y, first * cpu::kTileMax,
                            std::min<int64_t>(t.w.rows, last * cpu::kTileMax));
            }
        }
    };
    if (parts == 1) {
        run_range({0, 0}, {tasks.size(), 0});
        return;
    }
    // Cut p is the first tile whose cost starts at or after p/parts of the total; piece p runs [cut p, cut p+1).
    const std::span<Cut> cuts = scope.take<Cut>(static_cast<size_t>(parts) + 1);
    cuts[0] = {0, 0};
    cuts[parts] = {tasks.size(), 0};
    size_t task = 0;
    uint64_t before = 0;  // cost of the tasks before `task`
    for (int p = 1; p < parts; ++p) {
        const uint64_t target = total / parts * p + total % parts * p / parts;
        for (;;) {
            const MatmulTask & t = tasks[task];
            const uint64_t c = (t.n_tokens <= 0 || t.w.rows == 0) ? 0 : tile_cost(t);
            const uint64_t task_total = c * static_cast<uint64_t>(c ? n_tiles(t) : 0);
            if (before + task_total > target) {
                cuts[p] = {task, static_cast<int64_t>((target - before + c - 1) / c)};
                break;
            }
            before += task_total;
            ++task;
        }
    }
    pool->parallel_claims(static_cast<size_t>(parts), [&](size_t p0, size_t p1) { run_range(cuts[p0], cuts[p1]); });
}

}  // namespace offgrid::ops
