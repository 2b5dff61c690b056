#include "distributed/split.h"

#include <algorithm>
#include <charconv>

#include "common/error.h"

namespace offgrid::distributed {

std::string Split::describe() const {
    std::string s;
    for (const LayerRange & r : ranges) {
        if (!s.empty()) s += ',';
        s += std::to_string(r.first) + '-' + std::to_string(r.end - 1);
    }
    return s;
}

namespace {

uint32_t parse_layer(std::string_view text, const std::string & whole) {
    uint32_t v = 0;
    const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc() || p != text.data() + text.size()) {
        throw Error("--split " + whole + ": '" + std::string(text) + "' is not a layer number");
    }
    return v;
}

}  // namespace

Split parse_split(const std::string & text, uint32_t n_layers, int n_ranks) {
    Split split;
    std::string_view rest = text;
    while (true) {
        const size_t comma = rest.find(',');
        const std::string_view item = rest.substr(0, comma);
        const size_t dash = item.find('-');
        if (dash == std::string_view::npos) throw Error("--split " + text + ": '" + std::string(item) + "' is not FIRST-LAST");
        const uint32_t first = parse_layer(item.substr(0, dash), text);
        const uint32_t last = parse_layer(item.substr(dash + 1), text);
        if (last < first) throw Error("--split " + text + ": range " + std::string(item) + " ends before it begins");
        const uint32_t expect = split.ranges.empty() ? 0 : split.ranges.back().end;
        if (first != expect) {
            throw Error("--split " + text + ": range " + std::string(item) + " should begin at layer " + std::to_string(expect) +
                        " (ranges are contiguous, in rank order, from layer 0)");
        }
        if (last >= n_layers) {
            throw Error("--split " + text + ": range " + std::string(item) + " goes past the model's last layer " +
                        std::to_string(n_layers - 1));
        }
        split.ranges.push_back({first, last + 1});
        if (comma == std::string_view::npos) break;
        rest = rest.substr(comma + 1);
    }
    if (split.ranges.back().end != n_layers) {
        throw Error("--split " + text + ": layers " + std::to_string(split.ranges.back().end) + "-" +
                    std::to_string(n_layers - 1) + " belong to no rank");
    }
    if (static_cast<int>(split.ranges.size()) != n_ranks) {
        throw Error("--split " + text + ": " + std::to_string(split.ranges.size()) + " ranges for " + std::to_string(n_ranks) +
                    " ranks");
    }
    return split;
}

uint32_t trunk_layers(const gguf::Reader & reader) {
    const std::string arch = reader.get_string("general.architecture");
    const uint32_t all = reader.get_u32(arch + ".block_count");
    const uint32_t nextn = reader.get_u32_opt(arch + ".nextn_predict_layers").value_or(0);
    if (nextn >= all) throw Error(reader.path() + ": key " + arch + ".nextn_predict_layers: not below block_count");
    return all - nextn;
}

WeightBytes weight_bytes(const gguf::Reader & reader, uint32_t n_layers) {
    WeightBytes w;
    w.layer.assign(n_layers, 0);
    for (const gguf::TensorInfo & t : reader.tensors()) {
        uint32_t il = 0;
        if (t.name.rfind("blk.", 0) == 0) {
            const char * b = t.name.data() + 4;
            const char * e = t.name.data() + t.name.size();
            const auto [p, ec] = std::from_chars(b, e, il);
            if (ec == std::errc() && p < e && *p == '.' && il < n_layers) {
                w.layer[il] += t.n_bytes;
                continue;
            }
        }
        if (t.name.rfind("token_embd", 0) == 0) w.before += t.n_bytes;
        else w.after += t.n_bytes;
    }
    return w;
}

uint64_t rank_bytes(const WeightBytes & w, const Split & split, size_t rank) {
    const LayerRange & r = split.ranges.at(rank);
    uint64_t bytes = 0;
    for (uint32_t il = r.first; il < r.end; ++il) bytes += w.layer[il];
    if (rank == 0) bytes += w.before;
    if (rank + 1 == split.ranges.size()) bytes += w.after;
    return bytes;
}

Split auto_split(const WeightBytes & w, const std::vector<uint64_t> & capacity) {
    const size_t n = capacity.size();
    const uint32_t L = static_cast<uint32_t>(w.layer.size());
    if (n == 0) throw Error("--split auto: no ranks");
    if (L < n) throw Error("--split auto: " + std::to_string(L) + " layers cannot be shared by " + std::to_string(n) + " ranks");
    for (size_t r = 0; r < n; ++r) {
        if (capacity[r] == 0) throw Error("--split auto: rank " + std::to_string(r) + " reports no memory");
    }
    // Exact minimisation of max_r share_r / capacity_r over contiguous cuts: dynamic programming over
    // (ranks used, layers covered), in long double so that byte counts of any size compare exactly enough.
    using Load = long double;
    const Load inf = 1e300L;
    std::vector<uint64_t> prefix(L + 1, 0);
    for (uint32_t il = 0; il < L; ++il) prefix[il + 1] = prefix[il] + w.layer[il];
    auto share = [&](size_t r, uint32_t a, uint32_t b) {  // rank r holding layers [a, b)
        uint64_t bytes = prefix[b] - prefix[a];
        if (r == 0) bytes += w.before;
        if (r + 1 == n) bytes += w.after;
        return static_cast<Load>(bytes) / static_cast<Load>(capacity[r]);
    };
    // best[r][l]: the smallest worst load of ranks 0..r-1 covering layers [0, l); cut[r][l]: where rank r-1 began.
    std::vector<std::vector<Load>> best(n + 1, std::vector<Load>(L + 1, inf));
    std::vector<std::vector<uint32_t>> cut(n + 1, std::vector<uint32_t>(L + 1, 0));
    best[0][0] = 0;
    for (size_t r = 1; r <= n; ++r) {
        for (uint32_t l = static_cast<uint32_t>(r); l <= L; ++l) {
            for (uint32_t a = static_cast<uint32_t>(r - 1); a < l; ++a) {
                if (best[r - 1][a] >= inf) continue;
                const Load v = std::max(best[r - 1][a], share(r - 1, a, l));
                if (v < best[r][l]) {  // strict: the earliest cut wins ties, so the result is deterministic
                    best[r][l] = v;
                    cut[r][l] = a;
                }
            }
        }
    }
    Split split;
    split.ranges.resize(n);
    uint32_t end = L;
    for (size_t r = n; r >= 1; --r) {
        const uint32_t a = cut[r][end];
        split.ranges[r - 1] = {a, end};
        end = a;
    }
    return split;
}

std::string check_fits(const WeightBytes & w, const Split & split, const std::vector<uint64_t> & capacity) {
    for (size_t r = 0; r < split.ranges.size() && r < capacity.size(); ++r) {
        const uint64_t need = rank_bytes(w, split, r);
        if (capacity[r] != 0 && need > capacity[r]) return share_refusal(r, split.ranges[r], need, capacity[r]);
    }
    return {};
}

std::string share_refusal(size_t rank, const LayerRange & range, uint64_t need, uint64_t capacity) {
    return "rank " + std::to_string(rank) + " cannot hold its share: layers " + std::to_string(range.first) + "-" +
           std::to_string(range.end - 1) + " take " + std::to_string(need) + " bytes of weights, it has " +
           std::to_string(capacity) + " bytes";
}

}  // namespace offgrid::distributed
