// The list of kernel levels (ops/cpu/levels.h), CPU detection, the OFFGRID_ISA override, and every table of
// the kernels built from the list once, on first use.
#include "ops/cpu/dispatch.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if (defined(__x86_64__) || defined(__i386__)) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include "ops/cpu/attn_rows.h"
#include "ops/cpu/gemm_float.h"
#include "ops/cpu/kernels_float.h"
#include "ops/cpu/kernels_quant.h"
#include "ops/cpu/kernels_quant_common.h"
#include "ops/cpu/kernels_quant_int16.h"
#include "ops/cpu/kernels_quant_int8.h"
#include "ops/cpu/kernels_quant_q8_0.h"
#include "ops/cpu/levels.h"
#include "ops/cpu/vec.h"
#include "tensor/blocks.h"

namespace offgrid::ops::cpu {

namespace {

using tensor::ElemType;

bool always() { return true; }

#if defined(__x86_64__) || defined(__i386__)
// clang 14 does not know "f16c" in __builtin_cpu_supports (the fuzz build uses clang): CPUID leaf 1, ECX bit 29.
// The OS support of the wide registers F16C needs is the AVX2 check's.
bool cpu_has_f16c() {
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

// __builtin_cpu_supports also checks that the OS saves the wide registers (XCR0), not just CPUID.
bool cpu_has_avx2() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
}

bool cpu_has_avx512() {
    __builtin_cpu_init();
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
}

// The tile unit: CPUID leaf 7 announces AMX-TILE (EDX bit 24) and AMX-INT8 (bit 25); Linux enables the 8 KiB of
// tile data per process only on request (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA), which a kernel
// without that support, a seccomp filter or a hypervisor may refuse: then the level is absent.
bool cpu_has_amx() {
#if defined(__linux__) && defined(__x86_64__)
    if (!cpu_has_avx512()) return false;
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    if ((edx & (1u << 24)) == 0 || (edx & (1u << 25)) == 0) return false;
    if ((ecx & (1u << 1)) == 0) return false;  // AVX512-VBMI (byte permutations of the token images; every AMX CPU has it)
    constexpr long kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXtileData = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXtileData) != 0) return false;
    unsigned long granted = 0;
    return syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) == 0 && (granted & (1ul << kXtileData)) != 0;
#else
    return false;
#endif
}
#endif

#if defined(__aarch64__)
// Advanced SIMD is part of the AArch64 baseline (the compiler already uses it); the dot-product instructions
// (SDOT/UDOT, Armv8.2's optional FEAT_DotProd) are announced by the kernel in AT_HWCAP.
bool cpu_has_neon() { return true; }

bool cpu_has_neon_dot() {
#if defined(__linux__) && defined(HWCAP_ASIMDDP)
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#else
    return false;
#endif
}
#endif

