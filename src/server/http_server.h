// The HTTP layer of `offgrid serve` (cpp-httplib): OpenAI's endpoints over the scheduler, server-sent events for
// streaming, API-key checks, body-size and socket timeouts, /metrics in Prometheus text. Every failure answers
// with OpenAI's error object. Handlers run on httplib's worker threads; all model work happens on the
// scheduler's thread, but /v1/embeddings, which runs on the handler's thread on the Embedder's own context.
#pragma once

#include <memory>
#include <string>

#include "server/api_key.h"
#include "server/chat_template.h"
#include "server/embedder.h"
#include "server/scheduler.h"

namespace httplib {
class Server;
}

namespace offgrid::server {

struct HttpConfig {
    std::string host = "127.0.0.1";
    int port = 8080;                 // 0: any free port (bind() tells which)
    std::string api_key;             // empty: no check (the command line refuses an empty key)
    size_t max_body = 4u << 20;      // bytes
    int timeout_s = 30;              // socket read (headers and body) and write timeouts
    int n_http_threads = 0;          // 0: enough for every slot and queued request, plus some
    std::string model_id;
    ChatTemplate chat_template = ChatTemplate::ChatML;
};

class HttpServer {
public:
    HttpServer(Scheduler & sched, const HttpConfig & cfg);
    ~HttpServer();

    int bind();     // returns the port; throws offgrid::Error when the address cannot be bound
    void listen();  // blocks until stop()
    void stop();

private:
    void routes();
    Scheduler & sched_;
    HttpConfig cfg_;
    ApiKey api_key_;
    std::unique_ptr<httplib::Server> svr_;
    Embedder embedder_;  // /v1/embeddings, on a context of its own
};

}  // namespace offgrid::server
