// `bench-serve --workload agent` with tiny numbers against a real server: every turn of every session completes,
// conversations grow turn by turn, and later turns are served mostly from the prefix cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <regex>

#include "server_helpers.h"

namespace offgrid::test {
namespace {

std::string run(const std::string & cmd, int & status) {
    std::string out;
    FILE * p = ::popen(cmd.c_str(), "r");
    if (!p) {
        status = -1;
        return out;
    }
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    const int st = ::pclose(p);
    status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

TEST(AgentWorkload, SmallSessionsCompleteAndReuseTheirEarlierTurns) {
    ServerProcess s({"-np", "2", "-c", "4096", "-b", "64", "-t", "2", "--quiet"}, "agent");
    const std::string cmd = std::string(OFFGRID_BINARY) + " bench-serve --url http://127.0.0.1:" + std::to_string(s.port()) +
                            " --workload agent -c 3 --turns 4 --system-tokens 120 --tool-tokens 20,60 --reply-tokens 3,9"
                            " --seed 5 --json";
    int status = 0;
    const std::string out = run(cmd, status);
    EXPECT_EQ(status, 0) << out;
    const json j = json::parse(out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << out;
    EXPECT_EQ(j["ok"], 12) << out;
    EXPECT_EQ(j["failed"], 0) << out;
    ASSERT_EQ(j["ttft_median_ms_per_turn"].size(), 4u);
    for (const auto & t : j["ttft_median_ms_per_turn"]) EXPECT_GT(t.get<double>(), 0);
    // The median of all 12 requests lies between the turns' medians (each turn's is the middle of 3 sessions, so
    // at least 8 of the 12 are on either side of the lowest and the highest).
    double lo = 1e300, hi = 0;
    for (const auto & t : j["ttft_median_ms_per_turn"]) {
        lo = std::min(lo, t.get<double>());
        hi = std::max(hi, t.get<double>());
    }
    EXPECT_GE(j["ttft_median_ms"].get<double>(), lo) << out;
    EXPECT_LE(j["ttft_median_ms"].get<double>(), hi) << out;
    const auto & prompts = j["prompt_tokens_median_per_turn"];
    // The system prompt alone is 120 tokens; each turn adds a reply and a tool output of at least 20.
    EXPECT_GT(prompts[0].get<double>(), 120);
    for (size_t t = 1; t < prompts.size(); ++t) EXPECT_GT(prompts[t].get<double>(), prompts[t - 1].get<double>() + 20);
    // Turns 2..4 restore at least the previous turn's prompt; the first turns of the later sessions the system
    // prompt: well over half of all prompt tokens.
    EXPECT_GT(j["cached_fraction"].get<double>(), 0.5) << out;
    EXPECT_EQ(metric(s, "requests_failed_total"), 0);
    // The cache's bytes by kind add up to its bytes; the rows are there, and so is a fixed part per snapshot.
    auto c = s.client();
    auto m = c.Get("/metrics");
    ASSERT_TRUE(m);
    double kinds = 0;
    std::map<std::string, double> by_kind;
    const std::regex re("\\noffgrid_prefix_cache_kind_bytes\\{kind=\"([a-z]+)\"\\} ([0-9.e+-]+)");
    for (std::sregex_iterator it(m->body.begin(), m->body.end(), re), end; it != end; ++it) {
        by_kind[(*it)[1]] = std::stod((*it)[2]);
        kinds += std::stod((*it)[2]);
    }
    ASSERT_EQ(by_kind.size(), 3u) << m->body;
    EXPECT_GT(by_kind["rows"], 0);
    EXPECT_GT(by_kind["state"], 0);
    EXPECT_GT(by_kind["logits"], 0);
    EXPECT_EQ(kinds, metric(s, "prefix_cache_bytes"));
    EXPECT_EQ(s.stop(), 0);
}

TEST(AgentWorkload, BadRangesAreUsageErrors) {
    int status = 0;
    const std::string out = run(std::string(OFFGRID_BINARY) + " bench-serve --workload agent --tool-tokens 50,10 2>&1", status);
    EXPECT_NE(status, 0);
    EXPECT_NE(out.find("--tool-tokens"), std::string::npos) << out;
    run(std::string(OFFGRID_BINARY) + " bench-serve --workload nonsense 2>&1", status);
    EXPECT_NE(status, 0);
}

}  // namespace
}  // namespace offgrid::test
