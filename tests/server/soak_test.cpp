// A short run of scripts/soak_serve.py against the tiny model: the agent workload beside clients that vanish
// mid-stream, half-open connections and bodies that must be refused, with /health sampled every second. Every
// well-formed request completes, every refusal has its status, /health always answers, the server exits cleanly.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "server_helpers.h"

namespace offgrid::test {
namespace {

TEST(Soak, AgentWorkloadBesideFaultsForTwelveSeconds) {
    const char * python = "/usr/bin/python3";
    if (!fs::exists(python)) GTEST_SKIP() << python << " is not installed";
    const std::string cmd = std::string(python) + " " + OFFGRID_SOURCE_DIR + "/scripts/soak_serve.py --binary " + OFFGRID_BINARY +
                            " --model " + (work_dir() / "tiny.gguf").string() +
                            " --duration 12 --sessions 2 --turns 3 --system-tokens 100 --tool-tokens 20,60"
                            " --reply-tokens 4,8 --vanishers 1 --idle 16 --rss-growth-mb 256"
                            " -- -np 2 -c 4096 -t 1 --cache-ram 32 2>&1";
    std::string out;
    FILE * p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    const int st = ::pclose(p);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
    const json j = json::parse(out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << out;
    EXPECT_TRUE(j["problems"].empty()) << out;
    EXPECT_GT(j["agent_requests_ok"].get<int>(), 0) << out;
    EXPECT_EQ(j["agent_requests_failed"], 0) << out;
    EXPECT_GT(j["vanished"].get<int>(), 0) << out;
    EXPECT_GT(j["refusals"].get<int>(), 0) << out;
    EXPECT_EQ(j["unexpected_status"], 0) << out;
    EXPECT_GE(j["health_ok"].get<int>(), 8) << out;
    EXPECT_EQ(j["health_failed"], 0) << out;
    EXPECT_EQ(j["requests_failed_metric"], 0) << out;
    EXPECT_EQ(j["server_exit"], 0) << out;
}

}  // namespace
}  // namespace offgrid::test
