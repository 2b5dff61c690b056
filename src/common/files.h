// Atomic file writes and whole-file reads are part of the public API (offgrid/files.h); internal code includes
// them here.
#pragma once

#include "offgrid/files.h"
