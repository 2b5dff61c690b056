// Sliding-window attention (memory.md 3.5, 3.6): which cached keys a query may still see. A window is a property
// of an attention cache: the plan's visibility honours it, and the slot search may reuse a cell whose key no
// future query of its sequence can see.
//
// A model without a window keeps the default (None), which changes nothing.
#pragma once

#include <cstdint>
#include <string>

#include "memory/plan.h"

namespace offgrid::memory {

enum class WindowType : uint32_t {
    None = 0,       // every earlier key is visible
    Standard = 1,   // the last n_swa positions, the query's own included
    Chunked = 2,    // keys in the query's chunk of n_swa positions
    Symmetric = 3,  // keys within n_swa / 2 positions either side
};

struct Window {
    WindowType type = WindowType::None;
    uint32_t n_swa = 0;

    bool active() const { return type != WindowType::None; }
    // True when a key at position `key` is outside the window of a query at position `query`.
    bool masked(Pos key, Pos query) const;
    // The lowest key position a query at `query` sees: the visible keys at or before it are exactly those in
    // [lowest_visible(query), query]. Without a window: the lowest position there is.
    Pos lowest_visible(Pos query) const;
    // Throws offgrid::Error naming the field when the window cannot work (unknown type, n_swa 0 with a window).
    void check() const;
    std::string describe() const;  // "none", "standard(32)", ...
};

}  // namespace offgrid::memory
