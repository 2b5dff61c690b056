#pragma once

namespace offgrid {
const char * version_string();
}
