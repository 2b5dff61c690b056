#include "benches/load_gen.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "offgrid/error.h"

namespace offgrid::tools {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

uint64_t splitmix(uint64_t & s) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

namespace {

std::vector<int32_t> make_prompt(const LoadConfig & cfg, int index) {
    std::vector<int32_t> ids;
    uint64_t s = cfg.seed;
    for (int i = 0; i < cfg.shared_prefix; ++i) ids.push_back(static_cast<int32_t>(splitmix(s) % static_cast<uint64_t>(cfg.token_range)));
    s = cfg.seed * 1000003ull + static_cast<uint64_t>(index) + 1;
    for (int i = 0; i < cfg.prompt_tokens; ++i) ids.push_back(static_cast<int32_t>(splitmix(s) % static_cast<uint64_t>(cfg.token_range)));
    return ids;
}

struct Sample {
    bool ok = false;
    std::string error;
    double ttft_ms = 0;
    std::vector<double> itl_ms;
    int64_t prompt = 0, cached = 0, output = 0;
};

Sample one_request(httplib::Client & cli, const LoadConfig & cfg, const std::string & model, int index) {
    Sample out;
    json body = {{"model", model}, {"prompt", make_prompt(cfg, index)}, {"max_tokens", cfg.max_tokens},
                 {"temperature", 0}, {"stream", true}, {"stream_options", {{"include_usage", true}}}, {"ignore_eos", true}};
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    if (!cfg.api_key.empty()) req.set_header("Authorization", "Bearer " + cfg.api_key);
    int status = 0;
    std::string buf;
    bool done = false;
    const auto t0 = Clock::now();
    auto last = t0;
    bool first = true;
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
            if (ev.rfind("data: ", 0) != 0) continue;  // comments (keep-alives)
            const std::string payload = ev.substr(6);
            if (payload == "[DONE]") {
                done = true;
                continue;
            }
            json j = json::parse(payload, nullptr, false);
            if (j.is_discarded()) continue;
            if (j.contains("error")) {
                out.error = j["error"].value("message", "error");
                continue;
            }
            if (j.contains("choices") && !j["choices"].empty()) {
                const auto now = Clock::now();
                if (first) {
                    out.ttft_ms = std::chrono::duration<double, std::milli>(now - t0).count();
                    first = false;
                } else {
                    out.itl_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
                }
                last = now;
            }
            if (j.contains("usage") && j["usage"].is_object()) {
                out.prompt = j["usage"].value("prompt_tokens", 0);
                out.output = j["usage"].value("completion_tokens", 0);
                if (j["usage"].contains("prompt_tokens_details")) out.cached = j["usage"]["prompt_tokens_details"].value("cached_tokens", 0);
            }
        }
        return true;
    };
    auto res = cli.send(req);
    if (!res) {
        out.error = "request failed: " + httplib::to_string(res.error());
    } else if (status != 200) {
        out.error = "HTTP " + std::to_string(status) + ": " + res->body;
    } else if (!done && out.error.empty()) {
        out.error = "the stream ended without data: [DONE]";
    }
    out.ok = out.error.empty();
    return out;
}

void percentiles(std::vector<double> v, double out[3]) {
    if (v.empty()) return;
    std::sort(v.begin(), v.end());
    const double ps[3] = {0.50, 0.90, 0.99};
    for (int i = 0; i < 3; ++i) {
        size_t k = static_cast<size_t>(ps[i] * static_cast<double>(v.size()) + 0.999999);  // nearest rank
        k = std::clamp<size_t>(k, 1, v.size());
        out[i] = v[k - 1];
    }
}

}  // namespace

