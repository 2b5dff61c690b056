#include "server/http_server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "offgrid/error.h"
#include "server/connection_pool.h"
#include "server/framing.h"
#include "server/peer_probe.h"
#include "server/protocol.h"

namespace offgrid::server {

namespace {

std::string dump(const json & j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_json(httplib::Response & res, int status, const json & j) {
    res.status = status;
    res.set_content(dump(j), "application/json");
}

void send_error(httplib::Response & res, const ApiError & e) {
    if (e.status == 503) res.set_header("Retry-After", "1");
    send_json(res, e.status, error_body(e.what(), e.type, e.param, e.code));
}

std::string next_id(const char * prefix) {
    static std::atomic<uint64_t> counter{0};
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%s%llx%06llx", prefix, static_cast<unsigned long long>(std::time(nullptr)),
                  static_cast<unsigned long long>(++counter));
    return buf;
}

json usage_json(int64_t prompt, int64_t cached, int64_t completion) {
    return {{"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"total_tokens", prompt + completion},
            {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

// Bytes of a piece as OpenAI's chat logprobs give them.
json bytes_of(const std::string & s) {
    json b = json::array();
    for (const char c : s) b.push_back(static_cast<int>(static_cast<unsigned char>(c)));
    return b;
}

// The logprobs object of a choice, in the completions or the chat shape.
class LogprobsBuilder {
public:
    LogprobsBuilder(const Tokenizer & tok, bool chat) : tok_(tok), chat_(chat) {}
    void add(const std::vector<TokenLogprob> & lps) {
        for (const auto & lp : lps) {
            const std::string piece = tok_.token_to_piece(lp.id, false);
            if (chat_) {
                json top = json::array();
                for (const auto & [id, p] : lp.top) {
                    const std::string tp = tok_.token_to_piece(id, false);
                    top.push_back({{"token", tp}, {"logprob", p}, {"bytes", bytes_of(tp)}});
                }
                content_.push_back({{"token", piece}, {"logprob", lp.logprob}, {"bytes", bytes_of(piece)}, {"top_logprobs", top}});
            } else {
                json top = json::object();
                for (const auto & [id, p] : lp.top) top[tok_.token_to_piece(id, false)] = p;
                tokens_.push_back(piece);
                token_logprobs_.push_back(lp.logprob);
                top_logprobs_.push_back(top);
                text_offset_.push_back(offset_);
                offset_ += static_cast<int64_t>(piece.size());
            }
        }
    }
    json get() const {
        if (chat_) return {{"content", content_}, {"refusal", nullptr}};
        return {{"tokens", tokens_}, {"token_logprobs", token_logprobs_}, {"top_logprobs", top_logprobs_}, {"text_offset", text_offset_}};
    }

private:
    const Tokenizer & tok_;
    bool chat_;
    json content_ = json::array(), tokens_ = json::array(), token_logprobs_ = json::array(),
         top_logprobs_ = json::array(), text_offset_ = json::array();
    int64_t offset_ = 0;
};

struct Usage {
    int64_t prompt = 0, cached = 0, completion = 0;
    // Prompt tokens count once per prompt (its first choice), completion tokens for every choice.
    void add(const ChoiceEvent & e, int32_t n) {
        if (e.index % n == 0) {
            prompt += e.prompt_tokens;
            cached += e.cached_tokens;
        }
        completion += e.completion_tokens;
    }
};

// Debian's compiled cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG is fixed inside the shared
// library), so a burst of clients overflows the accept queue and connections fail. httplib does not expose its
// socket: find the listening socket bound to our port and listen again with a long queue (Linux updates it).
void widen_backlog(int port) {
    for (int fd = 3; fd < 4096; ++fd) {
        int listening = 0;
        socklen_t len = sizeof(listening);
        if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
        sockaddr_storage addr{};
        socklen_t alen = sizeof(addr);
        if (::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &alen) != 0) continue;
        int p = -1;
        if (addr.ss_family == AF_INET) p = ntohs(reinterpret_cast<sockaddr_in *>(&addr)->sin_port);
        if (addr.ss_family == AF_INET6) p = ntohs(reinterpret_cast<sockaddr_in6 *>(&addr)->sin6_port);
        if (p == port) ::listen(fd, SOMAXCONN);
    }
}

constexpr size_t kMaxConnectionThreads = 1024;

std::string metrics_text(const SchedulerStats & st, uint32_t n_slots, uint64_t http_requests) {
    std::string out;
    auto metric = [&](const char * name, const char * type, const char * help, double value) {
        char buf[512];
        std::snprintf(buf, sizeof(buf), "# HELP offgrid_%s %s\n# TYPE offgrid_%s %s\noffgrid_%s %.17g\n", name, help, name,
                      type, name, value);
        out += buf;
    };
    const double step_s = static_cast<double>(st.step_us) * 1e-6;
    const double prefill_s = static_cast<double>(st.prefill_step_us) * 1e-6;
    metric("http_requests_total", "counter", "HTTP requests received", static_cast<double>(http_requests));
    metric("requests_total", "counter", "generation choices queued", static_cast<double>(st.requests));
    metric("requests_failed_total", "counter", "generation choices that failed", static_cast<double>(st.requests_failed));
    metric("requests_cancelled_total", "counter", "generation choices cancelled (client gone)", static_cast<double>(st.requests_cancelled));
    metric("prompt_tokens_total", "counter", "prompt tokens of admitted requests", static_cast<double>(st.prompt_tokens));
    metric("prompt_tokens_decoded_total", "counter", "prompt tokens actually prefilled", static_cast<double>(st.prompt_tokens_decoded));
    metric("generated_tokens_total", "counter", "tokens generated", static_cast<double>(st.generated_tokens));
    metric("spec_rounds_total", "counter", "speculative rounds (one per choice and verify call)", static_cast<double>(st.spec_rounds));
    metric("spec_draft_tokens_total", "counter", "draft tokens verified", static_cast<double>(st.spec_drafted));
    metric("spec_accepted_tokens_total", "counter", "draft tokens accepted", static_cast<double>(st.spec_accepted));
    metric("prefix_cache_lookups_total", "counter", "prefix cache look-ups", static_cast<double>(st.cache_lookups));
    metric("prefix_cache_hits_total", "counter", "look-ups that restored a cached prefix", static_cast<double>(st.cache_hits));
    metric("prefix_cache_tokens_saved_total", "counter", "prompt tokens restored instead of prefilled", static_cast<double>(st.cache_tokens_saved));
    metric("prefix_cache_bytes", "gauge", "RAM held by prefix cache snapshots", static_cast<double>(st.cache_bytes));
    metric("prefix_cache_entries", "gauge", "snapshots in the prefix cache", static_cast<double>(st.cache_entries));
    {
        // The cache's bytes by kind: rows stored once per path, what each snapshot adds, and logits.
        const double rows = static_cast<double>(st.cache_row_bytes), logits = static_cast<double>(st.cache_logits_bytes);
        out += "# HELP offgrid_prefix_cache_kind_bytes prefix cache RAM by kind (rows: K, V and indexer rows of the cached "
               "tokens, each held once; state: recurrent states, conv histories and books per snapshot; logits)\n"
               "# TYPE offgrid_prefix_cache_kind_bytes gauge\n";
        char line[160];
        std::snprintf(line, sizeof(line), "offgrid_prefix_cache_kind_bytes{kind=\"rows\"} %.0f\n", rows);
        out += line;
        std::snprintf(line, sizeof(line), "offgrid_prefix_cache_kind_bytes{kind=\"state\"} %.0f\n",
                      static_cast<double>(st.cache_bytes) - rows - logits);
        out += line;
        std::snprintf(line, sizeof(line), "offgrid_prefix_cache_kind_bytes{kind=\"logits\"} %.0f\n", logits);
        out += line;
    }
    metric("queue_length", "gauge", "choices waiting for a slot", static_cast<double>(st.queue_length));
    metric("slots_busy", "gauge", "slots running a request", static_cast<double>(st.slots_busy));
    metric("slots_total", "gauge", "slots", n_slots);
    metric("decode_steps_total", "counter", "scheduler steps (decode calls)", static_cast<double>(st.steps));
    metric("decode_seconds_total", "counter", "time in decode calls", step_s);
    metric("prefill_decode_seconds_total", "counter", "time in decode calls that prefilled", prefill_s);
    metric("scheduler_busy_seconds_total", "counter",
           "scheduler time in steps: decode calls plus admission, sampling, streaming and snapshots",
           static_cast<double>(st.busy_us) * 1e-6);
    metric("prompt_tokens_per_second", "gauge", "prompt tokens prefilled per second of steps that prefilled",
           prefill_s > 0 ? static_cast<double>(st.prompt_tokens_decoded) / prefill_s : 0.0);
    metric("decode_tokens_per_second", "gauge", "tokens generated per second of all steps",
           step_s > 0 ? static_cast<double>(st.generated_tokens) / step_s : 0.0);
    return out;
}

}  // namespace

HttpServer::HttpServer(Scheduler & sched, const HttpConfig & cfg)
    : sched_(sched), cfg_(cfg), api_key_(cfg.api_key.empty() ? ApiKey() : ApiKey(cfg.api_key)),
      svr_(std::make_unique<httplib::Server>()),
      embedder_(sched.model(), sched.seq_capacity(), sched.context_params().n_threads) {
    routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
    int port = cfg_.port;
    if (port == 0) {
        port = svr_->bind_to_any_port(cfg_.host);
        if (port < 0) throw Error("cannot bind " + cfg_.host + " to a free port");
    } else if (!svr_->bind_to_port(cfg_.host, port)) {
        throw Error("cannot bind " + cfg_.host + ":" + std::to_string(port) + " (in use, or not an address of this machine)");
    }
    widen_backlog(port);
    return port;
}

void HttpServer::listen() { svr_->listen_after_bind(); }
void HttpServer::stop() { svr_->stop(); }

void HttpServer::routes() {
    auto & svr = *svr_;
    // A thread per open connection, started when none is free (connection_pool.h): a request never waits behind
    // idle or slow connections unless kMaxConnectionThreads of them are open at once.
    const size_t n_threads = cfg_.n_http_threads > 0 ? static_cast<size_t>(cfg_.n_http_threads) : sched_.n_slots() + 8;
    svr.new_task_queue = [n_threads] { return new ConnectionPool(n_threads, std::max(n_threads, kMaxConnectionThreads)); };
    svr.set_payload_max_length(cfg_.max_body);
    svr.set_read_timeout(cfg_.timeout_s, 0);
    svr.set_write_timeout(cfg_.timeout_s, 0);
    // httplib waits this long for a request's first byte: a connection that sends nothing is dropped after it.
    svr.set_keep_alive_timeout(std::min(cfg_.timeout_s, 2));

    // One request per connection: the answer carries `Connection: close` and the socket closes after it. httplib
    // 0.11 holds a worker thread for as long as a kept-alive connection idles (so 76 idle clients starved /health
    // for seconds), and it reads pipelined requests into a buffer its keep-alive poll does not see (they were
    // never answered). Closing after each answer fixes both: an HTTP/1.1 client sends its next request on a new
    // connection, and a pipelining client learns from `Connection: close` that the rest were not processed.
    svr.set_keep_alive_max_count(1);

    static std::atomic<uint64_t> http_requests{0};
    svr.set_pre_routing_handler([this](const httplib::Request & req, httplib::Response & res) {
        ++http_requests;
        // Framing first (before the body is read, before the API key): a request whose length is ambiguous is
        // refused, never guessed at (the request-smuggling shape behind a proxy).
        if (const FramingError bad = check_framing({req.headers.begin(), req.headers.end()}); bad.status != 0) {
            send_json(res, bad.status, error_body(bad.message, "invalid_request_error", {}, "bad_framing"));
            return httplib::Server::HandlerResponse::Handled;
        }
        if (!api_key_.enabled() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
        const std::string auth = req.get_header_value("Authorization");
        if (!api_key_.accepts(auth)) {
            send_json(res, 401, error_body(auth.empty() ? "missing API key: send 'Authorization: Bearer KEY'"
                                                        : "incorrect API key provided",
                                           "invalid_request_error", {}, "invalid_api_key"));
            return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
    });
    svr.set_error_handler([this](const httplib::Request & req, httplib::Response & res) {
        if (!res.body.empty()) return;
        std::string msg = "HTTP error " + std::to_string(res.status);
        std::string code;
        if (res.status == 404) msg = "unknown endpoint " + req.method + " " + req.path, code = "unknown_url";
        if (res.status == 405) msg = "method " + req.method + " is not allowed on " + req.path;
        if (res.status == 413) msg = "the request body is larger than the server's limit of " + std::to_string(cfg_.max_body) + " bytes (--max-body)", code = "request_too_large";
        if (res.status == 408) msg = "timed out reading the request";
        if (res.status == 400) msg = "malformed HTTP request";
        res.set_content(dump(error_body(msg, res.status >= 500 ? "server_error" : "invalid_request_error", {}, code)),
                        "application/json");
    });
    svr.set_exception_handler([](const httplib::Request &, httplib::Response & res, std::exception_ptr ep) {
        std::string msg = "internal error";
        try {
            if (ep) std::rethrow_exception(ep);
        } catch (const std::exception & e) {
            msg += std::string(": ") + e.what();
        } catch (...) {
        }
        send_json(res, 500, error_body(msg, "server_error"));
    });

    svr.Get("/health", [](const httplib::Request &, httplib::Response & res) { send_json(res, 200, {{"status", "ok"}}); });
    svr.Get("/v1/models", [this](const httplib::Request &, httplib::Response & res) {
        send_json(res, 200, {{"object", "list"},
                             {"data", json::array({{{"id", cfg_.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "offgrid"}}})}});
    });
    svr.Get("/metrics", [this](const httplib::Request &, httplib::Response & res) {
        res.set_content(metrics_text(sched_.stats(), sched_.n_slots(), http_requests), "text/plain; version=0.0.4");
    });
    svr.Post("/v1/embeddings", [this](const httplib::Request & req, httplib::Response & res) {
        EmbeddingRequest er;
        try {
            er = parse_embedding_request(parse_body(req.body), sched_.tokenizer(), cfg_.model_id,
                                         static_cast<int32_t>(sched_.tokenizer().n_vocab()), sched_.model()->n_embd(),
                                         embedder_.capacity());
        } catch (const ApiError & e) {
            send_error(res, e);
            return;
        }
        std::vector<std::vector<float>> vecs;
        try {
            vecs = embedder_.embed(er.inputs);
        } catch (const std::exception & e) {
            send_json(res, 500, error_body(std::string("embedding failed: ") + e.what(), "server_error"));
            return;
        }
        json data = json::array();
        int64_t n_tokens = 0;
        for (size_t i = 0; i < vecs.size(); ++i) {
            n_tokens += static_cast<int64_t>(er.inputs[i].size());
            data.push_back({{"object", "embedding"}, {"index", i},
                            {"embedding", er.base64 ? json(base64_floats(vecs[i])) : json(vecs[i])}});
        }
        send_json(res, 200, {{"object", "list"}, {"data", std::move(data)}, {"model", cfg_.model_id},
                             {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}});
    });
    svr.Post("/tokenize", [this](const httplib::Request & req, httplib::Response & res) {
        try {
            const json body = parse_body(req.body);
            auto it = body.find("content");
            if (it == body.end() || !it->is_string()) throw ApiError(400, "'content' must be a string", "invalid_request_error", "content");
            const bool special = body.value("add_special", false);
            std::vector<int32_t> ids;
            const auto & tok = sched_.tokenizer();
            if (special && tok.add_bos() && tok.bos()) ids.push_back(*tok.bos());
            tok.tokenize(it->get<std::string>(), false, ids);
            send_json(res, 200, {{"tokens", ids}});
        } catch (const ApiError & e) {
            send_error(res, e);
        } catch (const json::exception & e) {
            send_error(res, ApiError(400, e.what()));
        }
    });
    svr.Post("/detokenize", [this](const httplib::Request & req, httplib::Response & res) {
        try {
            const json body = parse_body(req.body);
            auto it = body.find("tokens");
            if (it == body.end() || !it->is_array()) throw ApiError(400, "'tokens' must be an array of token ids", "invalid_request_error", "tokens");
            std::vector<int32_t> ids;
            const auto & tok = sched_.tokenizer();
            for (const auto & t : *it) {
                if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= static_cast<int64_t>(tok.n_vocab())) {
                    throw ApiError(400, "'tokens' must hold token ids in 0.." + std::to_string(tok.n_vocab() - 1), "invalid_request_error", "tokens");
                }
                ids.push_back(t.get<int32_t>());
            }
            send_json(res, 200, {{"content", tok.detokenize(ids, false)}});
        } catch (const ApiError & e) {
            send_error(res, e);
        }
    });

    auto generation = [this](bool chat) {
        return [this, chat](const httplib::Request & req, httplib::Response & res) {
            ParsedRequest pr;
            try {
                const json body = parse_body(req.body);
                ParseLimits lim{cfg_.model_id, sched_.seq_capacity(), static_cast<int32_t>(sched_.tokenizer().n_vocab()), cfg_.chat_template};
                pr = parse_generation(body, chat, sched_.tokenizer(), lim);
            } catch (const ApiError & e) {
                send_error(res, e);
                return;
            }
            const std::string id = next_id(chat ? "chatcmpl-" : "cmpl-");
            const int64_t created = static_cast<int64_t>(std::time(nullptr));
            auto ch = std::make_shared<Channel>();
            const size_t n_choices = pr.choices.size();
            const SubmitStatus st = sched_.submit(std::move(pr.choices), ch, id);
            if (st != SubmitStatus::Ok) {
                send_error(res, ApiError(503, st == SubmitStatus::QueueFull ? "the server is busy: the request queue is full; retry later"
                                                                             : "the server is shutting down",
                                         "server_error", {}, st == SubmitStatus::QueueFull ? "server_overloaded" : "shutting_down"));
                return;
            }
            const std::string object = chat ? "chat.completion" : "text_completion";
            if (pr.stream) {
                auto state = std::make_shared<ParsedRequest>(std::move(pr));
                res.set_header("Cache-Control", "no-cache");
                res.set_chunked_content_provider(
                    "text/event-stream",
                    [this, ch, state, id, created, chat, n_choices](size_t, httplib::DataSink & sink) {
                        const auto & p = *state;
                        auto send = [&](const std::string & data) {
                            const std::string frame = "data: " + data + "\n\n";
                            if (!sink.write(frame.data(), frame.size())) {
                                ch->cancel();
                                return false;
                            }
                            return true;
                        };
                        auto chunk = [&](json choices) {
                            json j = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                                      {"model", cfg_.model_id}, {"choices", std::move(choices)}};
                            if (p.include_usage) j["usage"] = nullptr;
                            return j;
                        };
                        std::vector<bool> started(n_choices, false);
                        std::vector<ReplyTools> tools = reply_tools(p.tools, id, n_choices);
                        size_t done = 0;
                        Usage usage;
                        auto idle = std::chrono::steady_clock::now();
                        while (done < n_choices) {
                            ChoiceEvent e;
                            if (!ch->pop(e, std::chrono::milliseconds(250))) {
                                // An SSE comment now and then: a client that went away is noticed during a long prefill.
                                if (std::chrono::steady_clock::now() - idle > std::chrono::seconds(1)) {
                                    const char * beat = ": keep-alive\n\n";
                                    if (!sink.write(beat, std::strlen(beat))) {
                                        ch->cancel();
                                        return false;
                                    }
                                    idle = std::chrono::steady_clock::now();
                                }
                                continue;
                            }
                            idle = std::chrono::steady_clock::now();
                            if (!e.error.empty()) {
                                send(dump(error_body(e.error, "server_error")));
                                ch->cancel();
                                break;
                            }
                            json c = {{"index", e.index}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
                            if (!e.logprobs.empty()) {
                                LogprobsBuilder lb(sched_.tokenizer(), chat);
                                lb.add(e.logprobs);
                                c["logprobs"] = lb.get();
                            }
                            ReplyTools & rt = tools[static_cast<size_t>(e.index)];
                            if (chat) {
                                json delta = json::object();
                                if (!started[static_cast<size_t>(e.index)]) delta["role"] = "assistant";
                                std::string content;
                                json calls = json::array();
                                rt.add(e.text, e.done, content, calls);
                                if (!e.done || !content.empty()) delta["content"] = content;
                                if (!calls.empty()) delta["tool_calls"] = calls;
                                c["delta"] = delta;
                            } else {
                                c["text"] = e.text;
                            }
                            started[static_cast<size_t>(e.index)] = true;
                            if (e.done) {
                                c["finish_reason"] = rt.finish_reason(e.finish_reason);
                                usage.add(e, p.n);
                                ++done;
                            }
                            if (!send(dump(chunk(json::array({c}))))) return false;
                        }
                        if (done == n_choices && p.include_usage) {
                            json j = chunk(json::array());
                            j["usage"] = usage_json(usage.prompt, usage.cached, usage.completion);
                            if (!send(dump(j))) return false;
                        }
                        send("[DONE]");
                        sink.done();
                        return true;
                    },
                    [ch](bool) { ch->cancel(); });  // finished or not, nothing more will be read
                return;
            }

            // Not streamed: wait for every choice.
            std::vector<std::string> texts(n_choices);
            std::vector<std::string> reasons(n_choices);
            std::vector<LogprobsBuilder> lps(n_choices, LogprobsBuilder(sched_.tokenizer(), chat));
            Usage usage;
            size_t done = 0;
            std::string error;
            // Nothing is written before the end, so a client that hangs up is seen only by looking at its socket:
            // a few times a second, its slot is freed at once (as for a streamed request) instead of at max_tokens.
            const PeerProbe peer(req.remote_addr, req.remote_port, req.local_port);
            auto last_look = std::chrono::steady_clock::now();
            while (done < n_choices) {
                if (std::chrono::steady_clock::now() - last_look > std::chrono::milliseconds(200)) {
                    last_look = std::chrono::steady_clock::now();
                    if (peer.gone()) {
                        ch->cancel();
                        return;
                    }
                }
                ChoiceEvent e;
                if (!ch->pop(e, std::chrono::milliseconds(200))) continue;
                const auto i = static_cast<size_t>(e.index);
                texts[i] += e.text;
                lps[i].add(e.logprobs);
                if (e.done) {
                    if (!e.error.empty() && error.empty()) error = e.error;
                    reasons[i] = e.finish_reason;
                    usage.add(e, pr.n);
                    ++done;
                }
            }
            if (!error.empty()) {
                ch->cancel();
                send_json(res, 500, error_body(error, "server_error"));
                return;
            }
            json choices = json::array();
            std::vector<ReplyTools> tools = reply_tools(pr.tools, id, n_choices);
            for (size_t i = 0; i < n_choices; ++i) {
                json c = {{"index", i}, {"logprobs", pr.logprobs ? lps[i].get() : json(nullptr)}, {"finish_reason", reasons[i]}};
                if (chat) {
                    std::string content;
                    json calls = json::array();
                    tools[i].add(texts[i], true, content, calls);
                    c["finish_reason"] = tools[i].finish_reason(reasons[i]);
                    c["message"] = {{"role", "assistant"}, {"content", content}};
                    if (!calls.empty()) {
                        if (content.empty()) c["message"]["content"] = nullptr;
                        c["message"]["tool_calls"] = calls;
                    }
                } else {
                    c["text"] = texts[i];
                }
                choices.push_back(std::move(c));
            }
            send_json(res, 200, {{"id", id}, {"object", object}, {"created", created}, {"model", cfg_.model_id},
                                 {"choices", choices}, {"usage", usage_json(usage.prompt, usage.cached, usage.completion)}});
        };
    };
    svr.Post("/v1/completions", generation(false));
    svr.Post("/v1/chat/completions", generation(true));
    svr.Post("/completions", generation(false));
    svr.Post("/chat/completions", generation(true));
}

}  // namespace offgrid::server
