// Placeholder until the quantised kernels land: no entries, so every such type takes the generic path.
#include "ops/cpu/kernels_quant.h"

namespace offgrid::ops::cpu {

void add_quant_kernels(Isa /*isa*/, TypeKernels * /*table*/) {}

}  // namespace offgrid::ops::cpu
