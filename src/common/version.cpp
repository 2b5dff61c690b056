#include "common/version.h"

namespace offgrid {
const char * version_string() { return "0.1.0"; }
}
