// Replies held to JSON (server/json_constraint.h): the prefix automaton against nlohmann's parser, the token mask
// on a byte vocabulary driven to completion by random logits, and a real server with response_format json_object
// and a forced tool call.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "offgrid/chat.h"
#include "runtime/byte_vocab.h"
#include "server/json_constraint.h"
#include "server_helpers.h"

namespace offgrid::server {
namespace {

bool prefix_ok(std::string_view s, bool object_only = false) {
    JsonPrefix j(object_only);
    return j.feed(s);
}
bool complete(std::string_view s, bool object_only = false) {
    JsonPrefix j(object_only);
    return j.feed(s) && j.done();
}

TEST(JsonReply, ThePrefixAutomatonTakesJsonAndNothingElse) {
    const std::vector<std::string> valid = {
        R"({})", R"({"a": 1})", R"({"a":-0.5e+3,"b":[true,false,null,{"c":"x\"\\\/\b\f\n\r\t\u00e9"}],"d":[]})",
        R"( { "k" : [ 0 , 1.25 , -7 , 2E9 , "" ] } )", "[1,[2,[3]]]", R"("s")", "true", R"({"\u0041": "é"})", R"(["\ud83d\ude00", "\uD7FF\uE000"])"};
    for (const auto & v : valid) {
        ASSERT_TRUE(nlohmann::json::accept(v)) << v;
        // The reply ends with the value's last byte (done()): whitespace after it is not taken.
        std::string trimmed = v;
        while (!trimmed.empty() && trimmed.back() == ' ') trimmed.pop_back();
        for (size_t n = 0; n <= trimmed.size(); ++n) EXPECT_TRUE(prefix_ok(trimmed.substr(0, n))) << v << " at " << n;
        EXPECT_TRUE(complete(trimmed)) << v;
        if (trimmed != v) {
            EXPECT_FALSE(prefix_ok(v)) << v;
        }
    }
    const std::vector<std::string> invalid = {
        "{,", R"({"a" 1})", "[1,]", "01", "[01]", "[1.]", "[1.e3]", "[-]", "[1 2]", "\"\x01\"", "tru e", R"({"a":1}})",
        R"({"a":1,})", R"("\x")", R"("\u12G4")", R"("\udd00")", R"("\ud83d")", R"("\ud83dx")", R"("\ud83d\u0041")", "{'a': 1}", "[1}", "{]", R"({"a":})", "nul", "+1", ".5"};
    for (const auto & v : invalid) {
        EXPECT_FALSE(nlohmann::json::accept(v)) << v;
        EXPECT_FALSE(complete(v)) << v;
    }
    EXPECT_FALSE(prefix_ok("{,"));
    EXPECT_FALSE(prefix_ok("[1 2"));
    EXPECT_FALSE(prefix_ok("\"a\" x"));
    // A lone low surrogate is refused at the digit that makes it one, and a high one wants its low one.
    EXPECT_TRUE(prefix_ok(R"("\ud)"));
    EXPECT_FALSE(prefix_ok(R"("\udc)"));
    EXPECT_TRUE(prefix_ok(R"("\ud83d\)"));
    EXPECT_FALSE(prefix_ok(R"("\ud83d\ud8)"));
    // A bare number is not taken (nothing after it could end it), and the object-only mode wants '{'.
    EXPECT_FALSE(prefix_ok("1"));
    EXPECT_FALSE(prefix_ok(" -"));
    EXPECT_FALSE(prefix_ok("[", true));
    EXPECT_TRUE(prefix_ok("  {", true));
    // Limits: whitespace runs and depth.
    EXPECT_TRUE(prefix_ok("{" + std::string(JsonPrefix::kMaxSpaces, ' ')));
    EXPECT_FALSE(prefix_ok("{" + std::string(JsonPrefix::kMaxSpaces + 1, ' ')));
    EXPECT_TRUE(prefix_ok("[" + std::string(JsonPrefix::kMaxDigits, '7') + "." + std::string(JsonPrefix::kMaxDigits, '1') + "e-99"));
    EXPECT_FALSE(prefix_ok("[" + std::string(JsonPrefix::kMaxDigits + 1, '7')));
    EXPECT_FALSE(prefix_ok("[1e999"));
    EXPECT_TRUE(prefix_ok(std::string(JsonPrefix::kMaxDepth, '[')));
    EXPECT_FALSE(prefix_ok(std::string(JsonPrefix::kMaxDepth + 1, '[')));
}

// Random JSON values written with random spacing: every prefix is taken and the whole is complete; single-byte
// edits of them that the automaton takes whole are JSON to nlohmann too.
TEST(JsonReply, ThePrefixAutomatonAgreesWithAParserOnRandomDocuments) {
    std::mt19937 rng(11);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
    auto ws = [&]() { return std::string(static_cast<size_t>(pick(3)), " \n\t"[pick(3)]); };
    std::function<std::string(int)> value = [&](int depth) -> std::string {
        const int k = depth > 4 ? pick(4) : pick(6);
        switch (k) {
            case 0: return std::to_string(pick(2000) - 1000) + (pick(2) ? "." + std::to_string(pick(100)) : "") + (pick(3) == 0 ? "e-" + std::to_string(pick(9)) : "");
            case 1: {
                static const std::vector<std::string> bodies = {"a", "b c", "\\n", "\\u00ff", "\\\"", "x/y"};
                return "\"" + bodies[static_cast<size_t>(pick(static_cast<int>(bodies.size())))] + "\"";
            }
            case 2: return pick(2) ? "true" : "null";
            case 3: return "\"\"";
            case 4: {
                std::string s = "[" + ws();
                const int n = pick(4);
                for (int i = 0; i < n; ++i) s += (i ? "," + ws() : "") + value(depth + 1) + ws();
                return s + "]";
            }
            default: {
                std::string s = "{" + ws();
                const int n = pick(4);
                for (int i = 0; i < n; ++i) s += (i ? "," + ws() : "") + "\"k" + std::to_string(i) + "\"" + ws() + ":" + ws() + value(depth + 1) + ws();
                return s + "}";
            }
        }
    };
    int edits_taken = 0;
    for (int doc = 0; doc < 300; ++doc) {
        std::string v = value(0);
        if (v[0] != '{' && v[0] != '[') v = "[" + v + "]";  // a bare number never completes
        ASSERT_TRUE(nlohmann::json::accept(v)) << v;
        JsonPrefix j;
        for (const char c : v) ASSERT_TRUE(j.feed(static_cast<unsigned char>(c))) << v;
        EXPECT_TRUE(j.done()) << v;
        for (int e = 0; e < 20; ++e) {
            std::string m = v;
            const size_t at = static_cast<size_t>(pick(static_cast<int>(m.size())));
            const char c = "{}[],:\"0.e-tn \\a"[pick(16)];
            if (pick(2)) m[at] = c;
            else m.insert(at, 1, c);
            if (complete(m)) {
                ++edits_taken;
                EXPECT_TRUE(nlohmann::json::accept(m)) << nlohmann::json(m).dump() << " from " << nlohmann::json(v).dump();
            }
        }
    }
    EXPECT_GT(edits_taken, 100);
}

std::shared_ptr<const TokenTexts> byte_texts() {
    static const auto t = std::make_shared<const TokenTexts>(
        Tokenizer(std::make_shared<const runtime::Tokenizer>(runtime::byte_vocab_tokenizer())));
    return t;
}

// Draws with random logits under the mask until the constraint is complete (bounded): returns the text.
std::string run(JsonConstraint & c, std::mt19937 & rng, size_t max_steps, bool & completed) {
    const auto & texts = byte_texts()->text;
    std::normal_distribution<float> nd;
    std::string out;
    completed = false;
    for (size_t step = 0; step < max_steps && !c.complete(); ++step) {
        std::vector<float> logits(texts.size());
        for (size_t i = 0; i < logits.size(); ++i) {
            logits[i] = nd(rng);
            // Lean towards ending things, so most runs complete.
            const std::string & t = texts[i];
            if (t == "}" || t == "]" || t == "\"" || t == "1" || t == "\n" || t == "<" || t == "/") logits[i] += 4.0f;
        }
        c.mask(logits.data(), logits.size());
        size_t best = 0;
        for (size_t i = 1; i < logits.size(); ++i)
            if (logits[i] > logits[best]) best = i;
        EXPECT_TRUE(std::isfinite(logits[best])) << "no token allowed after " << out;
        if (!std::isfinite(logits[best])) break;
        EXPECT_TRUE(c.allowed(static_cast<int32_t>(best)));
        c.accept(static_cast<int32_t>(best));
        out += texts[best];
    }
    completed = c.complete();
    return out;
}

TEST(JsonReply, TheMaskKeepsTheReplyJsonUntilItIsComplete) {
    std::mt19937 rng(5);
    int completed_runs = 0;
    for (int r = 0; r < 40; ++r) {
        JsonConstraint c(byte_texts(), "", true, "");
        bool done = false;
        const std::string out = run(c, rng, 400, done);
        EXPECT_TRUE(prefix_ok(out, true)) << out;
        if (done) {
            ++completed_runs;
            const auto j = nlohmann::json::parse(out, nullptr, false);
            EXPECT_TRUE(j.is_object()) << out;
        }
    }
    EXPECT_GT(completed_runs, 20);
    // Nothing but '{' and whitespace may open an object-only reply; control tokens never come.
    JsonConstraint c(byte_texts(), "", true, "");
    const auto & texts = byte_texts()->text;
    for (size_t i = 0; i < texts.size(); ++i) {
        const bool expect = texts[i] == "{" || texts[i] == " " || texts[i] == "\n" || texts[i] == "\t" || texts[i] == "\r" ||
                            (!texts[i].empty() && texts[i].find_first_not_of(" \n\t\r") == std::string::npos &&
                             texts[i].size() <= static_cast<size_t>(JsonPrefix::kMaxSpaces)) ||
                            (texts[i].size() > 1 && texts[i].find_first_not_of(" \n\t\r") != std::string::npos &&
                             prefix_ok(texts[i], true));
        EXPECT_EQ(c.allowed(static_cast<int32_t>(i)), expect) << "token " << i << " '" << texts[i] << "'";
    }
}

TEST(JsonReply, AForcedCallEndsWithItsClosingTag) {
    std::mt19937 rng(9);
    int calls = 0;
    for (int r = 0; r < 30; ++r) {
        const std::string start = "{\"name\": \"f\", \"arguments\": ";
        JsonConstraint c(byte_texts(), start, true, "\n</tool_call>");
        bool done = false;
        const std::string out = run(c, rng, 400, done);
        if (!done) continue;
        ASSERT_TRUE(out.ends_with("}\n</tool_call>")) << out;
        ToolCallParser p({"f"});
        std::vector<ToolCallParser::Event> e = p.feed("<tool_call>\n" + start + out);
        const auto rest = p.finish();
        e.insert(e.end(), rest.begin(), rest.end());
        ASSERT_EQ(e.size(), 1u) << out;
        EXPECT_TRUE(e[0].call) << out;
        ++calls;
    }
    EXPECT_GT(calls, 10);
}

}  // namespace
}  // namespace offgrid::server

namespace offgrid::test {
namespace {

TEST(JsonReply, ServerHoldsRepliesToJson) {
    ServerProcess s({"-np", "2", "-c", "4096", "-t", "1", "--quiet"});
    const json msgs = {{{"role", "user"}, {"content", "Give me a JSON object."}}};
    json body = {{"model", "tiny"}, {"messages", msgs}, {"max_tokens", 40}, {"temperature", 0}};
    Reply plain = post(s, "/v1/chat/completions", body);
    ASSERT_EQ(plain.status, 200) << plain.body;
    const std::string free_text = plain.j["choices"][0]["message"]["content"];
    EXPECT_FALSE(server::JsonPrefix(true).feed(free_text)) << "the model writes JSON anyway: the test shows nothing";

    body["response_format"] = {{"type", "json_object"}};
    for (const bool stream : {false, true}) {
        std::string text, reason;
        if (stream) {
            json sb = body;
            sb["stream"] = true;
            Stream st = post_stream(s, "/v1/chat/completions", sb);
            ASSERT_TRUE(st.done);
            text = st.text;
            reason = st.chunks.back()["choices"][0]["finish_reason"];
        } else {
            Reply r = post(s, "/v1/chat/completions", body);
            ASSERT_EQ(r.status, 200) << r.body;
            text = r.j["choices"][0]["message"]["content"];
            reason = r.j["choices"][0]["finish_reason"];
        }
        server::JsonPrefix j(true);
        EXPECT_TRUE(j.feed(text)) << text;
        EXPECT_NE(text.find('{'), std::string::npos) << text;
        if (reason == "stop") EXPECT_TRUE(nlohmann::json::accept(text)) << text;
        else EXPECT_EQ(reason, "length");
    }
    // A forced call: the reply continues the opened block as JSON.
    json forced = {{"model", "tiny"}, {"messages", msgs}, {"max_tokens", 40}, {"temperature", 0},
                   {"tools", json::parse(R"([{"type": "function", "function": {"name": "lookup"}}])")},
                   {"tool_choice", {{"type", "function"}, {"function", {{"name", "lookup"}}}}}};
    Reply f = post(s, "/v1/chat/completions", forced);
    ASSERT_EQ(f.status, 200) << f.body;
    const json & m = f.j["choices"][0]["message"];
    if (m.contains("tool_calls")) {
        EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "lookup");
        EXPECT_EQ(f.j["choices"][0]["finish_reason"], "tool_calls");
    } else {
        const std::string t = m["content"];
        const std::string start = "<tool_call>\n{\"name\": \"lookup\", \"arguments\": ";
        ASSERT_TRUE(t.starts_with(start)) << t;
        server::JsonPrefix j;
        EXPECT_TRUE(j.feed(t.substr(start.size() - std::string("{\"name\": \"lookup\", \"arguments\": ").size()))) << t;
    }
    Reply bad = post(s, "/v1/chat/completions", json{{"model", "tiny"}, {"messages", msgs}, {"response_format", {{"type", "json_schema"}}}});
    EXPECT_EQ(bad.status, 400);
    EXPECT_EQ(bad.j["error"]["param"], "response_format");
    EXPECT_EQ(s.stop(), 0) << s.log();
}

}  // namespace
}  // namespace offgrid::test
