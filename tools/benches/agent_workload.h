// The agent workload of `offgrid bench-serve --workload agent`: S concurrent sessions, each a conversation of T
// turns through /v1/chat/completions (streamed, greedy, ignore_eos). Every session starts with the same system
// prompt and its own task; each later turn sends back the previous reply as the assistant's message and adds a
// tool output. Lengths are in the server's own tokens: texts are sized with its /tokenize and /detokenize (both
// offgrid serve and llama-server have them), drawn from a seed, so two servers of the same model get the same
// conversations up to the replies they generate.
//
// Reports time to first token per turn (median over sessions; turn 2 against the last turn shows whether a
// growing conversation stays fast) and over all requests, output tokens/s over the wall time, and the fraction of
// prompt tokens the server reported as cached (usage.prompt_tokens_details.cached_tokens).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace offgrid::tools {

struct AgentConfig {
    std::string host = "127.0.0.1";
    int port = 8080;
    std::string model;  // empty: the first of /v1/models
    std::string api_key;
    int sessions = 8;
    int turns = 20;
    int system_tokens = 1500;
    int tool_min = 300, tool_max = 2000;   // tool output tokens, uniform in [min, max]
    int reply_min = 50, reply_max = 200;   // max_tokens of each turn, uniform in [min, max]
    uint64_t seed = 1;
    int timeout_s = 600;
};

struct AgentReport {
    int ok = 0, failed = 0;  // requests
    double wall_s = 0;
    double out_tok_per_s = 0;
    std::vector<double> ttft_median_ms;  // per turn (index 0: turn 1), over the sessions that got that far
    std::vector<double> prompt_median;   // per turn: median prompt tokens
    double ttft_median_all_ms = 0;       // over every request that succeeded, all turns and sessions
    int64_t prompt_tokens = 0, cached_tokens = 0, output_tokens = 0;
    int ttft_from_timings = 0;  // turns whose TTFT came from the server's `timings` (no text before the end)
    std::string first_error;
};

// Throws offgrid::Error when the server cannot be reached or lacks /tokenize and /detokenize.
AgentReport run_agent(const AgentConfig & cfg);
std::string agent_table(const AgentConfig & cfg, const AgentReport & r);
std::string agent_json(const AgentConfig & cfg, const AgentReport & r);

}  // namespace offgrid::tools
