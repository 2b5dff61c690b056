// The load generator behind `offgrid bench-serve`: C client threads send N streamed /v1/completions requests (token-id
// prompts, so their length is exact on any model; an optional shared prefix) and time every chunk. Reports
// requests/s, output tokens/s, time to first token and inter-token latency percentiles, and the prefix cache's hit
// rate from the responses' usage.prompt_tokens_details.cached_tokens.
#pragma once

#include <cstdint>
#include <string>

namespace offgrid::tools {

// splitmix64: the prompts' seeded token and length draws (load generator and agent workload).
uint64_t splitmix(uint64_t & state);

struct LoadConfig {
    std::string host = "127.0.0.1";
    int port = 8080;
    std::string model;          // empty: the first of /v1/models
    std::string api_key;
    int clients = 1;
    int requests = 16;
    int prompt_tokens = 64;     // tokens after the shared prefix
    int shared_prefix = 0;      // tokens every prompt starts with
    int max_tokens = 64;
    int token_range = 256;      // prompt token ids are drawn from [0, token_range)
    uint64_t seed = 1;
    int timeout_s = 600;
};

struct LoadReport {
    int ok = 0, failed = 0;
    double wall_s = 0;
    double req_per_s = 0, out_tok_per_s = 0;
    double ttft_ms[3] = {0, 0, 0};  // p50, p90, p99
    double itl_ms[3] = {0, 0, 0};
    int64_t prompt_tokens = 0, cached_tokens = 0, output_tokens = 0;
    int hits = 0;                   // requests with cached_tokens > 0
    std::string first_error;
};

// Throws offgrid::Error when the server cannot be reached at all.
LoadReport run_load(const LoadConfig & cfg);
std::string report_table(const LoadConfig & cfg, const LoadReport & r);
std::string report_json(const LoadConfig & cfg, const LoadReport & r);

}  // namespace offgrid::tools
