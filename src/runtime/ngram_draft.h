// The ngram-simple drafter: the tokens that followed the most recent earlier occurrence of the sequence's last
// few tokens. Needs no model; pays off where text repeats (code editing, quoting the prompt).
#pragma once

#include <cstdint>
#include <vector>

namespace offgrid::runtime {

// Keys are the last k tokens of history + [last], k from key_max down to key_min; the first key found earlier
// in that token list (the most recent occurrence that is not the suffix itself) gives up to n_cap of the tokens
// after it. Empty when no key is found.
std::vector<int32_t> ngram_draft(const std::vector<int32_t> & history, int32_t last, int32_t key_min, int32_t key_max,
                                 int32_t n_cap);

}  // namespace offgrid::runtime
