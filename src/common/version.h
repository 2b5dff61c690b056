// The version is part of the public API (offgrid/version.h).
#pragma once

#include "offgrid/version.h"
