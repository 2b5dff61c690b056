// Attention over Q8_0 cache rows: the attention kernels read F32 and F16 rows in place; Q8_0 rows (blocks of 32:
// f16 scale + 32 int8, tensor/blocks.h) are first widened to F32 in a caller-owned scratch, the rows a token
// attends to and nothing more. Widening is exact (every Q8_0 value is representable in f32), so attention over
// the widened rows equals attention over the dequantised cache.
#pragma once

#include <cstddef>
#include <vector>

#include "ops/attention.h"

namespace offgrid::ops {

// Returns `rows` itself when its type is F32 or F16. For Q8_0: dequantises every row (`width` elements, a
// multiple of 32) into `scratch` (rows.size() * width floats), points `pointers` at them (it may be the vector
// `rows` was built from) and returns F32 rows over the scratch. Both vectors must outlive the returned rows.
CacheRows widen_cache_rows(const CacheRows & rows, size_t width, std::vector<float> & scratch,
                           std::vector<const void *> & pointers);

}  // namespace offgrid::ops
