// The public machine queries (offgrid/system.h).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "offgrid/context.h"
#include "offgrid/error.h"
#include "offgrid/system.h"

TEST(System, IsaNamesAreKnownLevels) {
    const std::set<std::string> levels{"scalar", "avx2", "avx512", "amx", "neon", "neondot"};
    EXPECT_EQ(levels.count(offgrid::active_isa_name()), 1u) << offgrid::active_isa_name();
    EXPECT_EQ(levels.count(offgrid::detected_isa_name()), 1u) << offgrid::detected_isa_name();
}

TEST(System, ReadBandwidthReportsWhatItMeasured) {
    for (const int threads : {1, 2}) {
        const offgrid::ReadBandwidth bw = offgrid::measure_read_bandwidth(threads, size_t(1) << 20, 2);
        EXPECT_GT(bw.bytes_per_second, 0.0);
        EXPECT_EQ(bw.buffer_bytes, size_t(1) << 20);
        EXPECT_EQ(bw.threads, threads);
        EXPECT_EQ(bw.rounds, 2);
    }
    EXPECT_THROW(offgrid::measure_read_bandwidth(offgrid::kMaxThreads + 1, 4096, 1), offgrid::Error);
}

// The activation mode is one per process: asking for the mode in effect is fine, another one once it is fixed
// (here by the first call) is refused, and so is a name that is not a mode.
TEST(System, ActivationModeIsFixedOncePerProcess) {
    const std::string mode = offgrid::activation_mode_name();
    EXPECT_TRUE(mode == "int16" || mode == "int8" || mode == "f32") << mode;
    EXPECT_NO_THROW(offgrid::set_activation_mode(mode.c_str()));
    const char * other = mode == "int16" ? "int8" : "int16";
    EXPECT_THROW(offgrid::set_activation_mode(other), offgrid::Error);
    EXPECT_THROW(offgrid::set_activation_mode("int4"), offgrid::Error);
    EXPECT_THROW(offgrid::set_activation_mode(nullptr), offgrid::Error);
    EXPECT_EQ(offgrid::activation_mode_name(), mode);
}
