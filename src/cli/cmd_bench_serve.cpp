// `offgrid bench-serve`: a load generator for an OpenAI-compatible server (offgrid serve, llama-server, ...).
#include <cstdio>
#include <tuple>
#include <utility>

#include "command.h"
#include "offgrid/error.h"
#include "args/cli_args.h"
#include "benches/agent_workload.h"
#include "benches/load_gen.h"

namespace offgrid::cli {

namespace {

constexpr const char * kUsage =
    "usage: offgrid bench-serve [--url http://127.0.0.1:8080] [-c CLIENTS] [-n REQUESTS] [options]\n"
    "\n"
    "CLIENTS threads send REQUESTS streamed /v1/completions requests in all (greedy, ignore_eos, prompts of token\n"
    "ids) and print requests/s, output tokens/s, time to first token (TTFT) and inter-token latency (ITL) p50 / p90\n"
    "/ p99, and the prefix cache's hit rate (usage.prompt_tokens_details.cached_tokens).\n"
    "\n"
    "  --url URL             server (http://HOST:PORT; default http://127.0.0.1:8080)\n"
    "  -c, --clients N       concurrent clients (default 1)\n"
    "  -n, --requests N      requests in all (default 16)\n"
    "  -p, --prompt-tokens N prompt tokens after the shared prefix, distinct per request (default 64)\n"
    "  --shared-prefix N     tokens every prompt starts with (default 0)\n"
    "  --max-tokens N        tokens generated per request (default 64)\n"
    "  --model NAME          model id (default: the first of /v1/models)\n"
    "  --api-key KEY         sent as 'Authorization: Bearer KEY'\n"
    "  --seed N              prompt seed (default 1)\n"
    "  --json                JSON instead of the table\n"
    "\n"
    "--workload agent: CLIENTS sessions (default 8) of streamed /v1/chat/completions conversations, greedy and\n"
    "ignore_eos, each turn sending back the previous reply and a tool output; prints TTFT per turn (median over the\n"
    "sessions), output tokens/s and the cached fraction of prompt tokens. Lengths are in the server's tokens (sized\n"
    "with its /tokenize and /detokenize, which llama-server has too).\n"
    "  --workload W          completions (default) or agent\n"
    "  --turns N             turns per session (default 20)\n"
    "  --system-tokens N     shared system prompt (default 1500)\n"
    "  --tool-tokens MIN,MAX tool output per turn (default 300,2000)\n"
    "  --reply-tokens MIN,MAX max_tokens per turn (default 50,200)\n";

// "MIN,MAX" with 1 <= MIN <= MAX.
std::pair<int, int> parse_range(const std::string & flag, const std::string & text) {
    const size_t comma = text.find(',');
    if (comma == std::string::npos) throw tools::UsageError(flag + ": give MIN,MAX (e.g. 300,2000), got '" + text + "'");
    const int64_t lo = tools::parse_integer(flag + " MIN", text.substr(0, comma), 1, 1 << 20);
    const int64_t hi = tools::parse_integer(flag + " MAX", text.substr(comma + 1), 1, 1 << 20);
    if (lo > hi) throw tools::UsageError(flag + ": MIN " + std::to_string(lo) + " is above MAX " + std::to_string(hi));
    return {static_cast<int>(lo), static_cast<int>(hi)};
}

int bench_serve_main(const std::vector<std::string> & args) {
    return tools::run_with_usage("bench-serve", [&]() -> int {
        std::string url = "http://127.0.0.1:8080";
        tools::LoadConfig cfg;
        int64_t clients = 0, requests = 16, prompt = 64, shared = 0, max_tokens = 64, seed = 1;
        int64_t turns = 20, system_tokens = 1500;
        std::string workload = "completions", tool_range = "300,2000", reply_range = "50,200";
        bool as_json = false;
        tools::ArgParser p;
        p.text({"--url"}, &url);
        p.integer({"-c", "--clients"}, &clients, 1, 1024);
        p.text({"--workload"}, &workload);
        p.integer({"--turns"}, &turns, 1, 10000);
        p.integer({"--system-tokens"}, &system_tokens, 1, 1 << 20);
        p.text({"--tool-tokens"}, &tool_range);
        p.text({"--reply-tokens"}, &reply_range);
        p.integer({"-n", "--requests"}, &requests, 1, 1 << 20);
        p.integer({"-p", "--prompt-tokens"}, &prompt, 1, 1 << 20);
        p.integer({"--shared-prefix"}, &shared, 0, 1 << 20);
        p.integer({"--max-tokens"}, &max_tokens, 1, 1 << 20);
        p.text({"--model"}, &cfg.model);
        p.text({"--api-key"}, &cfg.api_key);
        p.integer({"--seed"}, &seed, 0, INT64_MAX);
        p.flag({"--json"}, &as_json);
        if (!p.parse(args)) {
            std::fputs(kUsage, stdout);
            return 0;
        }
        std::string rest = url;
        if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
        else if (rest.find("://") != std::string::npos) throw tools::UsageError("--url: only http:// is supported");
        while (!rest.empty() && rest.back() == '/') rest.pop_back();
        const size_t colon = rest.rfind(':');
        if (colon == std::string::npos) throw tools::UsageError("--url: give http://HOST:PORT");
        cfg.host = rest.substr(0, colon);
        cfg.port = static_cast<int>(tools::parse_integer("--url port", rest.substr(colon + 1), 1, 65535));
        if (workload == "agent") {
            tools::AgentConfig ac;
            ac.host = cfg.host;
            ac.port = cfg.port;
            ac.model = cfg.model;
            ac.api_key = cfg.api_key;
            ac.sessions = clients > 0 ? static_cast<int>(clients) : 8;
            ac.turns = static_cast<int>(turns);
            ac.system_tokens = static_cast<int>(system_tokens);
            std::tie(ac.tool_min, ac.tool_max) = parse_range("--tool-tokens", tool_range);
            std::tie(ac.reply_min, ac.reply_max) = parse_range("--reply-tokens", reply_range);
            ac.seed = static_cast<uint64_t>(seed);
            const tools::AgentReport r = tools::run_agent(ac);
            std::fputs((as_json ? tools::agent_json(ac, r) : tools::agent_table(ac, r)).c_str(), stdout);
            return r.failed == 0 ? 0 : 1;
        }
        if (workload != "completions") throw tools::UsageError("--workload: completions or agent, got '" + workload + "'");
        cfg.clients = clients > 0 ? static_cast<int>(clients) : 1;
        cfg.requests = static_cast<int>(requests);
        cfg.prompt_tokens = static_cast<int>(prompt);
        cfg.shared_prefix = static_cast<int>(shared);
        cfg.max_tokens = static_cast<int>(max_tokens);
        cfg.seed = static_cast<uint64_t>(seed);
        const tools::LoadReport r = tools::run_load(cfg);
        std::fputs((as_json ? tools::report_json(cfg, r) : tools::report_table(cfg, r)).c_str(), stdout);
        return r.failed == 0 ? 0 : 1;
    });
}

}  // namespace

OFFGRID_COMMAND("bench-serve", "load generator for an OpenAI-compatible server (TTFT, ITL, tokens/s)", bench_serve_main);

}  // namespace offgrid::cli
