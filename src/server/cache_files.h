// The prefix cache on disk (`offgrid serve --slot-save-path DIR`): at shutdown every snapshot is written to
// DIR/<fingerprint>/ (the model's fingerprint in 16 hex digits), one file each, and at start the files of that
// folder are loaded back, so a restarted server keeps its prefixes and servers of other models never touch them.
//
// File (version 3): magic "OGPCACHE", u32 version, u64 model fingerprint, u32 n_tokens, i32 tokens[n], u32 from,
// u64 n_state, state[n_state] (Context::state_get of one sequence when from is 0, else Context::state_get_tail
// since `from`: then the snapshot at the first `from` tokens is its parent, loaded first), u32 n_logits,
// f32 logits[n_logits], then a u32 CRC-32C of every byte before it. A file is served only when every byte of it
// is as written; a tail whose parent was not loaded is skipped.
//
// Loading refuses, with a message naming the file: anything that is not a regular file (FIFO, device, symlink:
// opened without following links and without blocking), a file larger than the cache budget, a failed checksum,
// another model or version, a broken layout, and a snapshot `check` rejects (the scheduler restores each one
// once, so another slot layout or cache type is found at start, not per request). Files are read up to their
// stat size and no further, newest first until the budget is full.
//
// Saving writes each file atomically (temporary name, fsync, rename over the old one) and only after all of them
// were written removes the folder's other `prefix-*.ogpc` files; nothing outside the folder is touched.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "server/prefix_cache.h"

namespace offgrid::server {

// The folder of one model's files inside DIR.
std::string prefix_cache_folder(const std::string & dir, uint64_t fingerprint);

// Returns the number of files written (all snapshots, or fewer when a write failed: then no old file is removed).
size_t save_prefix_cache(const PrefixCache & cache, const std::string & dir, uint64_t fingerprint);

// Whether a snapshot read from a file can be restored; empty when it can, else why not.
// The snapshot's parent is set (and cached) when it is a tail; the check may fill in row_bytes.
using SnapshotCheck = std::function<std::string(const std::vector<int32_t> & tokens, Snapshot & snap)>;
// Returns the number of snapshots loaded (the cache's budget and LRU apply as for any insert).
size_t load_prefix_cache(PrefixCache & cache, const std::string & dir, uint64_t fingerprint, size_t n_vocab,
                         const SnapshotCheck & check = {});

}  // namespace offgrid::server
