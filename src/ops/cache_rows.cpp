#include "ops/cache_rows.h"

#include <string>

#include "common/error.h"
#include "tensor/types.h"

namespace offgrid::ops {

CacheRows widen_cache_rows(const CacheRows & rows, size_t width, std::vector<float> & scratch,
                           std::vector<const void *> & pointers) {
    if (rows.type != tensor::ElemType::Q8_0) return rows;
    if (width % 32 != 0) throw Error("q8_0 cache rows: width " + std::to_string(width) + " is not a multiple of 32");
    const size_t n = rows.rows.size();
    scratch.resize(n * width);
    // Read every source pointer before `pointers` (possibly the storage behind rows.rows) is overwritten.
    for (size_t j = 0; j < n; ++j) tensor::dequantize_row(tensor::ElemType::Q8_0, rows.rows[j], &scratch[j * width], width);
    pointers.resize(n);
    for (size_t j = 0; j < n; ++j) pointers[j] = &scratch[j * width];
    return CacheRows{std::span<const void * const>(pointers.data(), n), tensor::ElemType::F32};
}

}  // namespace offgrid::ops
