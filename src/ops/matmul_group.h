// Several independent products in one parallel region. A decode step is a chain of small products (the
// experts' gate and up, the shared expert, a layer's projections): one region per product costs a wake-up and
// a barrier each and leaves a thread idle whenever a product is too small to split. A group splits the rows of
// all its products together, by bytes, into pieces of at least 32 KiB of weights that the threads claim in
// ranges as they come free (ThreadPool::parallel_claims).
//
// Every output is computed exactly as ops::matmul computes it (one vec_dot, or the tile's bit-identical
// equivalent), so the results do not depend on the grouping, the split or the thread count.
#pragma once

#include <cstdint>
#include <span>

#include "ops/matmul.h"
#include "ops/thread_pool.h"

namespace offgrid::ops {

// Y[t, o] = sum_i W[o, i] X[t, i] for n_tokens rows of X (stride W.cols) and Y (stride W.rows), as matmul.
struct MatmulTask {
    Matrix w;
    const float * x = nullptr;
    int64_t n_tokens = 0;
    float * y = nullptr;
};

// Runs every task; the tasks must not write each other's inputs. Tiny groups run inline on the caller.
void matmul_group(std::span<const MatmulTask> tasks, ThreadPool * pool);

}  // namespace offgrid::ops
