#include "runtime/ngram_draft.h"

#include <algorithm>

namespace offgrid::runtime {

std::vector<int32_t> ngram_draft(const std::vector<int32_t> & history, int32_t last, int32_t key_min, int32_t key_max,
                                 int32_t n_cap) {
    std::vector<int32_t> out;
    if (n_cap <= 0) return out;
    const int64_t n = static_cast<int64_t>(history.size()) + 1;  // the token list: history, then last
    auto at = [&](int64_t i) { return i + 1 == n ? last : history[static_cast<size_t>(i)]; };
    for (int64_t k = std::min<int64_t>(key_max, n - 1); k >= key_min; --k) {
        // An occurrence ending at e (its last token at e) with e + 1 < n; scanned from the most recent.
        for (int64_t e = n - 2; e >= k - 1; --e) {
            bool match = true;
            for (int64_t j = 0; j < k && match; ++j) match = at(e - j) == at(n - 1 - j);
            if (!match) continue;
            for (int64_t i = e + 1; i < n && static_cast<int32_t>(out.size()) < n_cap; ++i) out.push_back(at(i));
            return out;
        }
    }
    return out;
}

}  // namespace offgrid::runtime
