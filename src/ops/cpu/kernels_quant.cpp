// The quantised dot kernels' entry into the dispatch tables. Every level registers the fused exact entries
// (dequantise + the level's F32 dot; the Scalar level's are the twins); OFFGRID_QUANT_ACT=int8 replaces them by
// the 8-bit-activation kernels, for measurement.
#include "ops/cpu/kernels_quant.h"

#include "ops/cpu/kernels_quant_common.h"

namespace offgrid::ops::cpu {

void add_quant_kernels(Isa isa, TypeKernels * table) {
    static const bool int8 = quant::integer_activations_requested();
    if (int8) {
        if (isa == Isa::Scalar) quant::add_integer_entries(table);
        return;
    }
    quant::add_dequant_entries(isa, table);
}

}  // namespace offgrid::ops::cpu
