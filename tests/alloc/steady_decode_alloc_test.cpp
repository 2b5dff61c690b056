// Heap allocations of a steady decode step. This binary replaces the global operator new and delete with
// counting versions (they count every thread, the context's pool included), warms a context up with a prompt and
// a few decode steps, then counts the allocations of further steps of one token per sequence through the public
// API (Context::decode, Sampler::sample and Sampler::accept). The model is wrapped in an architecture that counts
// what its forward allocates on its own (the pass, on every pool thread), so the test tells apart:
//  - the forward: nothing in a steady step, nothing in a prompt of several ubatches (its scratch, the weight
//    products' and the kernels' included, lives in the context's workspace, sized once when the context is
//    created, which never grows);
//  - sampling: nothing in a steady step;
//  - the rest of the step (the memory's bookkeeping: validation, the split, the slot search, the cell index, the
//    plan; and the runtime's batch handling): nothing either;
//  - a second prompt of the size of one decoded before (several ubatches): nothing.
// Every part is printed and asserted to be 0.
//
// OFFGRID_ALLOC_TRACE=1 prints the call stack of each counted allocation (to find one that appears).
#include <gtest/gtest.h>

#include <execinfo.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <string>
#include <vector>

#include "model/architecture.h"
#include "model/glm5next/gen_model.h"
#include "model/qwen4exp/gen_model.h"
#include "offgrid/context.h"
#include "offgrid/sampler.h"
#include "common/shared_dir.h"
#include "ops/workspace.h"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
std::atomic<bool> g_in_forward{false};      // set by CountingArchitecture around the model's forward
std::atomic<long> g_forward_allocations{0};
bool g_trace = false;
thread_local bool t_in_trace = false;

void note_allocation() {
    if (g_in_forward.load(std::memory_order_relaxed)) g_forward_allocations.fetch_add(1, std::memory_order_relaxed);
    if (!g_counting.load(std::memory_order_relaxed)) return;
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    if (g_trace && !t_in_trace) {
        t_in_trace = true;
        void * frames[32];
        const int n = backtrace(frames, 32);
        static const char line[] = "---- allocation in a counted step\n";
        (void)!write(2, line, sizeof(line) - 1);
        backtrace_symbols_fd(frames, n, 2);
        t_in_trace = false;
    }
}

void * allocate(std::size_t n) {
    note_allocation();
    if (void * p = std::malloc(n == 0 ? 1 : n)) return p;
    throw std::bad_alloc();
}

void * allocate_aligned(std::size_t n, std::align_val_t al) {
    note_allocation();
    const std::size_t a = static_cast<std::size_t>(al);
    const std::size_t size = (n + a - 1) / a * a;
    if (void * p = std::aligned_alloc(a, size == 0 ? a : size)) return p;
    throw std::bad_alloc();
}

}  // namespace

