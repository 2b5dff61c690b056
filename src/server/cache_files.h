// The prefix cache on disk (`offgrid serve --slot-save-path DIR`): at shutdown every snapshot is written to DIR, one
// file each, and at start the files of the same model are loaded back, so a restarted server keeps its prefixes.
// File: magic "OGPCACHE", u32 version 1, u64 model fingerprint, u32 n_tokens, i32 tokens[n], u64 n_state,
// state[n_state] (Context::state_get of one sequence), u32 n_logits, f32 logits[n_logits]. Written through a
// temporary name and renamed. Files of another model, another version or a broken layout are skipped with a
// message; a snapshot that the memory refuses at restore time is prefilled instead (the scheduler's rule).
#pragma once

#include <cstdint>
#include <string>

#include "server/prefix_cache.h"

namespace offgrid::server {

// Returns the number of files written; removes the DIR's older cache files first.
size_t save_prefix_cache(const PrefixCache & cache, const std::string & dir, uint64_t fingerprint);
// Returns the number of snapshots loaded (the cache's budget and LRU apply as for any insert).
size_t load_prefix_cache(PrefixCache & cache, const std::string & dir, uint64_t fingerprint, size_t n_vocab);

}  // namespace offgrid::server
