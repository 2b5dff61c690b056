// ISA detection, the OFFGRID_ISA override and the per-level type tables (built once, on first use).
#include "ops/cpu/dispatch.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "ops/cpu/gemm_float.h"
#include "ops/cpu/kernels_float.h"
#include "ops/cpu/kernels_quant.h"
#include "tensor/blocks.h"

namespace offgrid::ops::cpu {

namespace {

using tensor::ElemType;

constexpr int kIsaCount = 3;

// clang 14 does not know "f16c" in __builtin_cpu_supports (the fuzz build uses clang): CPUID leaf 1, ECX bit 29.
// The OS support of the wide registers F16C needs is the AVX2 check's.
bool cpu_has_f16c() {
#if defined(__x86_64__) || defined(__i386__)
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
#else
    return false;
#endif
}

Isa detect() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    // __builtin_cpu_supports also checks that the OS saves the wide registers (XCR0), not just CPUID.
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vnni");
    if (avx512) return Isa::Avx512;
    if (avx2) return Isa::Avx2;
#endif
    return Isa::Scalar;
}

Isa from_env(Isa detected) {
    const char * env = std::getenv("OFFGRID_ISA");
    if (env == nullptr || *env == '\0') return detected;
    Isa wanted;
    if (std::strcmp(env, "scalar") == 0) {
        wanted = Isa::Scalar;
    } else if (std::strcmp(env, "avx2") == 0) {
        wanted = Isa::Avx2;
    } else if (std::strcmp(env, "avx512") == 0) {
        wanted = Isa::Avx512;
    } else {
        std::fprintf(stderr, "offgrid: OFFGRID_ISA=%s is not scalar, avx2 or avx512; using %s\n", env,
                     isa_name(detected));
        return detected;
    }
    if (static_cast<int>(wanted) > static_cast<int>(detected)) {
        std::fprintf(stderr, "offgrid: OFFGRID_ISA=%s is not supported by this CPU; using %s\n", env,
                     isa_name(detected));
        return detected;
    }
    return wanted;
}

using Table = std::array<TypeKernels, kTypeTableSize>;

// Level L starts from level L-1's table, so a type without a faster kernel at L keeps the best lower one.
// `exact` holds the exact entries whatever OFFGRID_QUANT_ACT says (f32 activations for every weight type).
struct Tables {
    std::array<Table, kIsaCount> by_isa{};
    std::array<Table, kIsaCount> exact{};
    std::array<TypeKernels, kIsaCount> q8_0_int8{};
    std::array<Table, kIsaCount> int8{};  // the 8-bit-activation tables whatever OFFGRID_QUANT_ACT says
    Tables() {
        using Fill = void (*)(TypeKernels *);
        const Fill fl[kIsaCount] = {add_float_kernels_scalar, add_float_kernels_avx2, add_float_kernels_avx512};
        // Prompt products (TypeKernels::gemm): AVX-512 only so far; the lower levels keep dot_tile.
        const Fill gemm_fill[kIsaCount] = {nullptr, nullptr, add_gemm_kernels_avx512};
        void (*const q8fill[kIsaCount])(TypeKernels &) = {add_q8_0_int8_kernels_scalar, add_q8_0_int8_kernels_avx2,
                                                           add_q8_0_int8_kernels_avx512};
        Table t{}, e{}, i8{};
        TypeKernels q8{};
        for (int i = 0; i < kIsaCount; ++i) {
            const Isa isa = static_cast<Isa>(i);
            fl[i](t.data());
            if (gemm_fill[i] != nullptr) gemm_fill[i](t.data());
            add_quant_kernels(isa, t.data());
            fl[i](e.data());
            if (gemm_fill[i] != nullptr) gemm_fill[i](e.data());
            add_exact_quant_kernels(isa, e.data());
            fl[i](i8.data());
            if (gemm_fill[i] != nullptr) gemm_fill[i](i8.data());
            add_quant_kernels(isa, i8.data(), QuantActMode::Int8);
            q8fill[i](q8);
            by_isa[i] = t;
            exact[i] = e;
            q8_0_int8[i] = q8;
            int8[i] = i8;
            int8[i][static_cast<uint32_t>(ElemType::Q8_0)] = q8;
        }
        if (quant_act_mode() == QuantActMode::Int8) by_isa = int8;
    }
};

const Tables & tables() {
    static const Tables t;
    return t;
}

}  // namespace

Isa detected_isa() {
    static const Isa isa = detect();
    return isa;
}

Isa active_isa() {
    static const Isa isa = from_env(detected_isa());
    return isa;
}

std::vector<Isa> available_isas() {
    std::vector<Isa> out;
    for (int i = 0; i <= static_cast<int>(detected_isa()); ++i) out.push_back(static_cast<Isa>(i));
    return out;
}

const char * isa_name(Isa isa) {
    switch (isa) {
        case Isa::Scalar: return "scalar";
        case Isa::Avx2: return "avx2";
        case Isa::Avx512: return "avx512";
    }
    return "?";
}

const TypeKernels * kernels_for(ElemType type, Isa isa) {
    const auto id = static_cast<uint32_t>(type);
    const int level = static_cast<int>(isa);
    if (id >= kTypeTableSize || level < 0 || level >= kIsaCount) return nullptr;
    const TypeKernels & k = tables().by_isa[level][id];
    return k.vec_dot != nullptr ? &k : nullptr;
}

const TypeKernels * exact_kernels_for(ElemType type, Isa isa) {
    const auto id = static_cast<uint32_t>(type);
    const int level = static_cast<int>(isa);
    if (id >= kTypeTableSize || level < 0 || level >= kIsaCount) return nullptr;
    const TypeKernels & k = tables().exact[level][id];
    return k.vec_dot != nullptr ? &k : nullptr;
}

const TypeKernels * int8_kernels_for(ElemType type, Isa isa) {
    const auto id = static_cast<uint32_t>(type);
    const int level = static_cast<int>(isa);
    if (id >= kTypeTableSize || level < 0 || level >= kIsaCount) return nullptr;
    const TypeKernels & k = tables().int8[level][id];
    return k.vec_dot != nullptr ? &k : nullptr;
}

const TypeKernels * q8_0_int8_kernels(Isa isa) {
    const int level = static_cast<int>(isa);
    if (level < 0 || level >= kIsaCount) return nullptr;
    return &tables().q8_0_int8[level];
}

size_t act_row_bytes(ElemType act_type, int64_t n) {
    if (act_type == ElemType::F32) return static_cast<size_t>(n) * sizeof(float);
    if (act_type == ElemType::Q16_K) return static_cast<size_t>((n + 255) / 256) * sizeof(tensor::BlockQ16_K);
    return static_cast<size_t>(tensor::row_bytes(act_type, static_cast<uint64_t>(n)));
}

}  // namespace offgrid::ops::cpu
