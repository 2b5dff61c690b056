// The quantised dot kernels' entry into the dispatch tables, by OFFGRID_QUANT_ACT (kernels_quant.h).
#include "ops/cpu/kernels_quant.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ops/cpu/kernels_quant_common.h"
#include "ops/cpu/kernels_quant_int16.h"
#include "ops/cpu/kernels_quant_int8.h"
#include "ops/cpu/kernels_quant_q8_0.h"

namespace offgrid::ops::cpu {

namespace {

QuantActMode mode_from_env() {
    const char * env = std::getenv("OFFGRID_QUANT_ACT");
    if (env == nullptr || *env == '\0' || std::strcmp(env, "int16") == 0) return QuantActMode::Int16;
    if (std::strcmp(env, "f32") == 0) return QuantActMode::F32;
    if (std::strcmp(env, "int8") == 0) return QuantActMode::Int8;
    std::fprintf(stderr, "offgrid: OFFGRID_QUANT_ACT=%s is not int16, f32 or int8; using int16\n", env);
    return QuantActMode::Int16;
}

}  // namespace

QuantActMode quant_act_mode() {
    static const QuantActMode mode = mode_from_env();
    return mode;
}

void add_exact_quant_kernels(Isa isa, TypeKernels * table) { quant::add_dequant_entries(isa, table); }

void add_quant_kernels(Isa isa, TypeKernels * table, QuantActMode mode) {
    switch (mode) {
        case QuantActMode::F32: add_exact_quant_kernels(isa, table); return;
        case QuantActMode::Int8:
            // The scalar twins at the first level (the levels above inherit them), VNNI where the CPU has it.
            if (isa == Isa::Scalar) quant::add_integer_entries(table);
            if (isa == Isa::Avx512) quant::add_int8_entries_avx512(table);
            return;
        case QuantActMode::Int16: {
            add_exact_quant_kernels(isa, table);  // q4_1 / q5_1
            // Q8_0 keeps the float side's exact entry: measured in the model (kbench-q8_0.gguf, 2 threads, binaries
            // alternated in one session) the int16 Q8_0 entry was no faster at decode or prompts (docs/kernels.md),
            // so the exact one stays. Its int16 kernels stay built and tested (add_int16_entries_*).
            const TypeKernels q8_0 = table[static_cast<uint32_t>(tensor::ElemType::Q8_0)];
            switch (isa) {
                case Isa::Scalar: quant::add_int16_entries_scalar(table); break;
                case Isa::Avx2: quant::add_int16_entries_avx2(table); break;
                case Isa::Avx512: quant::add_int16_entries_avx512(table); break;
            }
            table[static_cast<uint32_t>(tensor::ElemType::Q8_0)] = q8_0;
            // Its one-row tiles for decode steps of a few sequences (bit-identical to its vec_dot).
            if (isa == Isa::Avx512) quant::add_q8_0_row_tiles_avx512(table[static_cast<uint32_t>(tensor::ElemType::Q8_0)]);
            return;
        }
    }
}

}  // namespace offgrid::ops::cpu
