// Speculative decoding in the server: per slot inside continuous batching, the text of every request equals a
// plain server's, under concurrent load, for both draft types, with the per-request switch, and after a prefix
// cache hit; /metrics counts rounds, draft and accepted tokens.
#include <gtest/gtest.h>

#include <thread>

#include "server_helpers.h"

namespace offgrid::test {
namespace {

const fs::path kSpeaks = fs::path(OFFGRID_SOURCE_DIR) / "models" / "offgrid-speaks.gguf";

const char * kPrompts[] = {"And God said", "In the beginning", "The function returns", "And the LORD spake unto Moses",
                           "Return a list of", "And it came to pass", "The module provides", "Blessed are they"};

json request(const std::string & prompt, int max_tokens, double temperature, bool speculative = true) {
    json j = {{"model", "offgrid-speaks"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", temperature},
              {"ignore_eos", true}, {"seed", 5}};
    if (!speculative) j["speculative"] = false;
    return j;
}

// Every prompt at once (and each twice: greedy and sampled), texts in prompt order.
std::vector<std::string> concurrent_texts(const ServerProcess & s, bool speculative = true) {
    const size_t n = std::size(kPrompts);
    std::vector<std::string> texts(2 * n);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < 2 * n; ++i) {
        threads.emplace_back([&, i] {
            const Reply r = post(s, "/v1/completions", request(kPrompts[i % n], 40, i < n ? 0.0 : 0.9, speculative));
            EXPECT_EQ(r.status, 200) << r.body;
            if (r.status == 200) texts[i] = r.j["choices"][0]["text"];
        });
    }
    for (auto & t : threads) t.join();
    return texts;
}

TEST(SpeculativeServer, SameTextsAsPlainUnderLoadForBothDraftTypes) {
    if (!fs::exists(kSpeaks)) GTEST_SKIP() << kSpeaks << " absent";
    std::vector<std::string> plain;
    {
        ServerProcess s({"-np", "4", "-t", "1", "--quiet"}, "spec_plain", kSpeaks);
        plain = concurrent_texts(s);
    }
    for (const char * type : {"draft-mtp", "ngram-simple"}) {
        ServerProcess s({"-np", "4", "-t", "1", "--quiet", "--spec-type", type}, std::string("spec_") + type, kSpeaks);
        EXPECT_EQ(concurrent_texts(s), plain) << type;
        EXPECT_EQ(concurrent_texts(s, false), plain) << type << ", speculation off per request";
        // Again: now the prompts come from the prefix cache.
        EXPECT_EQ(concurrent_texts(s), plain) << type << ", after cache hits";
        EXPECT_GT(metric(s, "spec_rounds_total"), 0.0) << type;
        EXPECT_GT(metric(s, "spec_draft_tokens_total"), 0.0) << type;
        EXPECT_GT(metric(s, "spec_accepted_tokens_total"), 0.0) << type;
        EXPECT_EQ(metric(s, "slots_busy"), 0.0);
    }
}

// A conversation of three turns: with speculation each turn restores the earlier ones from the cache (snapshots
// taken after speculative rounds, stored as tails) and answers as the plain server does.
TEST(SpeculativeServer, ConversationTurnsRestoreEarlierTurnsAndAnswerAsPlain) {
    if (!fs::exists(kSpeaks)) GTEST_SKIP() << kSpeaks << " absent";
    auto converse = [](const ServerProcess & s, std::vector<int> & cached) {
        json messages = json::array({{{"role", "system"}, {"content", "You answer in the words of an old book."}}});
        std::vector<std::string> replies;
        for (const char * q : {"And God said", "And it came to pass", "Blessed are they"}) {
            messages.push_back({{"role", "user"}, {"content", q}});
            const json body = {{"model", "offgrid-speaks"}, {"messages", messages}, {"max_tokens", 24},
                               {"temperature", 0}, {"ignore_eos", true}};
            const Reply r = post(s, "/v1/chat/completions", body);
            EXPECT_EQ(r.status, 200) << r.body;
            if (r.status != 200) break;
            replies.push_back(r.j["choices"][0]["message"]["content"]);
            cached.push_back(r.j["usage"]["prompt_tokens_details"]["cached_tokens"]);
            messages.push_back({{"role", "assistant"}, {"content", replies.back()}});
        }
        return replies;
    };
    std::vector<int> cached_plain, cached_spec;
    std::vector<std::string> plain;
    {
        ServerProcess s({"-np", "2", "-t", "1", "--quiet", "--cache-ram", "0"}, "spec_conv_plain", kSpeaks);
        plain = converse(s, cached_plain);
    }
    ServerProcess s({"-np", "2", "-t", "1", "--quiet", "--spec-type", "ngram-simple"}, "spec_conv", kSpeaks);
    EXPECT_EQ(converse(s, cached_spec), plain);
    ASSERT_EQ(cached_spec.size(), 3u);
    EXPECT_GT(cached_spec[1], 0);
    EXPECT_GT(cached_spec[2], cached_spec[1]);
    EXPECT_GT(metric(s, "spec_rounds_total"), 0.0);
}

}  // namespace
}  // namespace offgrid::test
