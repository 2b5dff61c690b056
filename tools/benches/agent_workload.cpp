#include "benches/agent_workload.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "benches/load_gen.h"
#include "offgrid/error.h"

namespace offgrid::tools {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

int uniform(uint64_t & s, int lo, int hi) {
    if (hi <= lo) return lo;
    return lo + static_cast<int>(splitmix(s) % static_cast<uint64_t>(hi - lo + 1));
}

// Plain words a tool might print: plain ASCII, so a text cut to N tokens and sent back keeps about N tokens.
std::string word_text(uint64_t & s, size_t n_chars) {
    static const char * words[] = {"src", "file", "line", "error", "warning", "return", "value", "the", "function",
                                   "test", "passed", "failed", "build", "config", "path", "index", "module", "output",
                                   "result", "call", "json", "status", "found", "match", "open", "read", "write"};
    constexpr size_t n_words = sizeof(words) / sizeof(words[0]);
    std::string out;
    while (out.size() < n_chars) {
        const uint64_t r = splitmix(s);
        if (!out.empty()) out += (r & 15) == 0 ? "\n" : " ";
        out += words[(r >> 8) % n_words];
        if ((r >> 40) % 7 == 0) out += ":" + std::to_string((r >> 20) % 997);
    }
    return out;
}

struct Api {
    const AgentConfig & cfg;
    httplib::Headers headers() const {
        httplib::Headers h;
        if (!cfg.api_key.empty()) h.emplace("Authorization", "Bearer " + cfg.api_key);
        return h;
    }
    json post(const std::string & path, const json & body) const {
        httplib::Client cli(cfg.host, cfg.port);
        cli.set_read_timeout(cfg.timeout_s, 0);
        auto r = cli.Post(path.c_str(), headers(), body.dump(), "application/json");
        if (!r) throw Error(path + ": " + httplib::to_string(r.error()));
        if (r->status != 200) throw Error(path + ": HTTP " + std::to_string(r->status) + ": " + r->body);
        json j = json::parse(r->body, nullptr, false);
        if (j.is_discarded()) throw Error(path + ": the answer is not JSON");
        return j;
    }
    // A text of exactly `n` tokens of this server's tokenizer (as far as its detokenised text tokenises back the
    // same way, which plain ASCII words do).
    std::string text_of_tokens(uint64_t & s, int n) const {
        std::string text = word_text(s, static_cast<size_t>(n) * 8 + 16);
        json t = post("/tokenize", {{"content", text}, {"add_special", false}});
        if (!t.contains("tokens") || !t["tokens"].is_array()) throw Error("/tokenize: no 'tokens' in the answer");
        json ids = t["tokens"];
        if (ids.size() > static_cast<size_t>(n)) ids.erase(ids.begin() + n, ids.end());
        json d = post("/detokenize", {{"tokens", ids}});
        if (!d.contains("content") || !d["content"].is_string()) throw Error("/detokenize: no 'content' in the answer");
        return d["content"].get<std::string>();
    }
};

struct TurnSample {
    bool ok = false;
    std::string error;
    std::string reply;
    double ttft_ms = 0;
    bool ttft_from_timings = false;  // no token text arrived before the end (see one_turn)
    int64_t prompt = 0, cached = 0, output = 0;
};

TurnSample one_turn(const AgentConfig & cfg, const std::string & model, const json & messages, int max_tokens) {
    TurnSample out;
    json body = {{"model", model}, {"messages", messages}, {"max_tokens", max_tokens}, {"temperature", 0},
                 {"stream", true}, {"stream_options", {{"include_usage", true}}}, {"ignore_eos", true}};
    httplib::Client cli(cfg.host, cfg.port);
    cli.set_read_timeout(cfg.timeout_s, 0);
    cli.set_write_timeout(cfg.timeout_s, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    if (!cfg.api_key.empty()) req.set_header("Authorization", "Bearer " + cfg.api_key);
    int status = 0;
    std::string buf;
    bool done = false, first = true;
    double predicted_ms = -1;  // the server's own generation time (llama-server's `timings`), when it sends one
    const auto t0 = Clock::now();
    req.response_handler = [&](const httplib::Response & r) {
        status = r.status;
        return true;
    };
    req.content_receiver = [&](const char * data, size_t n, uint64_t, uint64_t) {
        buf.append(data, n);
        size_t at;
        while ((at = buf.find("\n\n")) != std::string::npos) {
            const std::string ev = buf.substr(0, at);
            buf.erase(0, at + 2);
            if (ev.rfind("data: ", 0) != 0) continue;
            const std::string payload = ev.substr(6);
            if (payload == "[DONE]") {
                done = true;
                continue;
            }
            json j = json::parse(payload, nullptr, false);
            if (j.is_discarded()) continue;
            if (j.contains("error")) {
                out.error = j["error"].is_object() ? j["error"].value("message", "error") : "error";
                continue;
            }
            if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
                const json & delta = j["choices"][0].value("delta", json::object());
                // A chunk with only the role (some servers send one before the first token) is not a token.
                if (delta.contains("content") && delta["content"].is_string()) {
                    if (first) {
                        out.ttft_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
                        first = false;
                    }
                    out.reply += delta["content"].get<std::string>();
                }
            }
            if (j.contains("timings") && j["timings"].is_object() && j["timings"].contains("predicted_ms") &&
                j["timings"]["predicted_ms"].is_number()) {
                predicted_ms = j["timings"]["predicted_ms"].get<double>();
            }
            if (j.contains("usage") && j["usage"].is_object()) {
                out.prompt = j["usage"].value("prompt_tokens", 0);
                out.output = j["usage"].value("completion_tokens", 0);
                const json & d = j["usage"].value("prompt_tokens_details", json::object());
                if (d.is_object()) out.cached = d.value("cached_tokens", 0);
            }
        }
        return true;
    };
    auto res = cli.send(req);
    // A server may hold back token text it cannot decode (llama-server does, for a generated vocabulary whose
    // pieces are not UTF-8): no content arrives before the end. Then the first token's time is the stream's end
    // less the server's own generation time after it, when the server reports one.
    if (first && predicted_ms >= 0 && out.output > 0) {
        out.ttft_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() - predicted_ms;
        out.ttft_from_timings = true;
    }
    if (!res) out.error = "request failed: " + httplib::to_string(res.error());
    else if (status != 200) out.error = "HTTP " + std::to_string(status) + ": " + res->body;
    else if (!done && out.error.empty()) out.error = "the stream ended without data: [DONE]";
    out.ok = out.error.empty();
    return out;
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

AgentReport run_agent(const AgentConfig & cfg) {
    const Api api{cfg};
    std::string model = cfg.model;
    {
        httplib::Client cli(cfg.host, cfg.port);
        cli.set_connection_timeout(5, 0);
        auto r = cli.Get("/v1/models", api.headers());
        if (!r) throw Error("cannot reach http://" + cfg.host + ":" + std::to_string(cfg.port) + " (" + httplib::to_string(r.error()) + ")");
        if (r->status != 200) throw Error("/v1/models: HTTP " + std::to_string(r->status) + ": " + r->body);
        if (model.empty()) {
            json j = json::parse(r->body, nullptr, false);
            if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty())
                throw Error("/v1/models lists no model");
            model = j["data"][0].value("id", "");
        }
    }
    // Every text is drawn before the clock starts: the tokenizer calls are not the server's work under test.
    uint64_t s = cfg.seed * 0x100000001B3ull + 17;
    const std::string system = "You are a coding agent. Tools: read, grep, build, test.\n" + api.text_of_tokens(s, cfg.system_tokens);
    struct Plan {
        std::string task;
        std::vector<std::string> tool;  // per turn from the second on
        std::vector<int> reply;         // max_tokens per turn
    };
    std::vector<Plan> plans(static_cast<size_t>(cfg.sessions));
    for (int k = 0; k < cfg.sessions; ++k) {
        Plan & p = plans[static_cast<size_t>(k)];
        uint64_t ks = cfg.seed * 1000003ull + static_cast<uint64_t>(k) * 7919ull + 1;
        p.task = "Task " + std::to_string(k) + ": " + word_text(ks, 200);
        for (int t = 0; t < cfg.turns; ++t) {
            p.reply.push_back(uniform(ks, cfg.reply_min, cfg.reply_max));
            if (t > 0) p.tool.push_back("<tool_response>\n" + api.text_of_tokens(ks, uniform(ks, cfg.tool_min, cfg.tool_max)) + "\n</tool_response>");
        }
    }

    std::vector<std::vector<TurnSample>> samples(static_cast<size_t>(cfg.sessions));
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int k = 0; k < cfg.sessions; ++k) {
        threads.emplace_back([&, k] {
            const Plan & p = plans[static_cast<size_t>(k)];
            json messages = json::array({{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", p.task}}});
            for (int t = 0; t < cfg.turns; ++t) {
                if (t > 0) messages.push_back({{"role", "user"}, {"content", p.tool[static_cast<size_t>(t - 1)]}});
                TurnSample ts = one_turn(cfg, model, messages, p.reply[static_cast<size_t>(t)]);
                const bool ok = ts.ok;
                messages.push_back({{"role", "assistant"}, {"content", ts.reply}});
                samples[static_cast<size_t>(k)].push_back(std::move(ts));
                if (!ok) break;  // the conversation cannot go on without its reply
            }
        });
    }
    for (auto & t : threads) t.join();
    AgentReport r;
    r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    for (int t = 0; t < cfg.turns; ++t) {
        std::vector<double> ttft, prompt;
        for (const auto & sess : samples) {
            if (static_cast<size_t>(t) >= sess.size() || !sess[static_cast<size_t>(t)].ok) continue;
            ttft.push_back(sess[static_cast<size_t>(t)].ttft_ms);
            if (sess[static_cast<size_t>(t)].ttft_from_timings) ++r.ttft_from_timings;
            prompt.push_back(static_cast<double>(sess[static_cast<size_t>(t)].prompt));
        }
        r.ttft_median_ms.push_back(median(ttft));
        r.prompt_median.push_back(median(prompt));
    }
    std::vector<double> ttft_all;
    for (const auto & sess : samples)
        for (const auto & ts : sess) {
            if (!ts.ok) {
                ++r.failed;
                if (r.first_error.empty()) r.first_error = ts.error;
                continue;
            }
            ++r.ok;
            ttft_all.push_back(ts.ttft_ms);
            r.prompt_tokens += ts.prompt;
            r.cached_tokens += ts.cached;
            r.output_tokens += ts.output;
        }
    r.ttft_median_all_ms = median(ttft_all);
    r.out_tok_per_s = static_cast<double>(r.output_tokens) / r.wall_s;
    return r;
}

namespace {

double cached_fraction(const AgentReport & r) {
    return r.prompt_tokens ? static_cast<double>(r.cached_tokens) / static_cast<double>(r.prompt_tokens) : 0.0;
}

double turn_ttft(const AgentReport & r, size_t turn) {  // turn from 1
    return turn >= 1 && turn <= r.ttft_median_ms.size() ? r.ttft_median_ms[turn - 1] : 0.0;
}

}  // namespace

std::string agent_table(const AgentConfig & cfg, const AgentReport & r) {
    const double second = turn_ttft(r, 2), last = turn_ttft(r, static_cast<size_t>(cfg.turns));
    char buf[1024];
    std::snprintf(buf, sizeof(buf),
                  "bench-serve agent: http://%s:%d, %d sessions x %d turns, system prompt %d tokens, tool outputs %d-%d, "
                  "replies %d-%d, seed %llu\n"
                  "| metric | value |\n|---|---|\n"
                  "| requests ok / failed | %d / %d |\n"
                  "| wall time | %.2f s |\n"
                  "| output tokens/s | %.1f |\n"
                  "| TTFT median, all requests | %.1f ms |\n"
                  "| TTFT median turn 2 / turn %d | %.1f / %.1f ms (%.2fx) |\n"
                  "| prompt tokens cached | %lld of %lld (%.1f%%) |\n",
                  cfg.host.c_str(), cfg.port, cfg.sessions, cfg.turns, cfg.system_tokens, cfg.tool_min, cfg.tool_max,
                  cfg.reply_min, cfg.reply_max, static_cast<unsigned long long>(cfg.seed), r.ok, r.failed, r.wall_s,
                  r.out_tok_per_s, r.ttft_median_all_ms, cfg.turns, second, last, second > 0 ? last / second : 0.0,
                  static_cast<long long>(r.cached_tokens), static_cast<long long>(r.prompt_tokens), 100.0 * cached_fraction(r));
    std::string out = buf;
    out += "\n| turn | prompt tokens (median) | TTFT median |\n|---:|---:|---:|\n";
    for (size_t t = 0; t < r.ttft_median_ms.size(); ++t) {
        std::snprintf(buf, sizeof(buf), "| %zu | %.0f | %.1f ms |\n", t + 1, r.prompt_median[t], r.ttft_median_ms[t]);
        out += buf;
    }
    if (r.ttft_from_timings > 0) {
        std::snprintf(buf, sizeof(buf),
                      "%d of the turns' TTFT: the stream's end less the server's reported generation time (no token "
                      "text arrived before the end)\n",
                      r.ttft_from_timings);
        out += buf;
    }
    if (!r.first_error.empty()) out += "first error: " + r.first_error + "\n";
    return out;
}

std::string agent_json(const AgentConfig & cfg, const AgentReport & r) {
    json j = {{"url", "http://" + cfg.host + ":" + std::to_string(cfg.port)},
              {"workload", "agent"}, {"sessions", cfg.sessions}, {"turns", cfg.turns},
              {"system_tokens", cfg.system_tokens}, {"tool_tokens", {cfg.tool_min, cfg.tool_max}},
              {"reply_tokens", {cfg.reply_min, cfg.reply_max}}, {"seed", cfg.seed},
              {"ok", r.ok}, {"failed", r.failed}, {"wall_s", r.wall_s}, {"output_tokens_per_s", r.out_tok_per_s},
              {"ttft_median_ms", r.ttft_median_all_ms}, {"ttft_median_ms_per_turn", r.ttft_median_ms},
              {"prompt_tokens_median_per_turn", r.prompt_median},
              {"ttft_turn2_ms", turn_ttft(r, 2)}, {"ttft_last_turn_ms", turn_ttft(r, static_cast<size_t>(cfg.turns))},
              {"prompt_tokens_total", r.prompt_tokens}, {"cached_tokens_total", r.cached_tokens},
              {"output_tokens_total", r.output_tokens}, {"cached_fraction", cached_fraction(r)}};
    j["ttft_from_server_timings"] = r.ttft_from_timings;
    if (!r.first_error.empty()) j["first_error"] = r.first_error;
    return j.dump(2) + "\n";
}

}  // namespace offgrid::tools
