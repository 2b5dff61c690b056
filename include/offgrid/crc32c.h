// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of state files and in-memory states.
// It detects every error confined to 32 consecutive bits, so any single changed byte is always caught.
// crc32c("123456789") == 0xE3069283. Uses the SSE4.2 instruction when the CPU has it (checked at run time, so the
// baseline build gets it too), else a table; both give the same value (tested).
// Thread safety: pure functions, callable from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace offgrid {

// Continues a running checksum: crc32c(b, crc32c(a)) == crc32c(a followed by b). Start with 0.
uint32_t crc32c(const void * data, size_t n, uint32_t crc = 0);
// The table version, always available (the reference for the test of the fast path).
uint32_t crc32c_portable(const void * data, size_t n, uint32_t crc = 0);

}  // namespace offgrid
