// One forward outside a context (tests, tools, benches): checks the plan as the runtime does, sizes a workspace
// for this plan alone and returns the rows in vectors. A context keeps its workspace instead (runtime/context.cpp).
#pragma once

#include "memory/plan.h"
#include "model/architecture.h"
#include "ops/thread_pool.h"

namespace offgrid::model {

// Throws offgrid::Error for a plan the model cannot run (memory::check_plan) or what the forward throws.
ForwardResult forward_once(const Architecture & model, const memory::CacheShape & shape, const memory::Plan & plan,
                           memory::Storage & storage, ops::ThreadPool * pool, const ForwardOptions & options);

}  // namespace offgrid::model
