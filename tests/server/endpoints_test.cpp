// A real `offgrid serve` on a loopback port with the tiny model: response shapes, streaming, stop strings, n,
// every bad-input case as a 4xx with OpenAI's error object, the API key, a full queue, disconnects, shutdown.
#include <gtest/gtest.h>

#include <algorithm>

#include <netinet/in.h>
#include <sys/socket.h>

#include "server_helpers.h"

namespace offgrid::test {
namespace {

// -np 4, 512 cells per slot, chunks of 64 tokens, a 64 KiB body limit.
const std::vector<std::string> kMainArgs = {"-np", "4", "-c", "2048", "-b", "64", "-t", "1", "--max-body", "65536", "--quiet"};

json completion(const std::string & prompt, int max_tokens) {
    return {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

void expect_usage(const json & u, int prompt_tokens, int completion_tokens) {
    ASSERT_TRUE(u.is_object());
    EXPECT_EQ(u["prompt_tokens"], prompt_tokens);
    EXPECT_EQ(u["completion_tokens"], completion_tokens);
    EXPECT_EQ(u["total_tokens"], prompt_tokens + completion_tokens);
    EXPECT_TRUE(u["prompt_tokens_details"]["cached_tokens"].is_number_integer());
}

TEST(Server, CompletionAndChatShapes) {
    ServerProcess s(kMainArgs);
    Reply r = post(s, "/v1/completions", completion("The cabin stands", 8));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.j["object"], "text_completion");
    EXPECT_EQ(r.j["model"], "tiny");
    EXPECT_TRUE(r.j["id"].is_string());
    ASSERT_EQ(r.j["choices"].size(), 1u);
    EXPECT_EQ(r.j["choices"][0]["finish_reason"], "length");
    EXPECT_TRUE(r.j["choices"][0]["text"].is_string());
    expect_usage(r.j["usage"], r.j["usage"]["prompt_tokens"].get<int>(), 8);

    Reply c = post(s, "/v1/chat/completions", json{{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                                  {"max_tokens", 5}, {"temperature", 0}});
    ASSERT_EQ(c.status, 200) << c.body;
    EXPECT_EQ(c.j["object"], "chat.completion");
    EXPECT_EQ(c.j["choices"][0]["message"]["role"], "assistant");
    EXPECT_TRUE(c.j["choices"][0]["message"]["content"].is_string());
    const std::string reason = c.j["choices"][0]["finish_reason"];
    EXPECT_TRUE(reason == "length" || reason == "stop");

    auto cli = s.client();
    auto m = cli.Get("/v1/models");
    ASSERT_TRUE(m);
    EXPECT_EQ(json::parse(m->body)["data"][0]["id"], "tiny");
    auto h = cli.Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
    Reply t = post(s, "/tokenize", json{{"content", "hello world"}});
    ASSERT_EQ(t.status, 200);
    Reply d = post(s, "/detokenize", json{{"tokens", t.j["tokens"]}});
    EXPECT_EQ(d.j["content"], "hello world");
    EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(Server, StreamingMatchesNonStreamingAndEndsWithDone) {
    ServerProcess s(kMainArgs);
    const json body = completion("Once upon a time", 12);
    Reply plain = post(s, "/v1/completions", body);
    ASSERT_EQ(plain.status, 200);
    json sb = body;
    sb["stream"] = true;
    sb["stream_options"] = {{"include_usage", true}};
    Stream st = post_stream(s, "/v1/completions", sb);
    EXPECT_EQ(st.status, 200);
    EXPECT_TRUE(st.done);
    EXPECT_FALSE(st.data_after_done);
    EXPECT_EQ(st.text, plain.j["choices"][0]["text"]);
    ASSERT_GE(st.chunks.size(), 2u);
    const json & last = st.chunks.back();  // the usage chunk: no choices
    EXPECT_TRUE(last["choices"].empty());
    expect_usage(last["usage"], plain.j["usage"]["prompt_tokens"], 12);
    EXPECT_EQ(st.chunks[st.chunks.size() - 2]["choices"][0]["finish_reason"], "length");

    json cb = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "Tell me"}}}}, {"max_tokens", 6},
               {"temperature", 0}, {"stream", true}};
    Stream cs = post_stream(s, "/v1/chat/completions", cb);
    EXPECT_TRUE(cs.done);
    ASSERT_FALSE(cs.chunks.empty());
    EXPECT_EQ(cs.chunks[0]["object"], "chat.completion.chunk");
    EXPECT_EQ(cs.chunks[0]["choices"][0]["delta"]["role"], "assistant");
    cb.erase("stream");
    Reply cp = post(s, "/v1/chat/completions", cb);
    EXPECT_EQ(cs.text, cp.j["choices"][0]["message"]["content"]);
}

