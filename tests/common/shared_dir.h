// Where the tests find ../shared (golden models, spec data). Tests that need it call OFFGRID_REQUIRE_SHARED(),
// which skips them with a clear message on a fresh clone that has no ../shared beside it.
#pragma once

#include <filesystem>
#include <string>

namespace offgrid::test {

inline std::string shared_dir() { return OFFGRID_SHARED_DIR; }
inline bool have_shared() { return std::filesystem::exists(std::string(OFFGRID_SHARED_DIR) + "/golden"); }

}  // namespace offgrid::test

#define OFFGRID_REQUIRE_SHARED()                                                                  \
    do {                                                                                          \
        if (!::offgrid::test::have_shared())                                                      \
            GTEST_SKIP() << "../shared is absent (" OFFGRID_SHARED_DIR "): golden data not available"; \
    } while (0)
