// The GGUF metadata values are part of the public API (offgrid/gguf.h); internal code includes them here.
#pragma once

#include "offgrid/gguf.h"
