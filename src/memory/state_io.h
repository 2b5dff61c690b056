// Saving and restoring the hybrid memory (memory.md section 7, own format): the whole context or one sequence.
//
// Layout (little endian): header {magic "OGMS", version, kind (0 whole, 1 sequence), flags, source seq id, the
// shape the state was made with}, then the sections attention, recurrent, indexer, in that order. With
// kPartialOnly only the recurrent section is written and read.
//
// Restore: a header that does not match this memory (other sizes, layers or element types) is refused with a
// message and nothing changes. Any later failure (truncated or corrupt body, no room) leaves the three caches
// consistent: the destination sequence (or, for a whole restore, everything) is dropped from all three, and an
// offgrid::FileError says where and why.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "memory/hybrid_memory.h"

namespace offgrid::memory {

inline constexpr uint32_t kStateMagic = 0x534D474F;  // "OGMS"
inline constexpr uint32_t kStateVersion = 2;  // 2: separate K and V widths, indexer row parts
inline constexpr uint32_t kPartialOnly = 1;

// seq = -1: the whole context.
std::vector<uint8_t> state_save(const HybridMemory & mem, SeqId seq, uint32_t flags = 0);
// seq = -1: replace everything; else replace sequence `seq` (the state may come from another id).
// `name` is used in error messages (a file name, or "state").
void state_load(HybridMemory & mem, std::span<const uint8_t> data, SeqId seq, uint32_t flags = 0,
                const std::string & name = "state");

}  // namespace offgrid::memory
