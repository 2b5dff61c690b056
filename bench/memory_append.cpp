// Cost of appending one token to a sequence (begin: validate, split, slot search; apply: place, extend the pool
// layout, build the plan; finish) with 1k, 16k and 128k cells already in use. The append must cost what the
// new token costs, not a walk over the cache: the run ends by printing the 128k / 1k time ratio (at most 1.5).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "memory/hybrid_memory.h"

namespace {

using namespace offgrid::memory;

constexpr int64_t kIterations = 20000;

std::unique_ptr<HybridMemory> filled(uint32_t n_used) {
    MemoryParams p;
    p.shape.layers.assign(2, LayerCache::attention_rows(8, 8, 4, 2));
    p.shape.layers.insert(p.shape.layers.end(), 2, LayerCache::recurrent_rows(8, 16));
    p.shape.type_k = offgrid::tensor::ElemType::F16;
    p.shape.type_v = offgrid::tensor::ElemType::F16;
    p.n_ctx = n_used + kIterations + 4096;
    p.n_seq_max = 2;
    p.unified = true;
    p.n_rs_seq = 2;
    p.n_ubatch = 2048;
    p.kpool = 4;
    p.by_order = true;
    auto mem = std::make_unique<HybridMemory>(p);
    for (uint32_t done = 0; done < n_used;) {
        const uint32_t n = std::min<uint32_t>(8192, n_used - done);
        Batch b;
        for (uint32_t i = 0; i < n; ++i) b.tokens.push_back((Token)((done + i) % 1000));
        if (mem->begin(b).status != DecodeStatus::Ok) throw std::runtime_error("prefill failed");
        while (mem->has_next()) mem->apply();
        mem->finish();
        done += n;
    }
    return mem;
}

void BM_AppendOneToken(benchmark::State & state) {
    auto mem = filled((uint32_t)state.range(0));
    Batch one;
    one.tokens = {42};
    size_t pools = 0;
    for (auto _ : state) {
        if (mem->begin(one).status != DecodeStatus::Ok) {
            state.SkipWithError("append failed");
            break;
        }
        const Plan & plan = mem->apply();
        pools += plan.new_pools.size();
        benchmark::DoNotOptimize(plan.tokens.data());
        mem->finish();
    }
    state.counters["cells"] = (double)state.range(0);
    benchmark::DoNotOptimize(pools);
}
BENCHMARK(BM_AppendOneToken)->Arg(1 << 10)->Arg(16 << 10)->Arg(128 << 10)->Iterations(kIterations)->Unit(benchmark::kMicrosecond);

// Keeps each run's CPU time per iteration, to print the ratio measured in this one run.
class RatioReporter : public benchmark::ConsoleReporter {
public:
    void ReportRuns(const std::vector<Run> & runs) override {
        for (auto & r : runs) times[r.benchmark_name()] = r.GetAdjustedCPUTime();  // CPU time: the machine is shared
        ConsoleReporter::ReportRuns(runs);
    }
    std::map<std::string, double> times;
};

}  // namespace

int main(int argc, char ** argv) {
    benchmark::Initialize(&argc, argv);
    RatioReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    const auto small = reporter.times.find("BM_AppendOneToken/1024/iterations:20000");
    const auto large = reporter.times.find("BM_AppendOneToken/131072/iterations:20000");
    if (small != reporter.times.end() && large != reporter.times.end()) {
        const double ratio = large->second / small->second;
        std::printf("append 128k/1k time ratio: %.3f (must be at most 1.5): %s\n", ratio, ratio <= 1.5 ? "ok" : "TOO SLOW");
        return ratio <= 1.5 ? 0 : 1;
    }
    return 0;
}
