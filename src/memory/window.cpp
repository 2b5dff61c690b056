#include "memory/window.h"

#include <algorithm>
#include <limits>

#include "common/error.h"

namespace offgrid::memory {

bool Window::masked(Pos key, Pos query) const {
    const int64_t k = key, q = query, n = n_swa;
    switch (type) {
        case WindowType::None: return false;
        case WindowType::Standard: return q - k >= n;
        case WindowType::Chunked: return q >= 0 && k < q / n * n;  // positions are never negative here
        case WindowType::Symmetric: return (q > k ? q - k : k - q) > n / 2;
    }
    return false;
}

Pos Window::lowest_visible(Pos query) const {
    const int64_t q = query, n = n_swa;
    int64_t lo = std::numeric_limits<Pos>::min();
    switch (type) {
        case WindowType::None: break;
        case WindowType::Standard: lo = q - n + 1; break;
        case WindowType::Chunked: lo = q >= 0 ? q / n * n : lo; break;
        case WindowType::Symmetric: lo = q - n / 2; break;
    }
    return (Pos)std::max<int64_t>(lo, std::numeric_limits<Pos>::min());
}

void Window::check() const {
    if ((uint32_t)type > (uint32_t)WindowType::Symmetric)
        throw Error("window.type: unknown window type " + std::to_string((uint32_t)type));
    if (active() && n_swa == 0) throw Error("window.n_swa: a " + describe() + " window needs n_swa >= 1");
}

std::string Window::describe() const {
    std::string n = "(";  // built by appends: GCC 12 warns (-Wrestrict, falsely) on "(" + std::string
    n += std::to_string(n_swa);
    n += ')';
    switch (type) {
        case WindowType::None: return "none";
        case WindowType::Standard: return "standard" + n;
        case WindowType::Chunked: return "chunked" + n;
        case WindowType::Symmetric: return "symmetric" + n;
    }
    return "type " + std::to_string((uint32_t)type);
}

}  // namespace offgrid::memory
