// The kernel levels as one list (defined in dispatch.cpp): each level names the CPU features it needs, the level
// whose tables it starts from, and the functions that fill its entries. Every table of the kernels (the type
// tables of dispatch.h, the vector primitives of vec.h, the attention rows of attn_rows.h) is built from this
// list alone, so adding a level is one row here plus that level's own files, and adding a weight type is an entry
// in the fill functions of the levels that implement it.
//
// Invariants:
//  - a level's base comes before it in the list, and a CPU that has the level has its base;
//  - a null fill leaves the base level's entries in place (so a type or primitive without a kernel at a level
//    runs the best one below it, down to the Scalar twin);
//  - the Scalar row is first, fills every table, and is its own base.
// Internal to src/ops/cpu.
#pragma once

#include <cstddef>

#include "ops/cpu/dispatch.h"

namespace offgrid::ops::cpu {

struct VecKernels;
struct AttnRowKernels;

namespace quant {
using RowDequant = void (*)(const void * src, float * dst, int64_t n);
}

struct LevelFills {
    Isa isa;
    const char * name;  // the OFFGRID_ISA value and isa_name()
    Isa base;           // the level whose tables this one starts from
    bool (*cpu_has)();  // read once at start-up
    // Type tables (TypeKernels): the float kernels and the exact Q8_0 entry; the F32 prompt product; the int8
    // variant of Q8_0 (q8_0_int8_kernels); the quantised types' exact entries dequantised in registers (null: the
    // reference dequantiser and this level's F32 dot) and their row dequantisers; the default int16 entries; the
    // 8-bit-activation entries (OFFGRID_QUANT_ACT=int8); one-row tiles for the Q8_0 entry.
    void (*float_kernels)(TypeKernels * table);
    void (*gemm)(TypeKernels * table);
    void (*q8_0_int8)(TypeKernels & k);
    void (*quant_fused)(TypeKernels * table);
    quant::RowDequant (*dequantizer)(tensor::ElemType type);
    void (*int16)(TypeKernels * table);
    void (*int8)(TypeKernels * table);
    void (*q8_0_row_tiles)(TypeKernels & k);
    // Vector primitives and attention rows.
    void (*vec)(VecKernels & k);
    void (*attn_rows)(AttnRowKernels & k);
    // The default (int16) path's Q8_0 entry: the int16 one where it was measured faster in the model, else the
    // exact one (f32 activations). Not inherited: each level's own measurement decides.
    bool q8_0_int16 = false;
};

// The row of a level, or null when this build has no such level (e.g. Neon on x86).
const LevelFills * level_fills(Isa isa);

constexpr int kIsaCount = 6;  // number of Isa values (the tables are indexed by them)

}  // namespace offgrid::ops::cpu
