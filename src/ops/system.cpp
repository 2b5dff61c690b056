// The public machine queries (offgrid/system.h) over the dispatch and the bandwidth probe.
#include "offgrid/system.h"

#include <atomic>
#include <string>

#include "offgrid/error.h"
#include "ops/bandwidth.h"
#include "ops/cpu/dispatch.h"
#include "ops/cpu/kernels_quant.h"
#include "ops/thread_pool.h"

namespace offgrid {

const char * active_isa_name() { return ops::cpu::isa_name(ops::cpu::active_isa()); }

const char * detected_isa_name() { return ops::cpu::isa_name(ops::cpu::detected_isa()); }

void set_activation_mode(const char * mode) {
    const std::string m = mode != nullptr ? mode : "";
    ops::cpu::QuantActMode want;
    if (!ops::cpu::quant_act_mode_from_name(mode, &want)) throw Error("activation mode '" + m + "' is not int16, int8 or f32");
    if (!ops::cpu::request_quant_act_mode(want)) {
        throw Error(std::string("activation mode ") + m + " asked for, but " + activation_mode_name() +
                    " is already in effect (set it before loading a model)");
    }
}

const char * activation_mode_name() { return ops::cpu::quant_act_mode_name(ops::cpu::quant_act_mode()); }

namespace {
std::atomic<bool> g_expert_rows16{false};
}  // namespace

void set_expert_rows16(bool on) { g_expert_rows16.store(on); }

bool expert_rows16() {
    if (!g_expert_rows16.load()) return false;
    const ops::cpu::TypeKernels * k = ops::cpu::kernels_for(tensor::ElemType::Q4_K, ops::cpu::active_isa());
    return k != nullptr && k->rows16 != nullptr;
}

ReadBandwidth measure_read_bandwidth(int n_threads, size_t buffer_bytes, int rounds) {
    ops::ThreadPool pool(n_threads);  // throws Error for a count out of range
    return ops::measure_read_bandwidth(&pool, buffer_bytes, rounds);
}

}  // namespace offgrid