// The one list of levels. A field left null keeps the base level's entries.
constexpr LevelFills kLevels[] = {
    {.isa = Isa::Scalar, .name = "scalar", .base = Isa::Scalar, .cpu_has = always,
     .float_kernels = add_float_kernels_scalar, .gemm = nullptr, .q8_0_int8 = add_q8_0_int8_kernels_scalar,
     .quant_fused = nullptr, .dequantizer = nullptr, .int16 = quant::add_int16_entries_scalar,
     .int8 = quant::add_integer_entries, .q8_0_row_tiles = nullptr, .vec = add_vec_kernels_scalar,
     .attn_rows = add_attn_row_kernels_scalar},
#if defined(__x86_64__) || defined(__i386__)
    {.isa = Isa::Avx2, .name = "avx2", .base = Isa::Scalar, .cpu_has = cpu_has_avx2,
     .float_kernels = add_float_kernels_avx2, .gemm = nullptr, .q8_0_int8 = add_q8_0_int8_kernels_avx2,
     .quant_fused = quant::add_fused_avx2, .dequantizer = quant::dequantizer_avx2,
     .int16 = quant::add_int16_entries_avx2, .int8 = quant::add_int8_entries_avx2, .q8_0_row_tiles = nullptr,
     .vec = add_vec_kernels_avx2, .attn_rows = add_attn_row_kernels_avx2, .q8_0_int16 = true},
    {.isa = Isa::Avx512, .name = "avx512", .base = Isa::Avx2, .cpu_has = cpu_has_avx512,
     .float_kernels = add_float_kernels_avx512, .gemm = add_gemm_kernels_avx512,
     .q8_0_int8 = add_q8_0_int8_kernels_avx512, .quant_fused = quant::add_fused_avx512,
     .dequantizer = quant::dequantizer_avx512, .int16 = quant::add_int16_entries_avx512,
     .int8 = quant::add_int8_entries_avx512, .q8_0_row_tiles = quant::add_q8_0_row_tiles_avx512,
     .vec = add_vec_kernels_avx512, .attn_rows = add_attn_row_kernels_avx512, .q8_0_int16 = true},
    // The AVX-512 kernels, plus prompt products of the 8-bit-activation path on the tile unit (the exact and int16
    // fills are repeated because each level's own fills build those entries).
    {.isa = Isa::Amx, .name = "amx", .base = Isa::Avx512, .cpu_has = cpu_has_amx,
     .float_kernels = nullptr, .gemm = nullptr, .q8_0_int8 = add_q8_0_int8_gemm_amx,
     .quant_fused = quant::add_fused_avx512, .dequantizer = quant::dequantizer_avx512,
     .int16 = quant::add_int16_entries_avx512, .int8 = quant::add_int8_gemm_amx,
     .q8_0_row_tiles = nullptr, .vec = nullptr, .attn_rows = nullptr, .q8_0_int16 = true},
#endif
#if defined(__aarch64__)
    {.isa = Isa::Neon, .name = "neon", .base = Isa::Scalar, .cpu_has = cpu_has_neon,
     .float_kernels = add_float_kernels_neon, .gemm = nullptr, .q8_0_int8 = nullptr, .quant_fused = nullptr,
     .dequantizer = nullptr, .int16 = quant::add_int16_entries_neon, .int8 = nullptr, .q8_0_row_tiles = nullptr,
     .vec = add_vec_kernels_neon, .attn_rows = add_attn_row_kernels_neon},
    {.isa = Isa::NeonDot, .name = "neondot", .base = Isa::Neon, .cpu_has = cpu_has_neon_dot,
     .float_kernels = nullptr, .gemm = nullptr, .q8_0_int8 = add_q8_0_int8_kernels_neondot, .quant_fused = nullptr,
     .dequantizer = nullptr, .int16 = nullptr, .int8 = nullptr, .q8_0_row_tiles = nullptr, .vec = nullptr,
     .attn_rows = nullptr},
#endif
};

constexpr size_t kLevelCount = sizeof(kLevels) / sizeof(kLevels[0]);

constexpr bool list_is_well_formed() {
    if (kLevels[0].isa != Isa::Scalar || kLevels[0].base != Isa::Scalar) return false;
    for (size_t i = 1; i < kLevelCount; ++i) {
        bool base_before = false;
        for (size_t j = 0; j < i; ++j) base_before = base_before || kLevels[j].isa == kLevels[i].base;
        if (!base_before || static_cast<int>(kLevels[i].isa) >= kIsaCount) return false;
    }
    return true;
}
static_assert(list_is_well_formed(), "Scalar first; every level after its base");
static_assert(static_cast<int>(Isa::Amx) + 1 == kIsaCount, "kIsaCount counts the Isa values");

int index_of(Isa isa) { return static_cast<int>(isa); }

