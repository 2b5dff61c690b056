// `offgrid serve`: an OpenAI-compatible HTTP server with continuous batching and a prefix cache (src/server).
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <pthread.h>

#include "command.h"
#include "offgrid/context.h"
#include "offgrid/distributed.h"
#include "offgrid/speculative.h"
#include "offgrid/system.h"
#include "offgrid/tokenizer.h"
#include "args/cli_args.h"
#include "models/default_model.h"
#include "server/chat_template.h"
#include "server/http_server.h"
#include "server/scheduler.h"

namespace offgrid::cli {

namespace {

constexpr const char * kUsage =
    "usage: offgrid serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [-np SLOTS] [-c CTX] [options]\n"
    "\n"
    "Serves OpenAI's API (/v1/completions, /v1/chat/completions, /v1/models, /v1/embeddings, /health, /metrics,\n"
    "/tokenize, /detokenize) with continuous batching over SLOTS concurrent requests and a prefix cache shared by\n"
    "all requests. One line per request goes to stderr. Ctrl-C or SIGTERM: stop accepting, let running requests\n"
    "finish (up to --grace seconds), cancel the rest, exit 0.\n"
    "\n"
    "  -m, --model FILE         GGUF model (default: the built-in tiny model)\n"
    "  --alias NAME             model id clients must send (default: the file name without .gguf)\n"
    "  --host ADDR              address to bind (default 127.0.0.1, loopback only)\n"
    "  --port N                 port (default 8080; 0 = any free port, printed on stderr)\n"
    "  -np, --parallel N        slots: requests decoded together (default 4)\n"
    "  --spec-type T            speculative decoding per slot: none (default), draft-mtp, ngram-simple (the\n"
    "                           output is the same; a request turns it off with \"speculative\": false)\n"
    "  --spec-draft-n-max N, --spec-draft-n-min N, --spec-draft-p-min X, -md FILE   as for `offgrid run`\n"
    "  -c, --ctx-size N         total context cells, split evenly over the slots (default: slots x min(4096,\n"
    "                           the model's context length))\n"
    "  -b, --batch-size N       token budget of one scheduler step (default 512)\n"
    "  -ub, --ubatch-size N     most tokens per micro-batch (default 512)\n"
    "  -t, --threads N          threads (default: the hardware's)\n"
    "  --mmap, --no-mmap        map the model file, or read it into memory (default: read when it takes at most\n"
    "                           half the available memory)\n"
    "  --act-quant M            activations of the quantised products: int16 (default), int8 (the speed path:\n"
    "                           prompts on the tile unit where the CPU has AMX), f32 (exact; docs/kernels.md)\n"
    "  --api-key KEY            require 'Authorization: Bearer KEY' (all endpoints but /health); not empty;\n"
    "                           OFFGRID_API_KEY in the environment does the same without showing in ps\n"
    "  --chat-template T        auto (default: ChatML when the model's template is ChatML-shaped or absent),\n"
    "                           chatml, or none (chat endpoint disabled)\n"
    "  --cache-ram MIB          prefix cache RAM budget in MiB (default 256; 0 = no prefix cache)\n"
    "  --queue N                most requests waiting for a slot (default 64); beyond it 503 + Retry-After\n"
    "  --max-body BYTES         largest request body (default 4194304)\n"
    "  --timeout SEC            socket read and write timeouts (default 30)\n"
    "  --grace SEC              at shutdown, how long running requests may go on (default 10)\n"
    "  --slot-save-path DIR     keep the prefix cache across restarts: saved to DIR at shutdown, loaded at start\n"
    "  --quiet                  no per-request log lines\n";

int serve_main(const std::vector<std::string> & args) {
    return tools::run_with_usage("serve", [&]() -> int {
        std::string model_path, alias, host = "127.0.0.1", api_key, chat_template = "auto", slot_save_path;
        int64_t port = 8080, slots = 4, n_ctx = 0, n_batch = 512, n_ubatch = 512, cache_mib = 256, queue = 64;
        int64_t max_body = 4 << 20, timeout = 30, grace = 10;
        int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, kMaxThreads);
        bool quiet = false;
        tools::ArgParser p;
        p.text({"-m", "--model"}, &model_path);
        p.text({"--alias"}, &alias);
        p.text({"--host"}, &host);
        p.integer({"--port"}, &port, 0, 65535);
        p.integer({"-np", "--parallel"}, &slots, 1, 64);
        p.integer({"-c", "--ctx-size"}, &n_ctx, 0, 1 << 24);
        p.integer({"-b", "--batch-size"}, &n_batch, 1, 1 << 20);
        p.integer({"-ub", "--ubatch-size"}, &n_ubatch, 1, 1 << 20);
        p.integer({"-t", "--threads"}, &threads, 1, kMaxThreads);
        p.text({"--api-key"}, &api_key);
        p.text({"--chat-template"}, &chat_template);
        p.integer({"--cache-ram"}, &cache_mib, 0, 1 << 20);
        p.integer({"--queue"}, &queue, 0, 1 << 16);
        p.integer({"--max-body"}, &max_body, 1024, int64_t(1) << 32);
        p.integer({"--timeout"}, &timeout, 1, 86400);
        p.integer({"--grace"}, &grace, 0, 86400);
        p.text({"--slot-save-path"}, &slot_save_path);
        p.flag({"--quiet"}, &quiet);
        std::string spec_type = "none";
        SpecParams spec;
        int64_t spec_n_max = spec.n_max, spec_n_min = spec.n_min;
        p.text({"--spec-type"}, &spec_type);
        p.integer({"--spec-draft-n-max"}, &spec_n_max, 1, 64);
        p.integer({"--spec-draft-n-min"}, &spec_n_min, 0, 64);
        p.real({"--spec-draft-p-min"}, &spec.p_min, 0.0f, 1.0f);
        p.text({"-md", "--model-draft"}, &spec.draft_model);
        WeightLoad weights = WeightLoad::Auto;
        p.weight_load(&weights);
        p.activation_mode();
        if (!p.parse(args)) {
            std::fputs(kUsage, stdout);
            return 0;
        }
        if (!slot_save_path.empty() && !std::filesystem::is_directory(slot_save_path)) {
            throw tools::UsageError("--slot-save-path: " + slot_save_path + " is not a directory");
        }
        if (p.given("-m") && model_path.empty()) throw tools::UsageError("-m: empty file name");
        // An empty key would mean "no authentication": refuse it, so `--api-key "$KEY"` with KEY unset cannot
        // start an open server. OFFGRID_API_KEY keeps the key out of the process list.
        if (p.given("--api-key") && api_key.empty()) throw tools::UsageError("--api-key: empty key");
        if (!p.given("--api-key")) {
            if (const char * env = std::getenv("OFFGRID_API_KEY")) {
                if (*env == '\0') throw tools::UsageError("OFFGRID_API_KEY is set but empty");
                api_key = env;
            }
        }
        if (model_path.empty()) model_path = tools::default_model_path();
        if (distributed::under_launcher()) {
            // The scheduler's decode calls depend on when requests arrive, which only one process sees; the ranks
            // of a pipeline must make the same calls.
            throw Error("serve does not run under an MPI launcher yet (the ranks of a layer pipeline must make the "
                        "same decode calls); under mpirun, use `offgrid run`, `replay` or `bench` (docs/distributed.md)");
        }
        const auto model = Model::load(model_path, weights);
        Tokenizer tok = Tokenizer::from_model(*model);
        server::ChatTemplate tmpl;
        try {
            tmpl = server::choose_chat_template(chat_template, model->metadata_string("tokenizer.chat_template"));
        } catch (const Error & e) {
            throw tools::UsageError(e.what());
        }
        if (alias.empty()) alias = std::filesystem::path(model_path).stem().string();

        // Signals are taken by one thread with sigwait; every other thread (httplib's, the scheduler's) blocks them.
        sigset_t sigs;
        sigemptyset(&sigs);
        sigaddset(&sigs, SIGINT);
        sigaddset(&sigs, SIGTERM);
        sigaddset(&sigs, SIGUSR1);
        pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
        std::signal(SIGPIPE, SIG_IGN);

        server::SchedulerConfig sc;
        sc.n_slots = static_cast<uint32_t>(slots);
        sc.n_ctx = static_cast<uint32_t>(n_ctx);
        sc.n_batch = static_cast<uint32_t>(n_batch);
        sc.n_ubatch = static_cast<uint32_t>(n_ubatch);
        sc.n_threads = static_cast<int>(threads);
        sc.cache_bytes = static_cast<size_t>(cache_mib) << 20;
        sc.max_queue = static_cast<uint32_t>(queue);
        sc.log = !quiet;
        sc.cache_dir = slot_save_path;
        try {
            spec.type = spec_type_from_name(spec_type);
        } catch (const Error & e) {
            throw tools::UsageError(std::string("--spec-type: ") + e.what());
        }
        spec.n_max = static_cast<int32_t>(spec_n_max);
        spec.n_min = static_cast<int32_t>(std::min(spec_n_min, spec_n_max));
        sc.spec = spec;
        if (n_ctx > 0 && static_cast<uint64_t>(n_ctx) / static_cast<uint64_t>(slots) > model->n_ctx_train()) {
            throw Error("-c " + std::to_string(n_ctx) + " gives each of the " + std::to_string(slots) +
                        " slots more than the model's context length " + std::to_string(model->n_ctx_train()));
        }
        server::Scheduler sched(model, std::move(tok), sc);

        server::HttpConfig hc;
        hc.host = host;
        hc.port = static_cast<int>(port);
        hc.api_key = api_key;
        hc.max_body = static_cast<size_t>(max_body);
        hc.timeout_s = static_cast<int>(timeout);
        hc.model_id = alias;
        hc.chat_template = tmpl;
        server::HttpServer http(sched, hc);
        const int bound = http.bind();

        std::thread waiter([&] {
            int sig = 0;
            sigwait(&sigs, &sig);
            if (sig == SIGUSR1) return;  // the server stopped by itself
            std::fprintf(stderr, "serve: %s: no new requests; finishing the running ones (up to %lld s)\n",
                         sig == SIGINT ? "SIGINT" : "SIGTERM", static_cast<long long>(grace));
            sched.shutdown(std::chrono::seconds(grace));
            http.stop();
        });
        std::fprintf(stderr,
                     "serve: model %s (%s), %lld slots of %u tokens, prefix cache %lld MiB, chat template %s, kernels "
                     "%s, activations %s\n",
                     alias.c_str(), model->describe().c_str(), static_cast<long long>(slots), sched.seq_capacity(),
                     static_cast<long long>(cache_mib), tmpl == server::ChatTemplate::ChatML ? "chatml" : "none",
                     active_isa_name(), activation_mode_name());
        std::fprintf(stderr, "serve: listening on http://%s:%d\n", host.c_str(), bound);
        std::fflush(stderr);
        http.listen();
        sched.shutdown(std::chrono::seconds(0));
        if (waiter.joinable()) {
            pthread_kill(waiter.native_handle(), SIGUSR1);
            waiter.join();
        }
        std::fprintf(stderr, "serve: stopped\n");
        return 0;
    });
}

}  // namespace

OFFGRID_COMMAND("serve", "OpenAI-compatible HTTP server (continuous batching, prefix cache)", serve_main);

}  // namespace offgrid::cli
