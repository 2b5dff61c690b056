// Replies held to JSON (server/json_constraint.h): the prefix automaton against nlohmann's parser, the token mask
// on a byte vocabulary driven to completion by random logits, and a real server with response_format json_object
// and a forced tool call.
#include <gtest/gtest.h>

#include <algorithm>
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
        const size_t kept = c.mask(logits.data(), logits.size());
        // The mask's shortcuts decide as allowed() does, token by token.
        size_t finite = 0;
        for (size_t i = 0; i < logits.size(); ++i) {
            finite += std::isfinite(logits[i]) ? 1 : 0;
            if (std::isfinite(logits[i]) != c.allowed(static_cast<int32_t>(i))) {
                ADD_FAILURE() << "token " << i << " after " << out;
                break;
            }
        }
        EXPECT_EQ(kept, finite);
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
        JsonConstraint c(byte_texts(), nullptr, true, "", "");
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
    JsonConstraint c(byte_texts(), nullptr, true, "", "");
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

std::shared_ptr<const JsonSchema> call_schema() {
    const nlohmann::ordered_json params = nlohmann::ordered_json::parse(
        R"({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": false})");
    return JsonSchema::tool_call({"f"}, {&params});
}

TEST(JsonReply, AForcedCallEndsWithItsClosingTag) {
    std::mt19937 rng(9);
    int calls = 0;
    for (int r = 0; r < 30; ++r) {
        const std::string start = "{\"name\": \"f\", \"arguments\": ";
        JsonConstraint c(byte_texts(), call_schema(), true, start, "\n</tool_call>");
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


using ojson = nlohmann::ordered_json;

bool schema_prefix(const JsonSchema & s, std::string_view text) {
    JsonPrefix j(s);
    return j.feed(text);
}
bool schema_complete(const JsonSchema & s, std::string_view text) {
    JsonPrefix j(s);
    return j.feed(text) && j.done();
}

const char * const kPerson = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "description": "ignored"},
    "age": {"type": "integer", "minimum": 0},
    "tags": {"type": "array", "items": {"enum": ["a", "bc"]}, "minItems": 1, "maxItems": 2},
    "kind": {"enum": [1, 12, "x", true, {"k": null}]},
    "opt": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "pet": {"$ref": "#/$defs/Pet"}
  },
  "required": ["name", "age"],
  "additionalProperties": false,
  "$defs": {"Pet": {"type": "object", "properties": {"legs": {"type": "number"}}, "additionalProperties": {"type": "boolean"}}}
})";

TEST(JsonReply, ASchemaHoldsKeysTypesEnumsAndCounts) {
    const auto s = JsonSchema::compile(ojson::parse(kPerson));
    const JsonSchema & p = *s;
    EXPECT_TRUE(schema_complete(p, R"({"name": "A", "age": 3})"));
    EXPECT_TRUE(schema_complete(p, R"({"age":-3,"name":"\u00e9","tags":["bc"],"kind":12,"opt":null,"pet":{"legs":3.5,"x":true}})"));
    EXPECT_TRUE(schema_complete(p, R"({"name": "A", "age": 3, "kind": {"k":null}, "opt": "s", "tags": ["a", "a"]})"));
    EXPECT_TRUE(schema_complete(p, R"({"name": "A", "age": 3, "kind": 1})"));
    EXPECT_TRUE(schema_complete(p, R"({"name": "A", "age": 3, "kind": true})"));
    EXPECT_TRUE(schema_prefix(p, R"({"nam)"));
    EXPECT_FALSE(schema_prefix(p, R"({"nam")"));                     // not a property
    EXPECT_FALSE(schema_prefix(p, R"({"size")"));
    EXPECT_FALSE(schema_prefix(p, R"({"age": 3.5)"));                 // an integer
    EXPECT_FALSE(schema_prefix(p, R"({"age": 3e2)"));
    EXPECT_FALSE(schema_prefix(p, R"({"name": 1)"));                  // a string
    EXPECT_FALSE(schema_prefix(p, R"({"name": "A"})"));               // age is required
    EXPECT_FALSE(schema_prefix(p, R"({})"));
    EXPECT_FALSE(schema_prefix(p, R"({"name": "A", "name")"));        // once
    EXPECT_FALSE(schema_prefix(p, R"({"name": "A", "age": 1, "tags": [])"));           // minItems 1
    EXPECT_FALSE(schema_prefix(p, R"({"name": "A", "age": 1, "tags": ["a", "bc",)"));  // maxItems 2
    EXPECT_FALSE(schema_prefix(p, R"({"name": "A", "age": 1, "tags": ["b"])"));
    EXPECT_FALSE(schema_prefix(p, R"({"name": "A", "age": 1, "kind": 2)"));
    EXPECT_FALSE(schema_prefix(p, R"({"name": "A", "age": 1, "kind": 123)"));
    EXPECT_FALSE(schema_prefix(p, R"({"name": "A", "age": 1, "kind": "y")"));
    EXPECT_FALSE(schema_prefix(p, R"({"name": "A", "age": 1, "kind": {"k": null})"));  // enum values as compact JSON
    EXPECT_FALSE(schema_prefix(p, R"({"name": "A", "age": 1, "opt": 1)"));
    EXPECT_FALSE(schema_prefix(p, R"({"name": "A", "age": 1, "pet": {"x": 1)"));        // other keys: booleans
    EXPECT_FALSE(schema_prefix(p, R"([)"));

    // A recursive schema through "#".
    const auto tree = JsonSchema::compile(ojson::parse(R"({"type": "object", "properties": {"v": {"type": "integer"},
        "kids": {"type": "array", "items": {"$ref": "#"}}}, "required": ["v"], "additionalProperties": false})"));
    EXPECT_TRUE(schema_complete(*tree, R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": [{"v": 4, "kids": []}]}]})"));
    EXPECT_FALSE(schema_prefix(*tree, R"({"v": 1, "kids": [{"kids": []})"));

    // What the compiler refuses, with where and why.
    for (const char * bad : {R"({"type": "object", "not": {}})", R"({"anyOf": [{"type": "object"}, {"type": "object"}]})",
                             R"({"type": "array", "minItems": 3, "maxItems": 2})", R"({"properties": {"a": {}}, "required": ["b"]})",
                             R"({"type": "integer"})", R"({"$ref": "#/$defs/Missing"})", R"({"properties": {"a": false}})",
                             R"({"type": "array", "items": [{}, {}]})", R"({"type": "strnig"})", R"({"enum": []})"}) {
        EXPECT_THROW(JsonSchema::compile(ojson::parse(bad)), std::invalid_argument) << bad;
    }
    EXPECT_NO_THROW(JsonSchema::compile(ojson::parse(R"({})")));
    EXPECT_NO_THROW(JsonSchema::compile(ojson::parse(R"({"allOf": [{"type": "object"}], "title": "t", "format": "x"})")));
}

