// The quantised dot kernels' entry into the dispatch tables, by OFFGRID_QUANT_ACT (kernels_quant.h).
#include "ops/cpu/kernels_quant.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ops/cpu/kernels_quant_common.h"
#include "ops/cpu/kernels_quant_int16.h"
#include "ops/cpu/kernels_quant_int8.h"
#include "ops/cpu/kernels_quant_q8_0.h"
#include "ops/cpu/levels.h"

namespace offgrid::ops::cpu {

namespace {

// A mode asked for by the library's user before the first use (request_quant_act_mode), else -1.
std::atomic<int> g_requested{-1};
std::atomic<bool> g_settled{false};

QuantActMode mode_from_env() {
    const char * env = std::getenv("OFFGRID_QUANT_ACT");
    QuantActMode mode = QuantActMode::Int16;
    if (env == nullptr || *env == '\0' || quant_act_mode_from_name(env, &mode)) return mode;
    std::fprintf(stderr, "offgrid: OFFGRID_QUANT_ACT=%s is not int16, f32 or int8; using int16\n", env);
    return QuantActMode::Int16;
}

}  // namespace

QuantActMode quant_act_mode() {
    static const QuantActMode mode = [] {
        g_settled = true;
        const int asked = g_requested.load();
        return asked >= 0 ? static_cast<QuantActMode>(asked) : mode_from_env();
    }();
    return mode;
}

bool request_quant_act_mode(QuantActMode mode) {
    if (g_settled.load()) return quant_act_mode() == mode;
    g_requested = static_cast<int>(mode);
    return quant_act_mode() == mode;  // settles it now, so a later request cannot change it under running kernels
}

bool quant_act_mode_from_name(const char * name, QuantActMode * out) {
    for (const QuantActMode m : {QuantActMode::Int16, QuantActMode::F32, QuantActMode::Int8}) {
        if (name != nullptr && std::strcmp(name, quant_act_mode_name(m)) == 0) {
            *out = m;
            return true;
        }
    }
    return false;
}

const char * quant_act_mode_name(QuantActMode mode) {
    switch (mode) {
        case QuantActMode::Int16: return "int16";
        case QuantActMode::F32: return "f32";
        case QuantActMode::Int8: return "int8";
    }
    return "?";
}

namespace {

// The exact Q8_0 entry's one-row tiles for decode steps of a few sequences (bit-identical to its vec_dot; the
// level's fill leaves any other entry alone).
void add_q8_0_row_tiles(const LevelFills & lv, TypeKernels * table) {
    if (lv.q8_0_row_tiles != nullptr) lv.q8_0_row_tiles(table[static_cast<uint32_t>(tensor::ElemType::Q8_0)]);
}

}  // namespace

void add_exact_quant_kernels(Isa isa, TypeKernels * table) {
    quant::add_dequant_entries(isa, table);
    if (const LevelFills * lv = level_fills(isa)) add_q8_0_row_tiles(*lv, table);
}

void add_quant_kernels(Isa isa, TypeKernels * table, QuantActMode mode) {
    const LevelFills * lv = level_fills(isa);
    if (lv == nullptr) return;
    switch (mode) {
        case QuantActMode::F32: add_exact_quant_kernels(isa, table); return;
        case QuantActMode::Int8:
            // The scalar twins at the first level (the levels above inherit them), VNNI where the CPU has it. A type
            // still on its twin above the scalar level takes that level's default entry once the tables are built
            // (dispatch.cpp, Tables): only there are a level's inherited 8-bit kernels told from the twins.
            if (lv->int8 != nullptr) lv->int8(table);
            return;
        case QuantActMode::Int16: {
            // The exact entries (at this level's F32 dot) serve the types no int16 kernel covers; the base level's
            // int16 entries stay for the types this level has no int16 kernel of (q4_1 / q5_1 at neon and avx512
            // take those of scalar and avx2).
            std::array<TypeKernels, kTypeTableSize> base = {}, own = {};
            std::copy(table, table + kTypeTableSize, base.begin());
            if (lv->int16 != nullptr) lv->int16(own.data());
            quant::add_dequant_entries(isa, table);
            for (size_t id = 0; id < kTypeTableSize; ++id) {
                if (base[id].act_type == tensor::ElemType::Q16_K && own[id].vec_dot == nullptr) table[id] = base[id];
            }
            // Q8_0 keeps the float side's exact entry unless the level's int16 one was measured faster in the model
            // (LevelFills::q8_0_int16; docs/kernels.md): decode of scale Q8_0 1.4x faster at avx2 (Zen 1), 1.2x at
            // avx512 (Zen 4). The int16 kernels are built and tested at every level.
            const TypeKernels q8_0 = table[static_cast<uint32_t>(tensor::ElemType::Q8_0)];
            if (lv->int16 != nullptr) lv->int16(table);
            if (!lv->q8_0_int16) {
                table[static_cast<uint32_t>(tensor::ElemType::Q8_0)] = q8_0;
                add_q8_0_row_tiles(*lv, table);
            }
            return;
        }
    }
}

}  // namespace offgrid::ops::cpu