void * operator new(std::size_t n) { return allocate(n); }
void * operator new[](std::size_t n) { return allocate(n); }
void * operator new(std::size_t n, const std::nothrow_t &) noexcept {
    try { return allocate(n); } catch (...) { return nullptr; }
}
void * operator new[](std::size_t n, const std::nothrow_t &) noexcept {
    try { return allocate(n); } catch (...) { return nullptr; }
}
void * operator new(std::size_t n, std::align_val_t a) { return allocate_aligned(n, a); }
void * operator new[](std::size_t n, std::align_val_t a) { return allocate_aligned(n, a); }
void operator delete(void * p) noexcept { std::free(p); }
void operator delete[](void * p) noexcept { std::free(p); }
void operator delete(void * p, std::size_t) noexcept { std::free(p); }
void operator delete[](void * p, std::size_t) noexcept { std::free(p); }
void operator delete(void * p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void * p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void * p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void * p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {

using offgrid::BatchToken;
using offgrid::Context;
using offgrid::ContextParams;

std::string temp_model_path(const char * arch) {
    return (std::filesystem::temp_directory_path() /
            ("offgrid_alloc_" + std::string(arch) + "_" + std::to_string(getpid()) + ".gguf")).string();
}

namespace om = offgrid::model;

// The loaded model with its forward counted on its own (g_forward_allocations, every thread).
class CountingArchitecture final : public om::Architecture {
public:
    explicit CountingArchitecture(std::shared_ptr<const offgrid::Model> m) : model_(std::move(m)), a_(model_->impl()) {}
    const std::string & name() const override { return a_.name(); }
    uint32_t n_vocab() const override { return a_.n_vocab(); }
    uint32_t n_ctx_train() const override { return a_.n_ctx_train(); }
    uint32_t n_layers() const override { return a_.n_layers(); }
    uint32_t carry_width() const override { return a_.carry_width(); }
    om::LayerCaches layer_caches(uint32_t il) const override { return a_.layer_caches(il); }
    uint32_t hidden_width() const override { return a_.hidden_width(); }
    uint32_t wide_hidden_width() const override { return a_.wide_hidden_width(); }
    const offgrid::gguf::Reader & reader() const override { return a_.reader(); }
    offgrid::memory::CacheShape cache_shape(offgrid::tensor::ElemType k, offgrid::tensor::ElemType v) const override {
        return a_.cache_shape(k, v);
    }
    om::MemoryTraits memory_traits() const override { return a_.memory_traits(); }
    std::string check_token_seqs(const std::vector<offgrid::memory::SeqId> & seqs) const override {
        return a_.check_token_seqs(seqs);
    }
    void forward(const om::ForwardContext & fc) const override {
        g_in_forward = true;
        a_.forward(fc);
        g_in_forward = false;
    }
    offgrid::ops::WorkspaceSize workspace_size(const om::WorkspaceLimits & limits) const override {
        return a_.workspace_size(limits);
    }
    void rerotate_keys(const offgrid::memory::CacheShape & shape, offgrid::memory::Storage & storage, uint32_t cell,
                       offgrid::memory::Pos old_pos, offgrid::memory::Pos new_pos) const override {
        a_.rerotate_keys(shape, storage, cell, old_pos, new_pos);
    }
    std::string describe() const override { return a_.describe(); }

private:
    std::shared_ptr<const offgrid::Model> model_;
    const om::Architecture & a_;
};

template <typename Writer>
std::shared_ptr<const offgrid::Model> load_generated(const char * arch, Writer && w) {
    const std::string path = temp_model_path(arch);
    w.write_file(path);
    auto model = offgrid::Model::load(path);
    std::filesystem::remove(path);  // the mapping stays valid
    return std::make_shared<const offgrid::Model>(std::make_shared<const CountingArchitecture>(model), path);
}

// qwen4exp with sparse QSA layers: pools of 4, a budget of 16 tokens (4 pools), so after the prompt every QSA
// layer scores and selects (n_pools far beyond the budget).
std::shared_ptr<const offgrid::Model> qwen_model(offgrid::tensor::ElemType weights = offgrid::tensor::ElemType::F32) {
    offgrid::model::qwen4exp::GenConfig cfg = offgrid::model::qwen4exp::gen_preset("tiny");
    cfg.weight_type = weights;
    cfg.n_ctx = 2048;
    cfg.n_vocab = 512;
    cfg.qsa_ratio = 4;
    cfg.top_k = 16;
    cfg.seed = 11;
    return load_generated("qwen4exp", offgrid::model::qwen4exp::generate_model(cfg));
}

// glm5-next tiny: kpool 4, top_k 8 (2 pools), KDA and DSA layers with full and shared indexers.
std::shared_ptr<const offgrid::Model> glm_model() {
    offgrid::model::glm5next::GenConfig cfg = offgrid::model::glm5next::gen_preset("tiny");
    cfg.n_ctx = 2048;
    return load_generated("glm5next", offgrid::model::glm5next::generate_model(cfg));
}

struct StepCounts {
    long prompt_forward = 0;         // the first prompt's forward passes
    std::vector<long> step_forward;  // per counted step: the forward alone
    std::vector<long> step_sampling; // per counted step: sample + accept of every sequence
    std::vector<long> step_total;    // per counted step: everything (decode, sample, accept)
    long second_prompt = -1;         // the same prompts again into emptied sequences, everything (-1: not run)
    long second_prompt_forward = -1;
};

// Decodes a prompt of n_prompt tokens into each of n_seqs sequences (one call, several ubatches), `warm` sampled
// steps, then `counted` sampled steps (one token per sequence) with the allocation counter on. The batch vectors
// and their tokens are made once, as a caller that cares would. Last, every sequence is removed and the same
// prompts are decoded again with the counter on.
StepCounts run(const std::shared_ptr<const offgrid::Model> & model, ContextParams p, int n_seqs, int n_prompt,
               int warm, int counted) {
    p.n_seq_max = static_cast<uint32_t>(n_seqs);
    Context ctx(model, p);
    std::vector<offgrid::Sampler> samplers;
    for (int s = 0; s < n_seqs; ++s) {
        offgrid::SamplingParams sp;
        sp.temperature = 0.8f;
        sp.seed = 5 + static_cast<uint32_t>(s);
        samplers.emplace_back(sp);
    }

    std::vector<BatchToken> prompt;
    for (int s = 0; s < n_seqs; ++s) {
        for (int i = 0; i < n_prompt; ++i) {
            prompt.push_back({static_cast<int32_t>((i * 37 + 3 + s * 11) % model->n_vocab()), i, {s}, i == n_prompt - 1});
        }
    }
    StepCounts out;
    const long before = g_forward_allocations.load();
    const offgrid::DecodeResult pr = ctx.decode(prompt);
    out.prompt_forward = g_forward_allocations.load() - before;
    EXPECT_TRUE(pr.ok()) << pr.message;

    std::vector<BatchToken> step(static_cast<size_t>(n_seqs));
    for (int s = 0; s < n_seqs; ++s) {
        step[static_cast<size_t>(s)].seqs = {s};
        step[static_cast<size_t>(s)].output = true;
    }
    int32_t pos = n_prompt;
    long sampling = 0;
    auto one_step = [&] {
        const long s0 = g_allocations.load();
        for (int s = 0; s < n_seqs; ++s) {
            const int32_t tok = samplers[static_cast<size_t>(s)].sample(ctx, s);
            samplers[static_cast<size_t>(s)].accept(tok);
            step[static_cast<size_t>(s)].token = tok;
            step[static_cast<size_t>(s)].pos = pos;
        }
        sampling = g_allocations.load() - s0;
        ++pos;
        const offgrid::DecodeResult r = ctx.decode(step);
        if (!r.ok()) ADD_FAILURE() << r.message;
    };
    for (int i = 0; i < warm; ++i) one_step();
    for (int i = 0; i < counted; ++i) {
        const long at = g_allocations.load(), f0 = g_forward_allocations.load();
        g_counting = true;
        one_step();
        g_counting = false;
        out.step_total.push_back(g_allocations.load() - at);
        out.step_forward.push_back(g_forward_allocations.load() - f0);
        out.step_sampling.push_back(sampling);
    }

    for (int s = 0; s < n_seqs; ++s) EXPECT_TRUE(ctx.seq_rm(s, -1, -1));
    const long at = g_allocations.load(), f0 = g_forward_allocations.load();
    g_counting = true;
    const offgrid::DecodeResult again = ctx.decode(prompt);
    g_counting = false;
    EXPECT_TRUE(again.ok()) << again.message;
    out.second_prompt = g_allocations.load() - at;
    out.second_prompt_forward = g_forward_allocations.load() - f0;
    return out;
}

ContextParams params(int n_threads) {
    ContextParams p;
    p.n_ctx = 1024;
    p.n_ubatch = 64;
    p.n_threads = n_threads;
    return p;
}

long sum(const std::vector<long> & v) {
    long n = 0;
    for (long x : v) n += x;
    return n;
}

void expect_steady_zero(const StepCounts & c, const std::string & what) {
    const uint64_t growths = offgrid::ops::Workspace::total_growths();
    const long total = sum(c.step_total), forward = sum(c.step_forward), sampling = sum(c.step_sampling);
    const double steps = static_cast<double>(c.step_total.size());
    std::printf("[ alloc    ] %s: prompt forward %ld; per steady step: forward %.1f, sampling %.1f, the rest of "
                "decode (memory and runtime) %.1f, whole step %.1f; the same prompt again: %ld (forward %ld)\n",
                what.c_str(), c.prompt_forward, static_cast<double>(forward) / steps,
                static_cast<double>(sampling) / steps, static_cast<double>(total - forward - sampling) / steps,
                static_cast<double>(total) / steps, c.second_prompt, c.second_prompt_forward);
    EXPECT_EQ(forward, 0) << "the forward allocated in " << c.step_forward.size() << " steady steps";
    EXPECT_EQ(sampling, 0) << "sampling allocated in " << c.step_sampling.size() << " steady steps";
    EXPECT_EQ(total, 0) << "the whole steady steps allocated (" << c.step_total.size() << " steps)";
    EXPECT_EQ(c.second_prompt - c.second_prompt_forward, 0) << "a second prompt of the same size allocated";
    EXPECT_EQ(c.second_prompt_forward, 0) << "the second prompt's forward allocated";
    // Every ubatch of the first prompt fits the workspace too, the kernels' blocks included.
    EXPECT_EQ(c.prompt_forward, 0) << "the prompt's forward allocated";
    EXPECT_EQ(growths, 0u) << "a workspace grew: a model's workspace_size() is too small";
}

// Every configuration the test runs on one model: 1 and 2 threads, one sequence and four (separate streams and
// one unified stream), and dense attention on the sparse layers.
void run_all(const std::shared_ptr<const offgrid::Model> & model, const std::string & arch) {
    for (int threads : {1, 2}) {
        for (int n_seqs : {1, 4}) {
            const std::string what = arch + ", " + std::to_string(threads) + " thread(s), " +
                                      std::to_string(n_seqs) + " sequence(s)";
            SCOPED_TRACE(what);
            // 150 prompt tokens: on qwen4exp 37 pools per QSA layer against a budget of 4, so each step scores
            // and selects.
            expect_steady_zero(run(model, params(threads), n_seqs, 150, 4, 8), what);
        }
    }
    ContextParams unified = params(2);
    unified.unified = true;
    SCOPED_TRACE("unified");
    expect_steady_zero(run(model, unified, 4, 150, 4, 4), arch + ", 4 sequences in one stream");
    // Dense attention on the sparse layers: each token attends to its whole sequence, within the same workspace.
    ContextParams dense = params(2);
    dense.qsa_dense = true;
    SCOPED_TRACE("dense");
    expect_steady_zero(run(model, dense, 1, 150, 4, 4), arch + " dense");
    expect_steady_zero(run(model, dense, 4, 150, 4, 4), arch + " dense, 4 sequences");
}

TEST(SteadyDecode, CountingAllocatorSeesAVectorAllocation) {
    // The counter works: a vector made while counting is seen (so a zero below means something).
    const long at = g_allocations.load();
    g_counting = true;
    std::vector<int> * v = new std::vector<int>(100);
    g_counting = false;
    EXPECT_GE(g_allocations.load() - at, 2);
    delete v;
}

TEST(SteadyDecode, Qwen4expSparseQsaWholeStepAllocatesNothing) {
    g_trace = std::getenv("OFFGRID_ALLOC_TRACE") != nullptr;
    run_all(qwen_model(), "qwen4exp");
}

// Quantised weights: the products quantise their activation rows, which take room from the workspace too.
TEST(SteadyDecode, Qwen4expQuantisedWeightsWholeStepAllocatesNothing) {
    g_trace = std::getenv("OFFGRID_ALLOC_TRACE") != nullptr;
    run_all(qwen_model(offgrid::tensor::ElemType::Q8_0), "qwen4exp q8_0");
}

// llama.cpp-quantised weights (the quantised golden set's Q4_K_M: q4_K, q6_K, q5_0 and f16 matrices). In the int8.
// run of this test (OFFGRID_QUANT_ACT=int8) the prompts' products go through the 8-bit prompt products of the
// level (at AVX2 the tokens-in-lanes gemm), whose packed tokens and decoded rows must fit the declared blocks.
TEST(SteadyDecode, Qwen4expQuantisedWeightsOfLlamaQuantizeAllocateNothing) {
    OFFGRID_REQUIRE_SHARED();
    const std::string path = offgrid::test::shared_dir() + "/golden/quant/models/q-Q4_K_M.gguf";
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
    g_trace = std::getenv("OFFGRID_ALLOC_TRACE") != nullptr;
    const auto model = offgrid::Model::load(path);
    run_all(std::make_shared<const offgrid::Model>(std::make_shared<const CountingArchitecture>(model), path),
            "qwen4exp Q4_K_M (llama-quantize)");
}

TEST(SteadyDecode, Glm5NextWholeStepAllocatesNothing) {
    g_trace = std::getenv("OFFGRID_ALLOC_TRACE") != nullptr;
    run_all(glm_model(), "glm5-next");
}

}  // namespace
