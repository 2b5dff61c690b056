// What the engine's own tools (not the public API) may reach inside a Context: its hybrid memory, e.g. to move
// cache rows between the processes of a layer pipeline (src/distributed/). The memory's rules still hold: no
// call in progress while it is used, and every change keeps its invariants.
#pragma once

#include "memory/hybrid_memory.h"
#include "offgrid/context.h"

namespace offgrid::runtime {

struct ContextAccess {
    static memory::HybridMemory & memory(Context & ctx);
};

}  // namespace offgrid::runtime
