// Helpers for the server tests: a generated tiny model, a real `offgrid serve` child process on a free loopback
// port (found by the server itself: --port 0, read back from its log), and small HTTP helpers.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

namespace offgrid::test {

namespace fs = std::filesystem;
using json = nlohmann::json;

inline std::string slurp(const fs::path & p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A private directory for this test process, with the tiny model generated once into it.
inline const fs::path & work_dir() {
    static const fs::path dir = [] {
        fs::path d = fs::temp_directory_path() / ("offgrid_server_test_" + std::to_string(::getpid()));
        fs::remove_all(d);
        fs::create_directories(d);
        const std::string cmd = std::string(OFFGRID_BINARY) + " gen-model --preset tiny -o '" + (d / "tiny.gguf").string() +
                                "' > /dev/null";
        if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << "gen-model failed: " << cmd;
        std::atexit([] {
            std::error_code ec;
            fs::remove_all(fs::temp_directory_path() / ("offgrid_server_test_" + std::to_string(::getpid())), ec);
        });
        return d;
    }();
    return dir;
}

class ServerProcess {
public:
    // Starts `offgrid serve -m tiny.gguf --port 0 ARGS` and waits (bounded) until it listens.
    // `model`: another model file instead of the tiny one.
    explicit ServerProcess(const std::vector<std::string> & args, const std::string & tag = "main",
                           const fs::path & model = {}) {
        static int counter = 0;  // a fresh log per server: an old one would give an old port
        log_ = work_dir() / ("server_" + tag + "_" + std::to_string(++counter) + ".log");
        std::vector<std::string> argv = {OFFGRID_BINARY, "serve", "-m", (model.empty() ? work_dir() / "tiny.gguf" : model).string(),
                                         "--port", "0"};
        argv.insert(argv.end(), args.begin(), args.end());
        pid_ = ::fork();
        if (pid_ == 0) {
            std::FILE * f = std::freopen(log_.c_str(), "w", stderr);
            (void)f;
            std::vector<char *> cargv;
            for (auto & a : argv) cargv.push_back(a.data());
            cargv.push_back(nullptr);
            ::execv(cargv[0], cargv.data());
            std::_Exit(127);
        }
        const std::regex re("listening on http://127\\.0\\.0\\.1:([0-9]+)");
        for (int i = 0; i < 200 && port_ == 0; ++i) {  // up to 10 s
            std::smatch m;
            const std::string text = slurp(log_);
            if (std::regex_search(text, m, re)) port_ = std::stoi(m[1]);
            else std::this_thread::sleep_for(std::chrono::milliseconds(50));
            int st = 0;
            if (::waitpid(pid_, &st, WNOHANG) == pid_) {
                pid_ = -1;
                break;
            }
        }
        if (port_ == 0) ADD_FAILURE() << "the server did not start; log:\n" << slurp(log_);
    }
    ~ServerProcess() {
        if (pid_ > 0) stop();
    }
    // SIGTERM, then waits (bounded) for the exit; returns the exit status (-1: killed or still running).
    int stop() {
        if (pid_ <= 0) return -1;
        ::kill(pid_, SIGTERM);
        int st = 0;
        for (int i = 0; i < 300; ++i) {  // up to 15 s
            if (::waitpid(pid_, &st, WNOHANG) == pid_) {
                pid_ = -1;
                return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &st, 0);
        pid_ = -1;
        return -1;
    }
    int port() const { return port_; }
    std::string log() const { return slurp(log_); }
    httplib::Client client() const {
        httplib::Client c("127.0.0.1", port_);
        c.set_read_timeout(30, 0);
        c.set_connection_timeout(5, 0);
        return c;
    }

private:
    pid_t pid_ = -1;
    int port_ = 0;
    fs::path log_;
};

struct Reply {
    int status = 0;
    std::string body;
    json j;
    std::string retry_after;
};

inline Reply post(const ServerProcess & s, const std::string & path, const std::string & body,
                  const httplib::Headers & headers = {}) {
    auto c = s.client();
    auto r = c.Post(path.c_str(), headers, body, "application/json");
    Reply out;
    if (!r) {
        ADD_FAILURE() << "POST " << path << " failed: " << httplib::to_string(r.error());
        return out;
    }
    out.status = r->status;
    out.body = r->body;
    out.retry_after = r->get_header_value("Retry-After");
    out.j = json::parse(r->body, nullptr, false);
    return out;
}

inline Reply post(const ServerProcess & s, const std::string & path, const json & body) {
    return post(s, path, body.dump());
}

// One value of a /metrics text (-1 when absent).
inline double metric_in(const std::string & text, const std::string & name) {
    const std::regex re("\\noffgrid_" + name + " ([0-9.e+-]+)");
    std::smatch m;
    if (!std::regex_search(text, m, re)) return -1;
    return std::stod(m[1]);
}

// One value of /metrics.
inline double metric(const ServerProcess & s, const std::string & name) {
    auto c = s.client();
    auto r = c.Get("/metrics");
    if (!r) return -1;
    return metric_in(r->body, name);
}

// Several values of one /metrics read (counters that must be compared with each other come from the same moment).
inline std::vector<double> metrics(const ServerProcess & s, const std::vector<std::string> & names) {
    auto c = s.client();
    auto r = c.Get("/metrics");
    std::vector<double> out;
    for (const auto & n : names) out.push_back(r ? metric_in(r->body, n) : -1);
    return out;
}

// Text and chunks of a streamed request (SSE), checking the framing.
struct Stream {
    int status = 0;
    std::vector<json> chunks;
    bool done = false;          // ended with data: [DONE]
    bool data_after_done = false;
    std::string text;           // choice 0's text
};

inline Stream post_stream(const ServerProcess & s, const std::string & path, const json & body) {
    auto c = s.client();
    auto r = c.Post(path.c_str(), body.dump(), "application/json");
    Stream out;
    if (!r) {
        ADD_FAILURE() << "POST " << path << " failed";
        return out;
    }
    out.status = r->status;
    std::string buf = r->body;
    size_t at;
    while ((at = buf.find("\n\n")) != std::string::npos) {
        const std::string ev = buf.substr(0, at);
        buf.erase(0, at + 2);
        if (ev.rfind(":", 0) == 0) continue;
        EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
        const std::string payload = ev.substr(6);
        if (out.done) out.data_after_done = true;
        if (payload == "[DONE]") {
            out.done = true;
            continue;
        }
        json j = json::parse(payload, nullptr, false);
        EXPECT_FALSE(j.is_discarded()) << payload;
        for (const auto & ch : j.value("choices", json::array())) {
            if (ch.value("index", -1) != 0) continue;
            if (ch.contains("text")) out.text += ch["text"].get<std::string>();
            if (ch.contains("delta") && ch["delta"].contains("content")) out.text += ch["delta"]["content"].get<std::string>();
        }
        out.chunks.push_back(std::move(j));
    }
    EXPECT_TRUE(buf.empty()) << "trailing bytes after the last event: " << buf;
    return out;
}

}  // namespace offgrid::test
