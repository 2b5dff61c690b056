// The exact entries: at every level first the reference dequantiser of the weight row and the level's F32 dot
// (the Scalar entries are the twins); a level with fused kernels (LevelFills::quant_fused: avx2, avx512) then
// overwrites every type with kernels that dequantise in registers. Baseline code: the SIMD is behind pointers.
#include <array>
#include <utility>

#include "ops/cpu/kernels_quant_common.h"
#include "ops/cpu/levels.h"
#include "ops/workspace.h"
#include "tensor/types.h"

namespace offgrid::ops::cpu::quant {

namespace {

using tensor::ElemType;
using F32Dot = float (*)(const void *, const void *, int64_t);

F32Dot g_f32_dot[kIsaCount] = {};  // per level, set once while the dispatch builds its tables

// Room for n dequantised floats: the thread's block in its workspace (ops/workspace.h, invariant 4).
float * scratch(size_t n) {
    return reinterpret_cast<float *>(
        Workspace::scratch().kernel_block(KernelBlock::dequantised_rows, n * sizeof(float)));
}

template <ElemType T>
void dequant_ref(const void * src, float * dst, int64_t n) {
    tensor::dequantize_row(T, src, dst, static_cast<size_t>(n));
}

template <RowDequant DQ, int L>
float fused_dot(const void * w, const void * x, int64_t n) {
    float * row = scratch(static_cast<size_t>(n));
    DQ(w, row, n);
    return g_f32_dot[L](row, x, n);
}

template <RowDequant DQ, int L>
void fused_tile(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int n_rows,
                int n_tok, float * y, size_t y_stride) {
    float * rows = scratch(static_cast<size_t>(n) * kTileMax);
    const auto * wb = static_cast<const uint8_t *>(w);
    const auto * ab = static_cast<const uint8_t *>(act);
    for (int r = 0; r < n_rows; ++r) DQ(wb + r * w_stride, rows + r * n, n);
    for (int t = 0; t < n_tok; ++t) {
        for (int r = 0; r < n_rows; ++r) y[t * y_stride + r] = g_f32_dot[L](rows + r * n, ab + t * act_stride, n);
    }
}

template <RowDequant DQ, int L>
void set_fused(TypeKernels * table, ElemType type) {
    TypeKernels & k = table[static_cast<uint32_t>(type)];
    k.act_type = ElemType::F32;
    k.quantize_act = nullptr;
    k.vec_dot = fused_dot<DQ, L>;
    k.dot_tile = fused_tile<DQ, L>;
}

// Every type this side serves, with the reference dequantiser, at level L.
template <int L>
void set_reference_entries(TypeKernels * table) {
    set_fused<dequant_ref<ElemType::Q4_0>, L>(table, ElemType::Q4_0);
    set_fused<dequant_ref<ElemType::Q4_1>, L>(table, ElemType::Q4_1);
    set_fused<dequant_ref<ElemType::Q5_0>, L>(table, ElemType::Q5_0);
    set_fused<dequant_ref<ElemType::Q5_1>, L>(table, ElemType::Q5_1);
    set_fused<dequant_ref<ElemType::Q2_K>, L>(table, ElemType::Q2_K);
    set_fused<dequant_ref<ElemType::Q3_K>, L>(table, ElemType::Q3_K);
    set_fused<dequant_ref<ElemType::Q4_K>, L>(table, ElemType::Q4_K);
    set_fused<dequant_ref<ElemType::Q5_K>, L>(table, ElemType::Q5_K);
    set_fused<dequant_ref<ElemType::Q6_K>, L>(table, ElemType::Q6_K);
    set_fused<dequant_ref<ElemType::IQ4_NL>, L>(table, ElemType::IQ4_NL);
    set_fused<dequant_ref<ElemType::IQ4_XS>, L>(table, ElemType::IQ4_XS);
}

// set_reference_entries<L> for every level L, indexed by level.
template <size_t... L>
constexpr std::array<void (*)(TypeKernels *), sizeof...(L)> reference_fills(std::index_sequence<L...>) {
    return {set_reference_entries<static_cast<int>(L)>...};
}
constexpr auto kReferenceFills = reference_fills(std::make_index_sequence<kIsaCount>{});

}  // namespace

RowDequant dequantizer(ElemType type, Isa isa) {
    const LevelFills * lv = level_fills(isa);
    return lv != nullptr && lv->dequantizer != nullptr ? lv->dequantizer(type) : nullptr;
}

void add_dequant_entries(Isa isa, TypeKernels * table) {
    const int level = static_cast<int>(isa);
    const LevelFills * lv = level_fills(isa);
    if (lv == nullptr) return;
    g_f32_dot[level] = table[static_cast<uint32_t>(ElemType::F32)].vec_dot;
    kReferenceFills[level](table);
    if (lv->quant_fused != nullptr) lv->quant_fused(table);
}

}  // namespace offgrid::ops::cpu::quant