TEST(JsonReply, AToolCallsNameChoosesItsArgumentsSchema) {
    const ojson pf = ojson::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                                      "additionalProperties": false})");
    const ojson pg = ojson::parse(R"({"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"],
                                      "additionalProperties": false})");
    const auto call = JsonSchema::tool_call({"f", "g"}, {&pf, &pg});
    EXPECT_TRUE(schema_complete(*call, R"({"name": "f", "arguments": {"a": 1}})"));
    EXPECT_TRUE(schema_complete(*call, R"({"name":"g","arguments":{"b":"x"}})"));
    EXPECT_FALSE(schema_prefix(*call, R"({"name": "f", "arguments": {"b")"));  // g's argument under f
    EXPECT_FALSE(schema_prefix(*call, R"({"name": "g", "arguments": {"a")"));
    EXPECT_FALSE(schema_prefix(*call, R"({"arguments")"));                     // the name comes first
    EXPECT_FALSE(schema_prefix(*call, R"({"name": "h")"));
    EXPECT_FALSE(schema_prefix(*call, R"({"name": "f", "arguments": {"a": 1}, ")"));
    // Parameters compile() refuses, or none: any object.
    const ojson odd = ojson::parse(R"({"type": "object", "properties": {"a": {"not": {}}}})");
    const auto loose = JsonSchema::tool_call({"f", "g"}, {&odd, nullptr});
    EXPECT_TRUE(schema_complete(*loose, R"({"name": "f", "arguments": {"zz": [1]}})"));
    EXPECT_TRUE(schema_complete(*loose, R"({"name": "g", "arguments": {}})"));
    EXPECT_FALSE(schema_prefix(*loose, R"({"name": "g", "arguments": [)"));
    EXPECT_THROW(JsonSchema::tool_call({}, {}), std::invalid_argument);

    // Generated calls: each one's arguments are its function's.
    std::mt19937 rng(17);
    int checked = 0;
    for (int r = 0; r < 60; ++r) {
        JsonConstraint c(byte_texts(), call, true, "", "");
        bool done = false;
        const std::string out = run(c, rng, 400, done);
        EXPECT_TRUE(schema_prefix(*call, out)) << out;
        if (!done || std::any_of(out.begin(), out.end(), [](char ch) { return static_cast<unsigned char>(ch) >= 0x80; })) continue;
        const auto v = nlohmann::json::parse(out, nullptr, false);
        ASSERT_TRUE(v.is_object()) << out;
        const nlohmann::json & a = v["arguments"];
        if (v["name"] == "f") EXPECT_TRUE(a.size() == 1 && a["a"].is_number_integer()) << out;
        else EXPECT_TRUE(v["name"] == "g" && a.size() == 1 && a["b"].is_string()) << out;
        ++checked;
    }
    EXPECT_GT(checked, 20);
}