TEST(Server, StopStringsCutTheTextAndAreNeverEmitted) {
    ServerProcess s(kMainArgs);
    const json body = completion("The cabin stands at the end of a long gravel road", 24);
    Reply full = post(s, "/v1/completions", body);
    ASSERT_EQ(full.status, 200);
    const std::string text = full.j["choices"][0]["text"];
    ASSERT_GE(text.size(), 8u) << "the greedy text is too short to pick a stop string from: '" << text << "'";
    // A stop string from the middle of the text, most likely spanning a token boundary.
    // Three printable ASCII characters (the random model also makes bytes that arrive as U+FFFD).
    size_t from = text.size() / 2;
    auto ascii = [&](size_t i) { return i + 3 <= text.size() && std::all_of(text.begin() + i, text.begin() + i + 3, [](char c) { return c >= 0x20 && c < 0x7F; }); };
    while (from > 0 && !ascii(from)) --from;
    ASSERT_TRUE(ascii(from)) << text;
    const std::string stop = text.substr(from, 3);
    const std::string expect = text.substr(0, text.find(stop));
    for (bool stream : {false, true}) {
        json b = body;
        b["stop"] = json::array({"\x01never", stop});
        if (stream) {
            b["stream"] = true;
            Stream st = post_stream(s, "/v1/completions", b);
            EXPECT_EQ(st.text, expect) << "stop '" << stop << "'";
            EXPECT_EQ(st.chunks.back()["choices"][0]["finish_reason"], "stop");
        } else {
            Reply r = post(s, "/v1/completions", b);
            EXPECT_EQ(r.j["choices"][0]["text"], expect) << "stop '" << stop << "'";
            EXPECT_EQ(r.j["choices"][0]["finish_reason"], "stop");
        }
    }
}

TEST(Server, SeveralChoicesAndLogprobs) {
    ServerProcess s(kMainArgs);
    json b = completion("Hello", 4);
    b["n"] = 3;
    b["temperature"] = 1.0;
    b["seed"] = 5;
    b["logprobs"] = 2;
    Reply r = post(s, "/v1/completions", b);
    ASSERT_EQ(r.status, 200) << r.body;
    ASSERT_EQ(r.j["choices"].size(), 3u);
    for (int i = 0; i < 3; ++i) {
        const json & c = r.j["choices"][i];
        EXPECT_EQ(c["index"], i);
        ASSERT_EQ(c["logprobs"]["token_logprobs"].size(), 4u);
        for (const auto & lp : c["logprobs"]["token_logprobs"]) EXPECT_LE(lp.get<double>(), 0.0);
        EXPECT_LE(c["logprobs"]["top_logprobs"][0].size(), 2u);
    }
    const int prompt = r.j["usage"]["prompt_tokens"];
    expect_usage(r.j["usage"], prompt, 12);  // the prompt counts once, completions for every choice
    Reply again = post(s, "/v1/completions", b);
    EXPECT_EQ(again.j["choices"], r.j["choices"]) << "a fixed seed gives the same choices";
}