// Levels this CPU runs, in list order (a level needs its base).
std::vector<Isa> detect() {
    std::array<bool, kIsaCount> runs{};
    std::vector<Isa> out;
    for (const LevelFills & lv : kLevels) {
        const bool base_ok = lv.isa == lv.base || runs[index_of(lv.base)];
        if (base_ok && lv.cpu_has()) {
            runs[index_of(lv.isa)] = true;
            out.push_back(lv.isa);
        }
    }
    return out;
}

const std::vector<Isa> & runnable() {
    static const std::vector<Isa> levels = detect();
    return levels;
}

Isa from_env(Isa detected) {
    const char * env = std::getenv("OFFGRID_ISA");
    if (env == nullptr || *env == '\0') return detected;
    const LevelFills * wanted = nullptr;
    for (const LevelFills & lv : kLevels) {
        if (std::strcmp(env, lv.name) == 0) wanted = &lv;
    }
    if (wanted == nullptr) {
        std::string names;
        for (const LevelFills & lv : kLevels) names += std::string(names.empty() ? "" : ", ") + lv.name;
        std::fprintf(stderr, "offgrid: OFFGRID_ISA=%s is not a level of this build (%s); using %s\n", env,
                     names.c_str(), isa_name(detected));
        return detected;
    }
    for (Isa isa : runnable()) {
        if (isa == wanted->isa) return isa;
    }
    std::fprintf(stderr, "offgrid: OFFGRID_ISA=%s is not supported by this CPU; using %s\n", env, isa_name(detected));
    return detected;
}

using Table = std::array<TypeKernels, kTypeTableSize>;

// Each level starts from its base level's tables, so a type or primitive without a kernel at a level keeps the
// best one below it. `exact` holds the exact entries whatever OFFGRID_QUANT_ACT says (f32 activations for every
// weight type); `int8` the 8-bit-activation tables whatever it says.
struct Tables {
    std::array<bool, kIsaCount> built{};
    std::array<Table, kIsaCount> by_isa{};
    std::array<Table, kIsaCount> exact{};
    std::array<TypeKernels, kIsaCount> q8_0_int8{};
    std::array<Table, kIsaCount> int8{};
    std::array<Table, kIsaCount> int8_chain{};  // int8 before its Q8_0 entry is set: what the next level starts from
    std::array<Table, kIsaCount> int16{};       // the default (int16) tables whatever OFFGRID_QUANT_ACT says
    std::array<VecKernels, kIsaCount> vec{};
    std::array<AttnRowKernels, kIsaCount> attn{};
    // Only the levels this CPU runs are filled: a level's fill functions are compiled for its instructions, and
    // even storing their function pointers may use them (the compiler vectorises the stores).
    Tables() {
        std::array<bool, kIsaCount> runs{};
        for (Isa isa : runnable()) runs[index_of(isa)] = true;
        for (const LevelFills & lv : kLevels) {
            const int i = index_of(lv.isa), b = index_of(lv.base);
            if (!runs[i]) continue;
            Table t = by_isa[b], e = exact[b], i8 = int8_chain[b], i16 = int16[b];
            TypeKernels q8 = q8_0_int8[b];
            VecKernels v = vec[b];
            AttnRowKernels a = attn[b];
            for (Table * table : {&t, &e, &i8, &i16}) {
                if (lv.float_kernels != nullptr) lv.float_kernels(table->data());
                if (lv.gemm != nullptr) lv.gemm(table->data());
            }
            add_quant_kernels(lv.isa, t.data());
            add_exact_quant_kernels(lv.isa, e.data());
            add_quant_kernels(lv.isa, i8.data(), QuantActMode::Int8);
            add_quant_kernels(lv.isa, i16.data(), QuantActMode::Int16);
            if (lv.q8_0_int8 != nullptr) lv.q8_0_int8(q8);
            if (lv.vec != nullptr) lv.vec(v);
            if (lv.attn_rows != nullptr) lv.attn_rows(a);
            by_isa[i] = t;
            exact[i] = e;
            q8_0_int8[i] = q8;
            int8_chain[i] = i8;
            int8[i] = i8;
            int8[i][static_cast<uint32_t>(ElemType::Q8_0)] = q8;
            int16[i] = i16;
            // A type this level has no 8-bit kernel for would keep the scalar twin, ten times slower than the
            // level's default kernel: it takes that one (its own activation format; int16 is the more exact one).
            if (lv.isa != Isa::Scalar) {
                const Table & twins = int8[index_of(Isa::Scalar)];
                for (size_t id = 0; id < kTypeTableSize; ++id) {
                    if (twins[id].vec_dot != nullptr && int8[i][id].vec_dot == twins[id].vec_dot) int8[i][id] = i16[id];
                }
            }
            vec[i] = v;
            attn[i] = a;
            built[i] = true;
        }
        if (quant_act_mode() == QuantActMode::Int8) by_isa = int8;
    }
};

