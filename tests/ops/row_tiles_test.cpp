// One-row tiles of the table entries that declare them (TypeKernels::row_tile_min_tokens: the driver's order
// for decode steps of a few sequences): every (token) output of a 1 x n tile, n = 1..kTileTokensMax, is bit for
// bit the entry's vec_dot, at every level this CPU has, for widths of 1 to 33 blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "ops/cpu/dispatch.h"
#include "ops/cpu/kernels_quant.h"
#include "random_data.h"
#include "tensor/quantize.h"
#include "tensor/types.h"

namespace offgrid::ops::cpu {
namespace {

using tensor::ElemType;
using test_data::random_floats;

TEST(RowTiles, OneRowTilesOfUpTo8TokensAreBitIdenticalToVecDot) {
    size_t entries = 0, exact_entries = 0;
    for (Isa isa : available_isas()) {
        for (uint32_t id = 0; id < 2 * kTypeTableSize; ++id) {
            // The process's tables, then the exact ones (f32 activations, whatever OFFGRID_QUANT_ACT says).
            const bool exact = id >= kTypeTableSize;
            const auto type = static_cast<ElemType>(id % kTypeTableSize);
            const TypeKernels * k = exact ? exact_kernels_for(type, isa) : kernels_for(type, isa);
            if (k == nullptr || k->row_tile_min_tokens == 0 || !tensor::can_quantize(type)) continue;
            ASSERT_NE(k->dot_tile, nullptr);
            ++entries;
            exact_entries += exact;
            const std::string what = std::string(tensor::traits(type).name) + " " + isa_name(isa) + (exact ? " exact" : "");
            const int64_t b = tensor::traits(type).block_size;
            for (int64_t n : {b, 3 * b, 33 * b}) {
                std::vector<uint8_t> w(tensor::row_bytes(type, n));
                tensor::quantize_row(type, random_floats(static_cast<size_t>(n), 70 + static_cast<uint32_t>(n)).data(),
                                     w.data(), n);
                const size_t as = act_row_bytes(k->act_type, n) + 8;  // padded stride
                std::vector<uint8_t> a(as * kTileTokensMax, 0);
                const auto x = random_floats(static_cast<size_t>(n * kTileTokensMax), 71 + static_cast<uint32_t>(n));
                for (int t = 0; t < kTileTokensMax; ++t) {
                    if (k->act_type == ElemType::F32) {
                        std::memcpy(a.data() + t * as, x.data() + t * n, static_cast<size_t>(n) * sizeof(float));
                    } else {
                        k->quantize_act(x.data() + t * n, a.data() + t * as, n);
                    }
                }
                for (int nt = 1; nt <= kTileTokensMax; ++nt) {
                    const size_t ys = 3;
                    std::vector<float> y(ys * kTileTokensMax, -1.0f);
                    k->dot_tile(w.data(), w.size(), a.data(), as, n, 1, nt, y.data(), ys);
                    for (int t = 0; t < kTileTokensMax; ++t) {
                        for (size_t r = 0; r < ys; ++r) {
                            const float v = y[t * ys + r];
                            if (t < nt && r == 0) {
                                const float one = k->vec_dot(w.data(), a.data() + t * as, n);
                                ASSERT_EQ(std::memcmp(&v, &one, 4), 0) << what << " n=" << n << " 1x" << nt << " token " << t;
                            } else {
                                ASSERT_EQ(v, -1.0f) << what << ": the 1x" << nt << " tile wrote outside its outputs";
                            }
                        }
                    }
                }
            }
        }
    }
    std::printf("[ row tiles ] %zu entries with one-row tiles checked (%zu exact)\n", entries, exact_entries);
    // The exact Q8_0 entry at the Avx512 level has them (the default mode takes Q8_0's int16 entry there).
    const auto levels = available_isas();
    if (std::find(levels.begin(), levels.end(), Isa::Avx512) != levels.end()) {
        EXPECT_GE(exact_entries, 1u) << "the exact Q8_0 entry declares them";
    }
}

}  // namespace
}  // namespace offgrid::ops::cpu