TEST(Server, BadInputIs4xxWithOpenAIErrorObject) {
    ServerProcess s(kMainArgs);
    const std::string long_prompt = json(std::vector<int>(600, 65)).dump();  // 600 tokens > 512 per slot
    struct Case {
        const char * what;
        std::string path, body;
        int status;
    };
    const std::vector<Case> cases = {
        {"malformed JSON", "/v1/completions", "{\"model\": \"tiny\", \"prompt\": ", 400},
        {"not an object", "/v1/completions", "[1, 2]", 400},
        {"number beyond a double", "/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":1e999})", 400},
        {"number beyond a double (embeddings)", "/v1/embeddings", R"({"model":"tiny","input":"x","dimensions":-1e400})", 400},
        {"wrong type: max_tokens", "/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":"8"})", 400},
        {"wrong type: prompt", "/v1/completions", R"({"model":"tiny","prompt":{"a":1}})", 400},
        {"wrong type: temperature", "/v1/completions", R"({"model":"tiny","prompt":"x","temperature":"hot"})", 400},
        {"wrong type: stream", "/v1/completions", R"({"model":"tiny","prompt":"x","stream":"yes"})", 400},
        {"wrong type: messages", "/v1/chat/completions", R"({"model":"tiny","messages":"hi"})", 400},
        {"wrong type: message role", "/v1/chat/completions", R"({"model":"tiny","messages":[{"role":5,"content":"x"}]})", 400},
        {"out of range: temperature", "/v1/completions", R"({"model":"tiny","prompt":"x","temperature":7})", 400},
        {"out of range: n", "/v1/completions", R"({"model":"tiny","prompt":"x","n":0})", 400},
        {"out of range: token id", "/v1/completions", R"({"model":"tiny","prompt":[1,2,999999]})", 400},
        {"unknown model", "/v1/completions", R"({"model":"gpt-17","prompt":"x"})", 404},
        {"missing model", "/v1/completions", R"({"prompt":"x"})", 400},
        {"missing prompt", "/v1/completions", R"({"model":"tiny"})", 400},
        {"missing messages", "/v1/chat/completions", R"({"model":"tiny"})", 400},
        {"empty messages", "/v1/chat/completions", R"({"model":"tiny","messages":[]})", 400},
        {"prompt longer than the context", "/v1/completions", R"({"model":"tiny","prompt":)" + long_prompt + "}", 400},
        {"max_tokens beyond the context", "/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":100000})", 400},
        {"invalid UTF-8", "/v1/completions", "{\"model\":\"tiny\",\"prompt\":\"ab\xff\xfe\"}", 400},
        {"too many stop strings", "/v1/completions", R"({"model":"tiny","prompt":"x","stop":["a","b","c","d","e"]})", 400},
        {"empty stop string", "/v1/completions", R"({"model":"tiny","prompt":"x","stop":[""]})", 400},
        {"body over --max-body", "/v1/completions", R"({"model":"tiny","prompt":")" + std::string(70000, 'a') + "\"}", 413},
        {"unknown endpoint", "/v1/nothing", "{}", 404},
        {"tokenize without content", "/tokenize", "{}", 400},
    };
    for (const auto & c : cases) {
        Reply r = post(s, c.path, c.body);
        EXPECT_EQ(r.status, c.status) << c.what << ": " << r.body;
        ASSERT_TRUE(r.j.is_object()) << c.what << ": " << r.body;
        const json & e = r.j["error"];
        ASSERT_TRUE(e.is_object()) << c.what;
        EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << c.what;
        EXPECT_TRUE(e["type"].is_string()) << c.what;
        EXPECT_TRUE(e.contains("code")) << c.what;
    }
    // Nothing got stuck: the server still answers, every slot is free.
    Reply ok = post(s, "/v1/completions", completion("still alive", 3));
    EXPECT_EQ(ok.status, 200);
    EXPECT_EQ(metric(s, "slots_busy"), 0);
    EXPECT_EQ(metric(s, "queue_length"), 0);
    EXPECT_EQ(s.stop(), 0);
}

TEST(Server, ApiKeyIsRequired) {
    ServerProcess s({"-np", "1", "-t", "1", "--api-key", "sesame", "--quiet"}, "key");
    const std::string body = completion("x", 2).dump();
    Reply none = post(s, "/v1/completions", body);
    EXPECT_EQ(none.status, 401);
    EXPECT_EQ(none.j["error"]["code"], "invalid_api_key");
    Reply wrong = post(s, "/v1/completions", body, {{"Authorization", "Bearer nope"}});
    EXPECT_EQ(wrong.status, 401);
    Reply right = post(s, "/v1/completions", body, {{"Authorization", "Bearer sesame"}});
    EXPECT_EQ(right.status, 200) << right.body;
    auto cli = s.client();
    auto m = cli.Get("/v1/models");
    ASSERT_TRUE(m);
    EXPECT_EQ(m->status, 401);
    auto h = cli.Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
}

TEST(Server, FullQueueAnswers503WithRetryAfter) {
    ServerProcess s({"-np", "1", "--queue", "0", "-t", "1", "--quiet"}, "queue");
    json slow = completion("a long one", 3000);
    slow["ignore_eos"] = true;
    std::thread t([&] { post(s, "/v1/completions", slow); });
    // Wait (bounded) until the slot is taken, then one more request has no room.
    for (int i = 0; i < 200 && metric(s, "slots_busy") < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    Reply r = post(s, "/v1/completions", completion("x", 2));
    EXPECT_EQ(r.status, 503) << r.body;
    EXPECT_EQ(r.retry_after, "1");
    EXPECT_EQ(r.j["error"]["type"], "server_error");
    t.join();
    EXPECT_EQ(metric(s, "slots_busy"), 0);
}

// A raw socket that sends a request and, for a streamed one, reads a little; then it hangs up.
void send_and_hang_up(int port, const std::string & body, bool read_first) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)), 0);
    const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
    char buf[512];
    if (read_first) {
        ASSERT_GT(::recv(fd, buf, sizeof(buf), 0), 0);  // the headers and a first event
    }
    ::close(fd);
}

// Waits (bounded) until no slot is busy; returns the last slots_busy read.
double wait_for_idle_slots(ServerProcess & s) {
    double busy = 1;
    for (int i = 0; i < 300 && busy != 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        busy = metric(s, "slots_busy");
    }
    return busy;
}

