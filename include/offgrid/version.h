// The library's version, "MAJOR.MINOR.PATCH" (the CMake project version).
//
// Thread safety: a constant string; callable from any thread.
#pragma once

namespace offgrid {
const char * version_string();
}