LoadReport run_load(const LoadConfig & cfg) {
    std::string model = cfg.model;
    {
        httplib::Client cli(cfg.host, cfg.port);
        cli.set_connection_timeout(5, 0);
        httplib::Headers h;
        if (!cfg.api_key.empty()) h.emplace("Authorization", "Bearer " + cfg.api_key);
        auto r = cli.Get("/v1/models", h);
        if (!r) throw Error("cannot reach http://" + cfg.host + ":" + std::to_string(cfg.port) + " (" + httplib::to_string(r.error()) + ")");
        if (r->status != 200) throw Error("/v1/models: HTTP " + std::to_string(r->status) + ": " + r->body);
        if (model.empty()) {
            json j = json::parse(r->body, nullptr, false);
            if (j.is_discarded() || !j.contains("data") || j["data"].empty()) throw Error("/v1/models lists no model");
            model = j["data"][0].value("id", "");
        }
    }
    std::vector<Sample> samples(static_cast<size_t>(cfg.requests));
    std::atomic<int> next{0};
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int c = 0; c < cfg.clients; ++c) {
        threads.emplace_back([&] {
            httplib::Client cli(cfg.host, cfg.port);
            cli.set_read_timeout(cfg.timeout_s, 0);
            cli.set_write_timeout(cfg.timeout_s, 0);
            cli.set_keep_alive(false);  // a fresh connection per request: servers differ in how long they keep one
            for (int i; (i = next++) < cfg.requests;) samples[static_cast<size_t>(i)] = one_request(cli, cfg, model, i);
        });
    }
    for (auto & t : threads) t.join();
    LoadReport r;
    r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::vector<double> ttft, itl;
    for (const auto & s : samples) {
        if (!s.ok) {
            ++r.failed;
            if (r.first_error.empty()) r.first_error = s.error;
            continue;
        }
        ++r.ok;
        ttft.push_back(s.ttft_ms);
        itl.insert(itl.end(), s.itl_ms.begin(), s.itl_ms.end());
        r.prompt_tokens += s.prompt;
        r.cached_tokens += s.cached;
        r.output_tokens += s.output;
        if (s.cached > 0) ++r.hits;
    }
    r.req_per_s = r.ok / r.wall_s;
    r.out_tok_per_s = static_cast<double>(r.output_tokens) / r.wall_s;
    percentiles(ttft, r.ttft_ms);
    percentiles(itl, r.itl_ms);
    return r;
}

std::string report_table(const LoadConfig & cfg, const LoadReport & r) {
    char buf[2048];
    std::snprintf(buf, sizeof(buf),
                  "bench-serve: http://%s:%d, %d clients, %d requests, prompt %d tokens (shared prefix %d), max_tokens %d\n"
                  "| metric | value |\n|---|---|\n"
                  "| requests ok / failed | %d / %d |\n"
                  "| wall time | %.2f s |\n"
                  "| requests/s | %.2f |\n"
                  "| output tokens/s | %.1f |\n"
                  "| TTFT p50 / p90 / p99 | %.1f / %.1f / %.1f ms |\n"
                  "| ITL p50 / p90 / p99 | %.1f / %.1f / %.1f ms |\n"
                  "| prompt tokens cached | %lld of %lld (%.1f%%) |\n"
                  "| requests with a cache hit | %d of %d |\n",
                  cfg.host.c_str(), cfg.port, cfg.clients, cfg.requests, cfg.prompt_tokens, cfg.shared_prefix, cfg.max_tokens,
                  r.ok, r.failed, r.wall_s, r.req_per_s, r.out_tok_per_s, r.ttft_ms[0], r.ttft_ms[1], r.ttft_ms[2],
                  r.itl_ms[0], r.itl_ms[1], r.itl_ms[2], static_cast<long long>(r.cached_tokens),
                  static_cast<long long>(r.prompt_tokens),
                  r.prompt_tokens ? 100.0 * static_cast<double>(r.cached_tokens) / static_cast<double>(r.prompt_tokens) : 0.0,
                  r.hits, r.ok);
    std::string out = buf;
    if (!r.first_error.empty()) out += "first error: " + r.first_error + "\n";
    return out;
}

std::string report_json(const LoadConfig & cfg, const LoadReport & r) {
    json j = {{"url", "http://" + cfg.host + ":" + std::to_string(cfg.port)},
              {"clients", cfg.clients}, {"requests", cfg.requests}, {"prompt_tokens", cfg.prompt_tokens},
              {"shared_prefix", cfg.shared_prefix}, {"max_tokens", cfg.max_tokens},
              {"ok", r.ok}, {"failed", r.failed}, {"wall_s", r.wall_s}, {"requests_per_s", r.req_per_s},
              {"output_tokens_per_s", r.out_tok_per_s},
              {"ttft_ms", {{"p50", r.ttft_ms[0]}, {"p90", r.ttft_ms[1]}, {"p99", r.ttft_ms[2]}}},
              {"itl_ms", {{"p50", r.itl_ms[0]}, {"p90", r.itl_ms[1]}, {"p99", r.itl_ms[2]}}},
              {"prompt_tokens_total", r.prompt_tokens}, {"cached_tokens_total", r.cached_tokens},
              {"output_tokens_total", r.output_tokens},
              {"cache_hit_rate", r.prompt_tokens ? static_cast<double>(r.cached_tokens) / static_cast<double>(r.prompt_tokens) : 0.0},
              {"requests_with_hit", r.hits}};
    if (!r.first_error.empty()) j["first_error"] = r.first_error;
    return j.dump(2) + "\n";
}

}  // namespace offgrid::tools
