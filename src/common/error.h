// The project's exception types are part of the public API (offgrid/error.h); internal code includes them here.
#pragma once

#include "offgrid/error.h"
