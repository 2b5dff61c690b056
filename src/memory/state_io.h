// Saving and restoring the hybrid memory (memory.md section 7, own format): the whole context or one sequence.
//
// Layout (little endian, version 2): header {magic "OGMS", version, kind (0 whole, 1 sequence), flags, source seq
// id, the shape the state was made with}, u32 CRC-32C of the header, then the sections attention, recurrent,
// indexer in that order, each framed as {u64 size, u32 CRC-32C of the body, body}. With kPartialOnly the
// attention and indexer sections are empty.
//
// Restore: the framing and every checksum are verified first, then the header is compared with this memory
// (other sizes, layers or element types): a damaged, cut or foreign state is refused with an offgrid::FileError
// naming the damaged part and its offset, and nothing changes. A state with valid checksums whose content is
// still inconsistent (only a crafted one can be), or that finds no room, leaves the three caches consistent:
// the destination sequence (or, for a whole restore, everything) is dropped from all three.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "memory/hybrid_memory.h"

namespace offgrid::memory {

inline constexpr uint32_t kStateMagic = 0x534D474F;  // "OGMS"
// 2: separate K and V widths, indexer row parts; 3: checksums; 4: staleness marks open the indexer section
inline constexpr uint32_t kStateVersion = 4;
inline constexpr uint32_t kPartialOnly = 1;
// A sequence's tail: its attention and indexer cells at positions >= `from` (state_save's argument) and its whole
// recurrent state. Loading it appends the cells to the destination sequence, whose own cells must all lie before
// the first appended position, and replaces its recurrent state. A prefix cache stores a path's cells once this
// way: a snapshot is the tail since the snapshot below it, restored after that one.
inline constexpr uint32_t kAppend = 2;

// seq = -1: the whole context. `from` (kAppend only): the first position saved.
std::vector<uint8_t> state_save(const HybridMemory & mem, SeqId seq, uint32_t flags = 0, Pos from = 0);
// seq = -1: replace everything; else replace sequence `seq` (the state may come from another id), or with
// kAppend extend it.
// `name` is used in error messages (a file name, or "state").
void state_load(HybridMemory & mem, std::span<const uint8_t> data, SeqId seq, uint32_t flags = 0,
                const std::string & name = "state");
// Tests and fuzzing: recomputes the checksums of an edited state (as far as its framing holds), so that the body
// parser behind them is reached.
void state_reseal(std::span<uint8_t> data);

}  // namespace offgrid::memory
