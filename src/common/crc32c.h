// The CRC-32C checksum is part of the public API (offgrid/crc32c.h); internal code includes it here.
#pragma once

#include "offgrid/crc32c.h"
