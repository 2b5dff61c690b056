// Streaming never holds a step: the scheduler hands each token to its request's queue and the HTTP thread
// writes it, so a client that reads slowly only grows its own queue. Checked with counts, not times: while a
// client reads one byte per 100 ms, another request streams through, and every step of it also gives the slow
// request its token; the slow request then runs to its end while its client has read a few bytes. Both texts
// equal the answers of requests that are not streamed.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "server_helpers.h"

namespace offgrid::test {
namespace {

json request(const std::string & prompt, int max_tokens, bool stream) {
    return json{{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0},
                {"ignore_eos", true}, {"stream", stream}};
}

// The text of choice 0 in an SSE body.
std::string streamed_text(const std::string & body) {
    std::string text;
    size_t at = 0;
    while ((at = body.find("data: {", at)) != std::string::npos) {
        const size_t end = body.find("\n\n", at);
        const json j = json::parse(body.substr(at + 6, end - at - 6), nullptr, false);
        at = end;
        if (j.is_discarded()) continue;
        for (const auto & c : j.value("choices", json::array())) {
            if (c.value("index", -1) == 0 && c.contains("text")) text += c["text"].get<std::string>();
        }
    }
    return text;
}

// An HTTP/1.1 response's body: dechunked when the response is chunked.
std::string body_of(const std::string & response) {
    const size_t head = response.find("\r\n\r\n");
    if (head == std::string::npos) return {};
    std::string rest = response.substr(head + 4);
    if (response.substr(0, head).find("chunked") == std::string::npos) return rest;
    std::string out;
    size_t at = 0;
    for (;;) {
        const size_t eol = rest.find("\r\n", at);
        if (eol == std::string::npos) break;
        const size_t size = std::stoul(rest.substr(at, eol - at), nullptr, 16);
        if (size == 0) break;
        out += rest.substr(eol + 2, size);
        at = eol + 2 + size + 2;
    }
    return out;
}

TEST(Streaming, ASlowReaderDoesNotHoldTheOthersSteps) {
    // The slow request is long enough to outlast the fast one even when a loaded machine delays the HTTP side while
    // the scheduler runs on (with 1,500 tokens it once ended 31 steps before the fast request did).
    ServerProcess s({"-np", "2", "-c", "8192", "-t", "2", "--quiet"}, "slow_reader");
    const int n_slow = 4000, n_fast = 64;  // (the tiny model's context is 4,096)
    const std::string slow_prompt = "a client that reads one byte at a time", fast_prompt = "a client that reads at once";

    // The slow client: a small receive buffer, a request written by hand, then one byte per 100 ms.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    const int small = 1024;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(s.port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)), 0);
    const std::string body = request(slow_prompt, n_slow, true).dump();
    const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    std::string slow_got;
    std::atomic<bool> reading{true};
    std::thread slow([&] {
        char c;
        while (reading && ::recv(fd, &c, 1, 0) == 1) {
            slow_got.push_back(c);
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    });
    // The slow request is generating before the other starts.
    for (int i = 0; i < 500 && metric(s, "generated_tokens_total") < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const std::vector<std::string> counters = {"decode_steps_total", "generated_tokens_total", "slots_busy"};
    const std::vector<double> before = metrics(s, counters);
    const Stream fast = post_stream(s, "/v1/completions", request(fast_prompt, n_fast, true));
    const std::vector<double> after = metrics(s, counters);
    const double steps = after[0] - before[0], generated = after[1] - before[1];
    ASSERT_EQ(fast.status, 200);
    ASSERT_TRUE(fast.done);
    ASSERT_EQ(after[2], 1) << "the slow request ended before the fast one: the count below would not mean anything";
    ASSERT_GE(steps, n_fast);
    // Every step while the fast request ran also gave the slow one its token: nothing waited for its reader.
    // (Give or take the steps between two reads of /metrics.)
    EXPECT_NEAR(generated, steps + n_fast, 3) << steps << " steps";
    // The slow request runs to its end while its client still reads a byte at a time.
    for (int i = 0; i < 3000 && metric(s, "slots_busy") != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(metric(s, "slots_busy"), 0);
    EXPECT_EQ(metric(s, "generated_tokens_total"), n_slow + n_fast);
    reading = false;
    slow.join();
    const size_t read_slowly = slow_got.size();
    // The rest of the slow stream at once: the text is the one a request that is not streamed gets.
    {
        char buf[4096];
        ssize_t r;
        while ((r = ::recv(fd, buf, sizeof(buf), 0)) > 0) slow_got.append(buf, static_cast<size_t>(r));
    }
    ::close(fd);
    EXPECT_LT(read_slowly * 10, slow_got.size()) << "the slow client read most of its stream before its request ended";
    const std::string slow_body = body_of(slow_got);
    EXPECT_NE(slow_body.find("data: [DONE]"), std::string::npos);
    const Reply slow_whole = post(s, "/v1/completions", request(slow_prompt, n_slow, false));
    const Reply fast_whole = post(s, "/v1/completions", request(fast_prompt, n_fast, false));
    ASSERT_EQ(slow_whole.status, 200);
    ASSERT_EQ(fast_whole.status, 200);
    EXPECT_EQ(streamed_text(slow_body), slow_whole.j["choices"][0]["text"].get<std::string>());
    EXPECT_EQ(fast.text, fast_whole.j["choices"][0]["text"].get<std::string>());
    EXPECT_EQ(s.stop(), 0);
}

}  // namespace
}  // namespace offgrid::test
