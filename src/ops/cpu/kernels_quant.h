// Quantised dot kernels of every weight type except F32, F16, BF16 and Q8_0 (owned by the quantisation side of
// issue 8; see docs/kernels.md). add_quant_kernels fills table[type id] for the types it implements at isa;
// it is called once per level when the dispatch builds its tables. A Scalar entry is required for every type
// with an entry at a higher level: it is the twin the tests compare with.
#pragma once

#include "ops/cpu/dispatch.h"

namespace offgrid::ops::cpu {

void add_quant_kernels(Isa isa, TypeKernels * table);

}  // namespace offgrid::ops::cpu
