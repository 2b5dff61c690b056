// The library's version, "MAJOR.MINOR.PATCH" (the CMake project version).
#pragma once

namespace offgrid {
const char * version_string();
}
