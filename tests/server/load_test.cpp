// Load and determinism against a real server: 32 clients x 8 requests all complete and well-formed with no slot
// left busy; a greedy request gives the same text alone, among 15 concurrent others, and after prefix-cache hits
// (a whole-prompt hit and a partial one that restores a chunk-boundary snapshot and prefills the rest).
#include <gtest/gtest.h>

#include <atomic>

#include "server_helpers.h"

namespace offgrid::test {
namespace {

json greedy(const json & prompt, int max_tokens) {
    return {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
}

std::vector<int> ids(int n, int seed) {
    std::vector<int> out;
    uint32_t s = static_cast<uint32_t>(seed) * 2654435761u + 1;
    for (int i = 0; i < n; ++i) {
        s = s * 1103515245u + 12345u;
        out.push_back(static_cast<int>((s >> 16) % 256));
    }
    return out;
}

TEST(Load, ThirtyTwoClientsTimesEightRequests) {
    ServerProcess s({"-np", "4", "-c", "2048", "-b", "64", "-t", "2", "--quiet"}, "load");
    std::atomic<int> bad{0};
    std::vector<std::thread> clients;
    std::mutex mu;
    std::string first_problem;
    auto problem = [&](const std::string & what) {
        ++bad;
        std::lock_guard<std::mutex> lock(mu);
        if (first_problem.empty()) first_problem = what;
    };
    for (int c = 0; c < 32; ++c) {
        clients.emplace_back([&, c] {
            for (int k = 0; k < 8; ++k) {
                const int max_tokens = 1 + (c * 8 + k) % 8;
                json b = greedy(ids(8 + (c + k) % 24, c * 8 + k), max_tokens);
                const bool stream = (c + k) % 2 == 0;
                if (stream) {
                    b["stream"] = true;
                    b["stream_options"] = {{"include_usage", true}};
                    Stream st = post_stream(s, "/v1/completions", b);
                    if (st.status != 200 || !st.done || st.data_after_done) problem("stream framing");
                    else if (st.chunks.back()["usage"]["completion_tokens"] != max_tokens) problem("stream usage");
                } else {
                    Reply r = post(s, "/v1/completions", b);
                    if (r.status != 200) problem("status " + std::to_string(r.status) + ": " + r.body);
                    else if (r.j["usage"]["completion_tokens"] != max_tokens || r.j["choices"][0]["finish_reason"] != "length")
                        problem("usage: " + r.body);
                }
            }
        });
    }
    for (auto & t : clients) t.join();
    EXPECT_EQ(bad.load(), 0) << first_problem;
    EXPECT_EQ(metric(s, "slots_busy"), 0);
    EXPECT_EQ(metric(s, "queue_length"), 0);
    EXPECT_EQ(metric(s, "requests_total"), 256);
    EXPECT_EQ(metric(s, "requests_failed_total"), 0);
    // The time counters: steps ran, prefilling steps are a part of all steps, the scheduler's busy time covers them.
    const double decode_s = metric(s, "decode_seconds_total"), prefill_s = metric(s, "prefill_decode_seconds_total");
    EXPECT_GT(decode_s, 0);
    EXPECT_GT(prefill_s, 0);
    EXPECT_LE(prefill_s, decode_s);
    EXPECT_GE(metric(s, "scheduler_busy_seconds_total"), decode_s);
    EXPECT_EQ(s.stop(), 0);
}

TEST(PrefixCache, ASharedPrefixOfConcurrentRequestsIsPrefilledOnce) {
    ServerProcess s({"-np", "4", "-c", "2048", "-b", "64", "-t", "1", "--quiet"}, "shared");
    const std::vector<int> prefix = ids(200, 3);
    std::vector<std::thread> clients;
    std::vector<Reply> replies(6);
    for (int i = 0; i < 6; ++i) {
        clients.emplace_back([&, i] {
            std::vector<int> p = prefix;
            const std::vector<int> tail = ids(10, 100 + i);
            p.insert(p.end(), tail.begin(), tail.end());
            replies[i] = post(s, "/v1/completions", greedy(p, 4));
        });
    }
    for (auto & t : clients) t.join();
    int hits = 0;
    for (const auto & r : replies) {
        ASSERT_EQ(r.status, 200) << r.body;
        hits += r.j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() > 0;
    }
    EXPECT_EQ(hits, 5);
    // Without sharing six prompts would prefill 6 x 210 tokens; waiting for the running prefill (or the cache)
    // leaves the shared part to one of them.
    EXPECT_LT(metric(s, "prompt_tokens_decoded_total"), 2 * 210);
    EXPECT_EQ(metric(s, "prompt_tokens_total"), 6 * 210);
}

TEST(Determinism, AloneAmongFifteenOthersAndAfterCacheHits) {
    const std::vector<int> prompt = ids(300, 42);
    const json req = greedy(prompt, 24);

    // Cold, alone, on a server without a prefix cache.
    std::string alone;
    {
        ServerProcess cold({"-np", "4", "-c", "2048", "-b", "64", "-t", "1", "--cache-ram", "0", "--quiet"}, "cold");
        Reply r = post(cold, "/v1/completions", req);
        ASSERT_EQ(r.status, 200) << r.body;
        alone = r.j["choices"][0]["text"];
        EXPECT_EQ(r.j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    }

    ServerProcess s({"-np", "4", "-c", "2048", "-b", "64", "-t", "2", "--quiet"}, "det");
    // Among 15 concurrent requests (other prompts, some sharing its first 100 tokens, other lengths).
    {
        std::vector<std::thread> others;
        std::vector<Reply> replies(16);
        for (int i = 0; i < 16; ++i) {
            others.emplace_back([&, i] {
                if (i == 7) {
                    replies[i] = post(s, "/v1/completions", req);
                    return;
                }
                std::vector<int> p = ids(50 + 20 * i, i);
                if (i % 3 == 0) p.insert(p.begin(), prompt.begin(), prompt.begin() + 100);
                replies[i] = post(s, "/v1/completions", greedy(p, 8 + i));
            });
        }
        for (auto & t : others) t.join();
        for (const auto & r : replies) EXPECT_EQ(r.status, 200) << r.body;
        EXPECT_EQ(replies[7].j["choices"][0]["text"], alone);
    }
    // A whole-prompt hit: the prompt's end snapshot and its logits.
    {
        Reply r = post(s, "/v1/completions", req);
        EXPECT_EQ(r.j["usage"]["prompt_tokens_details"]["cached_tokens"], 300);
        EXPECT_EQ(r.j["choices"][0]["text"], alone);
    }
    // A partial hit: a longer prompt restores the 300-token snapshot and prefills the rest; compared with the cold
    // server's answer to the same prompt.
    const std::vector<int> longer = [&] {
        std::vector<int> p = prompt;
        const std::vector<int> tail = ids(77, 9);
        p.insert(p.end(), tail.begin(), tail.end());
        return p;
    }();
    Reply warm = post(s, "/v1/completions", greedy(longer, 16));
    EXPECT_GE(warm.j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 300);
    // A prompt that leaves a cached path mid-chunk: restores the deepest snapshot below and prefills from there.
    std::vector<int> branch(prompt.begin(), prompt.begin() + 250);
    const std::vector<int> tail = ids(40, 11);
    branch.insert(branch.end(), tail.begin(), tail.end());
    Reply warm2 = post(s, "/v1/completions", greedy(branch, 16));
    const int cached2 = warm2.j["usage"]["prompt_tokens_details"]["cached_tokens"];
    EXPECT_GT(cached2, 0);
    EXPECT_LE(cached2, 250);
    {
        ServerProcess cold({"-np", "1", "-t", "1", "--cache-ram", "0", "--quiet"}, "cold2");
        Reply a = post(cold, "/v1/completions", greedy(longer, 16));
        Reply b = post(cold, "/v1/completions", greedy(branch, 16));
        EXPECT_EQ(warm.j["choices"][0]["text"], a.j["choices"][0]["text"]);
        EXPECT_EQ(warm2.j["choices"][0]["text"], b.j["choices"][0]["text"]);
    }
    EXPECT_EQ(s.stop(), 0);
}

}  // namespace
}  // namespace offgrid::test
