// A fast content hash for large buffers (model weights): CRC-32C in three lanes. The buffer is read in 24-byte
// blocks; lane k takes bytes 8k..8k+7 of every block, and the bytes after the last whole block go to lane 0.
// Each lane is a CRC-32C of its own byte sequence, so a change confined to any 32 consecutive bits of the
// buffer changes exactly one lane's CRC and is always detected (the property CRC-32C has for one sequence).
// Three independent lanes keep the CPU's CRC unit busy (latency 3, throughput 1 per cycle): about 8 bytes per
// cycle, the speed of memory. Not a cryptographic hash: it identifies content against accident, not attack.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace offgrid {

using LaneCrc = std::array<uint32_t, 3>;

// Uses the SSE4.2 instruction when the CPU has it (checked at run time), else data_hash_portable.
LaneCrc data_hash(const void * data, size_t n);
// The table version: the same value on any CPU (the reference for the test of the fast path).
LaneCrc data_hash_portable(const void * data, size_t n);

}  // namespace offgrid
