#include "server/stop_text.h"

#include <algorithm>

#include "offgrid/tokenizer.h"

namespace offgrid::server {

StopText::StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {
    stops_.erase(std::remove_if(stops_.begin(), stops_.end(), [](const std::string & s) { return s.empty(); }),
                 stops_.end());
}

std::string StopText::push(const std::string & piece) {
    if (stopped_) return {};
    pending_ += piece;
    // The earliest stop string wins (a later-starting one may end sooner, but the text before the first is all
    // the client may see).
    size_t cut = std::string::npos;
    for (const auto & s : stops_) cut = std::min(cut, pending_.find(s));
    if (cut != std::string::npos) {
        stopped_ = true;
        std::string out = pending_.substr(0, cut);
        pending_.clear();
        return out;
    }
    // Hold back the longest tail that is a proper prefix of some stop string.
    size_t hold = 0;
    for (const auto & s : stops_) {
        const size_t most = std::min(s.size() - 1, pending_.size());
        for (size_t k = most; k > hold; --k) {
            if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
                hold = k;
                break;
            }
        }
    }
    size_t ready = pending_.size() - hold;
    ready = utf8_complete_prefix(std::string_view(pending_).substr(0, ready));
    std::string out = pending_.substr(0, ready);
    pending_.erase(0, ready);
    return out;
}

std::string StopText::flush() {
    if (stopped_) return {};
    std::string out;
    out.swap(pending_);
    return out;
}

}  // namespace offgrid::server