TEST(Server, ClientDisconnectCancelsTheRequest) {
    ServerProcess s({"-np", "2", "-t", "1", "--quiet"}, "cancel");
    json b = completion("going on and on", 4000);
    b["ignore_eos"] = true;
    b["stream"] = true;
    send_and_hang_up(s.port(), b.dump(), true);
    // Freed within a few tokens of the hang-up, long before 4000 tokens.
    EXPECT_EQ(wait_for_idle_slots(s), 0);
    EXPECT_EQ(metric(s, "requests_cancelled_total"), 1);
    EXPECT_LT(metric(s, "generated_tokens_total"), 4000);
    EXPECT_EQ(s.stop(), 0);
}

// Not streamed, nothing is written until the end: the hang-up is seen on the socket, and the slot freed as fast.
TEST(Server, ClientDisconnectCancelsANonStreamedRequest) {
    ServerProcess s({"-np", "2", "-t", "1", "--quiet"}, "cancel-plain");
    json b = completion("going on and on", 4000);
    b["ignore_eos"] = true;
    send_and_hang_up(s.port(), b.dump(), false);
    for (int i = 0; i < 300 && metric(s, "slots_busy") < 1 && metric(s, "generated_tokens_total") == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(wait_for_idle_slots(s), 0);
    EXPECT_EQ(metric(s, "requests_cancelled_total"), 1);
    EXPECT_LT(metric(s, "generated_tokens_total"), 4000);
    // The server still answers.
    EXPECT_EQ(post(s, "/v1/completions", completion("after", 2)).status, 200);
    EXPECT_EQ(s.stop(), 0);
}

TEST(Server, SigtermFinishesARunningRequestAndExitsZero) {
    ServerProcess s({"-np", "1", "-t", "1"}, "term");
    json b = completion("finish me", 200);
    b["ignore_eos"] = true;
    Reply r;
    std::thread t([&] { r = post(s, "/v1/completions", b); });
    for (int i = 0; i < 200 && metric(s, "slots_busy") < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(s.stop(), 0);
    t.join();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.j["usage"]["completion_tokens"], 200);
    EXPECT_NE(s.log().find("serve: stopped"), std::string::npos);
}

}  // namespace
}  // namespace offgrid::test

namespace offgrid::test {
namespace {

TEST(Server, PrefixCacheSurvivesARestartWithSlotSavePath) {
    const fs::path dir = work_dir() / "slots";
    fs::create_directories(dir);
    {
        std::ofstream junk(dir / "junk.ogpc");
        junk << "not a cache file";
    }
    const json body = completion("a prompt worth keeping across restarts", 6);
    std::string text;
    {
        ServerProcess s({"-np", "1", "-t", "1", "--slot-save-path", dir.string()}, "save");
        Reply r = post(s, "/v1/completions", body);
        ASSERT_EQ(r.status, 200);
        EXPECT_EQ(r.j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
        text = r.j["choices"][0]["text"];
        EXPECT_EQ(s.stop(), 0);
        EXPECT_NE(s.log().find("snapshots saved"), std::string::npos) << s.log();
    }
    ServerProcess s({"-np", "1", "-t", "1", "--slot-save-path", dir.string()}, "load");
    Reply r = post(s, "/v1/completions", body);
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.j["usage"]["prompt_tokens_details"]["cached_tokens"], r.j["usage"]["prompt_tokens"]);
    EXPECT_EQ(r.j["choices"][0]["text"], text);
    EXPECT_EQ(s.stop(), 0);
}

}  // namespace
}  // namespace offgrid::test

namespace offgrid::test {
namespace {

// A client that sends half a request and stalls is dropped after --timeout.
TEST(Server, StalledRequestsTimeOut) {
    ServerProcess s({"-np", "1", "-t", "1", "--timeout", "1", "--quiet"}, "timeout");
    auto stall = [&](const std::string & partial) {
        const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        ASSERT_GE(fd, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(static_cast<uint16_t>(s.port()));
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)), 0);
        timeval tv{6, 0};  // the test's own bound
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        ASSERT_EQ(::send(fd, partial.data(), partial.size(), 0), static_cast<ssize_t>(partial.size()));
        char buf[1024];
        ssize_t n;
        while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) {
        }
        EXPECT_EQ(n, 0) << "the server did not close the stalled connection";
        ::close(fd);
    };
    // A stalled header and a stalled body, at once (each is dropped after the idle wait and the read timeout).
    std::thread a([&] { stall("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"); });
    std::thread b([&] { stall("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"model\""); });
    a.join();
    b.join();
    Reply ok = post(s, "/v1/completions", completion("after the stall", 2));
    EXPECT_EQ(ok.status, 200);
}

}  // namespace
}  // namespace offgrid::test
