// What the machine offers the library: the kernel level chosen for this CPU and the memory bandwidth a decode
// step can draw on (decode speed is read against it).
//
// Thread safety: every function may be called from any thread. The kernel level is read once per process
// (the CPU's features, then OFFGRID_ISA) and never changes afterwards.
#pragma once

#include <cstddef>

namespace offgrid {

// The kernel level the library runs ("scalar", "avx2", "avx512", "amx", "neon", "neondot"): the detected one, or the one
// OFFGRID_ISA names when the CPU runs it.
const char * active_isa_name();
// The best kernel level this CPU runs.
const char * detected_isa_name();

// The activations of the quantised weights' products, for the whole process: "int16" (the default: 16-bit
// activations, within llama.cpp's error on every golden pair and about 100x closer to the exact result), "int8"
// (ggml's 8-bit blocks: the speed path, whose prompts run on the tile unit where the CPU has AMX, about as far from
// the exact result as llama.cpp) or "f32" (the exact mode: weights dequantised exactly, f32 products); see
// docs/kernels.md. OFFGRID_QUANT_ACT gives the same choice. The mode is fixed at the first product the library runs
// (or at this call); set_activation_mode must come before any model is loaded, and throws Error for an unknown name or
// when another mode is already in effect.
void set_activation_mode(const char * mode);
const char * activation_mode_name();

// The q4_K experts' gate and up weights held in 16-row groups (docs/kernels.md, "Rows in lanes"): with the "int8"
// mode on a CPU with AVX-512 VNNI their products of up to 8 tokens (a decode step's experts) take a product that
// keeps 16 rows in a register's lanes; the results are the same bits. The groups are a copy made at load, so those
// weights take their memory twice. Off by default; set it before loading a model (a model loaded before keeps its
// layout). expert_rows16() is true when it is set and takes effect here (int8 mode, the kernel present); when set,
// asking settles the activation mode, as activation_mode_name() does.
void set_expert_rows16(bool on);
bool expert_rows16();

struct ReadBandwidth {
    double bytes_per_second = 0;  // the best round (a shared machine only ever slows a round down)
    size_t buffer_bytes = 0;
    int threads = 1;
    int rounds = 0;
};

// The memory bus as a decode step sees it: `n_threads` threads (1..kMaxThreads of offgrid/context.h) each read
// their own contiguous share of a buffer of `buffer_bytes` (rounded down to 4 KiB, at least 4 KiB), far larger
// than the last-level cache, with plain loads, `rounds` times. The buffer is written once first, so every page
// exists. Throws Error for a thread count out of range, std::bad_alloc when the buffer cannot be had.
ReadBandwidth measure_read_bandwidth(int n_threads, size_t buffer_bytes = size_t(1) << 30, int rounds = 5);

}  // namespace offgrid