// An independent check of a finished value against kPerson's keywords, for the generation test.
bool person_ok(const nlohmann::json & v) {
    if (!v.is_object() || !v.contains("name") || !v.contains("age")) return false;
    for (auto it = v.begin(); it != v.end(); ++it) {
        const std::string & k = it.key();
        const nlohmann::json & x = it.value();
        if (k == "name" && !x.is_string()) return false;
        if (k == "age" && !x.is_number_integer()) return false;
        if (k == "tags") {
            if (!x.is_array() || x.empty() || x.size() > 2) return false;
            for (const auto & t : x)
                if (t != "a" && t != "bc") return false;
        }
        if (k == "kind" && x != 1 && x != 12 && x != "x" && x != true && x != nlohmann::json::parse(R"({"k": null})")) return false;
        if (k == "opt" && !x.is_string() && !x.is_null()) return false;
        if (k == "pet") {
            if (!x.is_object()) return false;
            for (auto p = x.begin(); p != x.end(); ++p)
                if (p.key() == "legs" ? !p.value().is_number() : !p.value().is_boolean()) return false;
        }
        if (k != "name" && k != "age" && k != "tags" && k != "kind" && k != "opt" && k != "pet") return false;
    }
    return true;
}

TEST(JsonReply, TheMaskKeepsTheReplyInItsSchema) {
    const auto schema = JsonSchema::compile(ojson::parse(kPerson));
    std::mt19937 rng(21);
    int completed = 0;
    for (int r = 0; r < 60; ++r) {
        JsonConstraint c(byte_texts(), schema, true, "", "");
        bool done = false;
        const std::string out = run(c, rng, 600, done);
        EXPECT_TRUE(schema_prefix(*schema, out)) << out;
        if (!done) continue;
        // String bytes are the tokens' own: a byte token may leave invalid UTF-8, which the parser refuses.
        if (std::any_of(out.begin(), out.end(), [](char ch) { return static_cast<unsigned char>(ch) >= 0x80; })) continue;
        ++completed;
        const auto v = nlohmann::json::parse(out, nullptr, false);
        EXPECT_TRUE(person_ok(v)) << nlohmann::json(out).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
    }
    EXPECT_GT(completed, 20);
}
TEST(JsonReply, ServerHoldsRepliesToJson) {
    using test::json;
    using test::post;
    using test::Reply;
    using test::ServerProcess;
    using test::Stream;
    using test::post_stream;
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
        if (reason == "stop") {
            EXPECT_TRUE(nlohmann::json::accept(text)) << text;
        } else {
            EXPECT_EQ(reason, "length");
        }
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
    // json_schema: the reply is a prefix of a value of the schema (the random model rarely finishes one).
    const json schema = json::parse(server::kPerson);
    json structured = {{"model", "tiny"}, {"messages", msgs}, {"max_tokens", 60}, {"temperature", 0},
                       {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", schema}}}}}};
    Reply sr = post(s, "/v1/chat/completions", structured);
    ASSERT_EQ(sr.status, 200) << sr.body;
    const std::string st = sr.j["choices"][0]["message"]["content"];
    const auto compiled = server::JsonSchema::compile(ojson::parse(schema.dump()));
    server::JsonPrefix sp(*compiled);
    EXPECT_TRUE(sp.feed(st)) << st;
    if (sr.j["choices"][0]["finish_reason"] == "stop") {
        EXPECT_TRUE(server::person_ok(json::parse(st))) << st;
    }
    // A forced call holds its arguments to the function's parameters.
    json typed = forced;
    typed["tools"] = json::array({{{"type", "function"}, {"function", {{"name", "lookup"}, {"parameters", schema}}}}});
    Reply tr = post(s, "/v1/chat/completions", typed);
    ASSERT_EQ(tr.status, 200) << tr.body;
    const json & tm = tr.j["choices"][0]["message"];
    if (tm.contains("tool_calls")) {
        EXPECT_TRUE(server::person_ok(json::parse(tm["tool_calls"][0]["function"]["arguments"].get<std::string>())));
    } else {
        const std::string t = tm["content"];
        const std::string start = "<tool_call>\n";
        ASSERT_TRUE(t.starts_with(start)) << t;
        const ojson params = ojson::parse(schema.dump());
        const auto call = server::JsonSchema::tool_call({"lookup"}, {&params});
        server::JsonPrefix cp(*call);
        EXPECT_TRUE(cp.feed(t.substr(start.size()))) << t;
    }
    for (const json & rf : {json{{"type", "json_schema"}}, json{{"type", "json_schema"}, {"json_schema", {{"schema", {{"not", json::object()}}}}}},
                            json{{"type", "xml"}}}) {
        Reply bad = post(s, "/v1/chat/completions", json{{"model", "tiny"}, {"messages", msgs}, {"response_format", rf}});
        EXPECT_EQ(bad.status, 400) << rf.dump();
        EXPECT_EQ(bad.j["error"]["param"], "response_format") << bad.body;
    }
    EXPECT_EQ(s.stop(), 0) << s.log();
}

}  // namespace
}  // namespace offgrid::server