const Tables & tables() {
    static const Tables t;
    return t;
}

// The table of a level, or null when this build has no such level.
template <class T>
const T * of_level(const std::array<T, kIsaCount> & by_level, Isa isa) {
    const int level = index_of(isa);
    if (level < 0 || level >= kIsaCount || !tables().built[level]) return nullptr;
    return &by_level[level];
}

const TypeKernels * entry(const std::array<Table, kIsaCount> & by_level, ElemType type, Isa isa) {
    const auto id = static_cast<uint32_t>(type);
    const Table * t = of_level(by_level, isa);
    if (id >= kTypeTableSize || t == nullptr) return nullptr;
    const TypeKernels & k = (*t)[id];
    return k.vec_dot != nullptr ? &k : nullptr;
}

}  // namespace

const LevelFills * level_fills(Isa isa) {
    for (const LevelFills & lv : kLevels) {
        if (lv.isa == isa) return &lv;
    }
    return nullptr;
}

Isa detected_isa() { return runnable().back(); }

Isa active_isa() {
    static const Isa isa = from_env(detected_isa());
    return isa;
}

std::vector<Isa> available_isas() { return runnable(); }

const char * isa_name(Isa isa) {
    switch (isa) {
        case Isa::Scalar: return "scalar";
        case Isa::Avx2: return "avx2";
        case Isa::Avx512: return "avx512";
        case Isa::Neon: return "neon";
        case Isa::NeonDot: return "neondot";
        case Isa::Amx: return "amx";
    }
    return "?";
}

const TypeKernels * kernels_for(ElemType type, Isa isa) { return entry(tables().by_isa, type, isa); }

const TypeKernels * exact_kernels_for(ElemType type, Isa isa) { return entry(tables().exact, type, isa); }

const TypeKernels * int8_kernels_for(ElemType type, Isa isa) { return entry(tables().int8, type, isa); }

const TypeKernels * q8_0_int8_kernels(Isa isa) { return of_level(tables().q8_0_int8, isa); }

const VecKernels & vec_kernels(Isa isa) {
    const VecKernels * k = of_level(tables().vec, isa);
    return k != nullptr ? *k : tables().vec[0];
}

const VecKernels & vec_kernels() {
    static const VecKernels & k = vec_kernels(active_isa());
    return k;
}

const AttnRowKernels & attn_row_kernels(Isa isa) {
    const AttnRowKernels * k = of_level(tables().attn, isa);
    return k != nullptr ? *k : tables().attn[0];
}

const AttnRowKernels & attn_row_kernels() {
    static const AttnRowKernels & k = attn_row_kernels(active_isa());
    return k;
}

size_t act_row_bytes(ElemType act_type, int64_t n) {
    if (act_type == ElemType::F32) return static_cast<size_t>(n) * sizeof(float);
    if (act_type == ElemType::Q16_K) return static_cast<size_t>((n + 255) / 256) * sizeof(tensor::BlockQ16_K);
    return static_cast<size_t>(tensor::row_bytes(act_type, static_cast<uint64_t>(n)));
}

}  // namespace offgrid::ops::cpu
