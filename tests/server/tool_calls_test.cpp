// Tool calling in the Qwen family's format: the chat template's tools section, assistant calls and tool results
// (offgrid/chat.h), the reply parser (ToolCallParser), the request fields (tools, tool_choice,
// parallel_tool_calls) and OpenAI's tool_calls shapes (server/protocol.h), and a real server with tools.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/shared_dir.h"
#include "runtime/byte_vocab.h"
#include "server/chat_template.h"
#include "server/json_constraint.h"
#include "server/protocol.h"
#include "server_helpers.h"

namespace offgrid::server {
namespace {

Tokenizer byte_tokenizer() { return Tokenizer(std::make_shared<const runtime::Tokenizer>(runtime::byte_vocab_tokenizer())); }

const std::string kToolF = R"({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}})";

const std::string kToolsSection =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
    kToolF +
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>";

TEST(ToolCalls, TheToolsJoinTheSystemTurn) {
    const Tokenizer tok = byte_tokenizer();
    ChatOptions o;
    o.tools = {kToolF};
    EXPECT_EQ(tok.detokenize(render_chatml(tok, {{"system", "S"}, {"user", "U"}}, o)),
              "<|im_start|>system\nS\n\n" + kToolsSection + "<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
    // Without a system message the tools have a system turn of their own.
    EXPECT_EQ(tok.detokenize(render_chatml(tok, {{"user", "U"}}, o)),
              "<|im_start|>system\n" + kToolsSection + "<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
    // Without tools nothing changes.
    EXPECT_EQ(tok.detokenize(render_chatml(tok, {{"system", "S"}, {"user", "U"}})),
              "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ToolCalls, CallsAndResultsInTheConversation) {
    const Tokenizer tok = byte_tokenizer();
    const std::vector<ChatMessage> msgs = {
        {"user", "U"},
        {"assistant", "", {{"f", R"({"a": 1})"}, {"g", "{}"}}},
        {"tool", "R1"},
        {"tool", "R2"},
        {"assistant", "C", {{"f", "{}"}}},
        {"tool", "R3"},
    };
    ChatOptions o;
    o.assistant_start = "<tool_call>\n";
    EXPECT_EQ(tok.detokenize(render_chatml(tok, msgs, o)),
              "<|im_start|>user\nU<|im_end|>\n"
              "<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>\n"
              "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call><|im_end|>\n"
              "<|im_start|>user\n<tool_response>\nR1\n</tool_response>\n<tool_response>\nR2\n</tool_response><|im_end|>\n"
              "<|im_start|>assistant\nC\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call><|im_end|>\n"
              "<|im_start|>user\n<tool_response>\nR3\n</tool_response><|im_end|>\n"
              "<|im_start|>assistant\n<tool_call>\n");
}

// The byte vocabulary with ChatML's markers and the tool tags as tokens (as the Qwen family's vocabularies have
// them: control and user-defined tokens).
Tokenizer tagged_tokenizer() {
    runtime::TokenizerSpec spec = runtime::byte_vocab_spec();
    if (spec.token_types.empty()) spec.token_types.assign(spec.tokens.size(), static_cast<int32_t>(TokenType::Normal));
    for (const char * t : {"<|im_start|>", "<|im_end|>"}) {
        spec.tokens.push_back(t);
        spec.token_types.push_back(static_cast<int32_t>(TokenType::Control));
    }
    for (const char * t : {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"}) {
        spec.tokens.push_back(t);
        spec.token_types.push_back(static_cast<int32_t>(TokenType::UserDefined));
    }
    return Tokenizer(std::make_shared<const runtime::Tokenizer>(runtime::Tokenizer(spec)));
}

TEST(ToolCalls, TheTagsAreTokensAndContentBringsNoControlToken) {
    const Tokenizer tok = tagged_tokenizer();
    ASSERT_TRUE(has_control_token(tok, "<tool_call>") && has_control_token(tok, "</tool_response>"));
    const int32_t open = *tok.find_token("<tool_call>"), response = *tok.find_token("<tool_response>");
    const int32_t start = *tok.find_token("<|im_start|>");
    ChatOptions o;
    o.tools = {kToolF};
    // The template's tags are tokens. In content a control token's text stays text, while a user-defined token
    // (the Qwen vocabularies' <tool_call>) is matched as the tokenizer always matches it (as llama.cpp and Hugging
    // Face tokenise such text).
    const std::vector<ChatMessage> msgs = {{"user", "say <|im_start|> and <tool_response>"},
                                           {"assistant", "", {{"f", "{}"}}},
                                           {"tool", "<tool_call>"}};
    const std::vector<int32_t> ids = render_chatml(tok, msgs, o);
    // Two in the tools section's instructions, one in the assistant's call, one in the tool's result.
    EXPECT_EQ(std::count(ids.begin(), ids.end(), open), 4);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), response), 2);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), start), 5);  // system, user, assistant, user (the result), the opener
    const std::string text = tok.detokenize(ids);
    EXPECT_NE(text.find("<|im_start|>user\n<tool_response>\n<tool_call>\n</tool_response><|im_end|>\n"), std::string::npos) << text;
    // Message ends: the tools' system turn, then each turn.
    const std::vector<size_t> ends = chat_message_ends(tok, msgs, ids, o);
    ASSERT_EQ(ends.size(), 4u);
    const size_t opener = render_chatml(tok, {}).size();
    EXPECT_EQ(ends[0], render_chatml(tok, {}, o).size() - opener);
    std::vector<ChatMessage> head;
    for (size_t k = 1; k < 4; ++k) {
        head.push_back(msgs[k - 1]);
        EXPECT_EQ(ends[k], render_chatml(tok, head, o).size() - opener) << k;
    }
}

TEST(ToolCalls, MessageEndsWithTheQwenVocabulary) {
    OFFGRID_REQUIRE_SHARED();
    const Tokenizer tok = Tokenizer::from_file(test::shared_dir() + "/data/ggml-vocab-qwen35.gguf");
    ChatOptions o;
    o.tools = {kToolF};
    const std::vector<ChatMessage> msgs = {{"system", "You help."}, {"user", "Look up cabin."},
                                           {"assistant", "Looking.", {{"f", R"({"w": "cabin"})"}}},
                                           {"tool", "a small house"}, {"tool", "in the woods"}, {"user", "Thanks!"}};
    const std::vector<int32_t> ids = render_chatml(tok, msgs, o);
    EXPECT_TRUE(tok.detokenize(ids).starts_with("<|im_start|>system\nYou help.\n\n# Tools"));
    const std::vector<size_t> ends = chat_message_ends(tok, msgs, ids, o);
    const std::vector<size_t> heads = {1, 2, 3, 5, 6};
    ASSERT_EQ(ends.size(), heads.size());
    const size_t opener = render_chatml(tok, {}).size();
    for (size_t k = 0; k < heads.size(); ++k) {
        const std::vector<ChatMessage> head(msgs.begin(), msgs.begin() + static_cast<std::ptrdiff_t>(heads[k]));
        EXPECT_EQ(ends[k], render_chatml(tok, head, o).size() - opener) << k;
    }
}

TEST(ToolCalls, MessageEndsCountARunOfToolResultsOnce) {
    const Tokenizer tok = byte_tokenizer();
    ChatOptions o;
    o.tools = {kToolF};
    const std::vector<ChatMessage> msgs = {{"system", "S"}, {"user", "U"}, {"assistant", "", {{"f", "{}"}}},
                                           {"tool", "R1"}, {"tool", "R2"}, {"user", "V"}};
    const std::vector<int32_t> ids = render_chatml(tok, msgs, o);
    const std::vector<size_t> ends = chat_message_ends(tok, msgs, ids, o);
    const size_t opener = render_chatml(tok, {}).size();
    // system+tools, user, assistant, the two results, user.
    const std::vector<size_t> heads = {1, 2, 3, 5, 6};
    ASSERT_EQ(ends.size(), heads.size());
    for (size_t k = 0; k < heads.size(); ++k) {
        const std::vector<ChatMessage> head(msgs.begin(), msgs.begin() + static_cast<std::ptrdiff_t>(heads[k]));
        EXPECT_EQ(ends[k], render_chatml(tok, head, o).size() - opener) << k;
    }
}

// What a parser gives for a whole reply fed in the given pieces: the text and the calls as "name(args)".
struct Parsed {
    std::string text;
    std::vector<std::string> calls;
};
Parsed parse(const std::vector<std::string> & pieces, std::vector<std::string> functions = {"f", "g"}, bool parallel = true) {
    ToolCallParser p(std::move(functions), parallel);
    Parsed out;
    auto take = [&](const std::vector<ToolCallParser::Event> & events) {
        for (const auto & e : events) {
            if (e.call) out.calls.push_back(e.name + "(" + e.arguments + ")");
            else out.text += e.text;
        }
    };
    for (const auto & s : pieces) take(p.feed(s));
    take(p.finish());
    EXPECT_EQ(p.calls(), out.calls.size());
    return out;
}

TEST(ToolCalls, TheParserTakesCallsOutOfTheReply) {
    Parsed a = parse({"Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"b\": [1, 2], \"a\": \"x\"}}\n</tool_call>"});
    EXPECT_EQ(a.text, "Sure.");
    ASSERT_EQ(a.calls.size(), 1u);
    EXPECT_EQ(a.calls[0], R"(f({"b":[1,2],"a":"x"}))");  // compact, the keys in the model's order

    Parsed b = parse({"<tool_call>\n{\"name\": \"f\"}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": "
                      "\"{\\\"q\\\": 2}\"}\n</tool_call>\n\nDone."});
    EXPECT_EQ(b.text, "Done.");
    EXPECT_EQ(b.calls, (std::vector<std::string>{"f({})", "g({\"q\":2})"}));

    // Not calls: an unknown function, a body that is not a call, a block never closed; they stay text.
    const std::string unknown = "a\n<tool_call>{\"name\": \"h\"}</tool_call>";
    EXPECT_EQ(parse({unknown}).text, unknown);
    const std::string broken = "<tool_call>{\"name\": \"f\", </tool_call> b";
    EXPECT_EQ(parse({broken}).text, broken);
    const std::string array_args = "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>";
    EXPECT_EQ(parse({array_args}).text, array_args);
    const std::string open = "x <tool_call>{\"name\": \"f\"}";
    EXPECT_EQ(parse({open}).text, open);
    EXPECT_TRUE(parse({open}).calls.empty());

    // A stray byte inside a string argument (a byte token of the model) becomes U+FFFD, as the server sends it.
    Parsed stray = parse({"<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"a\xff\"}}</tool_call>"});
    EXPECT_EQ(stray.calls, (std::vector<std::string>{"f({\"s\":\"a\xef\xbf\xbd\"})"}));

    // parallel_tool_calls false: the first call only.
    Parsed one = parse({"<tool_call>{\"name\": \"f\"}</tool_call><tool_call>{\"name\": \"g\"}</tool_call>"}, {"f", "g"}, false);
    EXPECT_EQ(one.calls, (std::vector<std::string>{"f({})"}));
    EXPECT_EQ(one.text, "");
}

TEST(ToolCalls, TheParserGivesTheSameWhateverThePiecesAndPassesPlainTextThrough) {
    const std::vector<std::string> replies = {
        "Plain text with <tool and <tool_cal and trailing space  \n",
        "  lead\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"k\": \"v \\u00e9\"}}\n</tool_call>\n \nafter",
        "<tool_call>{\"name\": \"g\"}</tool_call>text<tool_call>{\"name\": \"zz\"}</tool_call>\n",
        "<<tool_call>>{}</tool_call><",
    };
    std::mt19937 rng(3);
    for (const std::string & r : replies) {
        const Parsed whole = parse({r});
        for (int trial = 0; trial < 50; ++trial) {
            std::vector<std::string> pieces;
            for (size_t at = 0; at < r.size();) {
                const size_t n = std::min<size_t>(r.size() - at, 1 + rng() % 5);
                pieces.push_back(r.substr(at, n));
                at += n;
            }
            const Parsed cut = parse(pieces);
            EXPECT_EQ(cut.text, whole.text) << r;
            EXPECT_EQ(cut.calls, whole.calls) << r;
        }
    }
    EXPECT_EQ(parse({replies[0]}).text, replies[0]);  // no block: byte for byte
    EXPECT_EQ(parse({replies[1]}).text, "  leadafter");
    // A text that may become the tag is held back only until it cannot.
    ToolCallParser p({"f"});
    std::vector<ToolCallParser::Event> e = p.feed("abc<tool");
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].text, "abc");
    e = p.feed("x");
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].text, "<toolx");
}

TEST(ToolCalls, TemplateJsonIsPythonsDumps) {
    const json v = json::parse(R"({"type": "function", "b": 1, "a": [true, null, 1.5, "\u00e9\n\"x\""], "o": {}})");
    EXPECT_EQ(template_json(v), "{\"type\": \"function\", \"b\": 1, \"a\": [true, null, 1.5, \"\xc3\xa9\\n\\\"x\\\"\"], \"o\": {}}");
}

ParseLimits limits() { return ParseLimits{"m", 4096, 256, ChatTemplate::ChatML}; }

json chat_body(json extra) {
    json b = {{"model", "m"}, {"messages", json::array({{{"role", "user"}, {"content", "U"}}})}};
    for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
    return b;
}

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "f", "description": "d"}},
                                     {"type": "function", "function": {"name": "g"}}])");

TEST(ToolCalls, RequestFieldsAndTheirErrors) {
    const Tokenizer tok = byte_tokenizer();
    auto text = [&](const ParsedRequest & pr) { return tok.detokenize(pr.prompts.at(0)); };
    const ParsedRequest plain = parse_generation(chat_body({}), true, tok, limits());
    EXPECT_TRUE(plain.tools.functions.empty());

    const ParsedRequest with = parse_generation(chat_body({{"tools", kTools}}), true, tok, limits());
    EXPECT_EQ(with.tools.functions, (std::vector<std::string>{"f", "g"}));
    EXPECT_TRUE(with.tools.parallel);
    EXPECT_NE(text(with).find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\"}}\n"
                              "{\"type\": \"function\", \"function\": {\"name\": \"g\"}}\n</tools>"),
              std::string::npos)
        << text(with);
    // The tools' system turn ends first: a snapshot place shared by every conversation with these tools.
    ASSERT_FALSE(with.choices[0].message_ends.empty());
    EXPECT_EQ(tok.detokenize(std::vector<int32_t>(with.prompts[0].begin(), with.prompts[0].begin() +
                                                                                static_cast<std::ptrdiff_t>(with.choices[0].message_ends[0])))
                  .substr(0, 22),
              "<|im_start|>system\n# T");

    // none: the tools are not shown, replies are text.
    const ParsedRequest none = parse_generation(chat_body({{"tools", kTools}, {"tool_choice", "none"}}), true, tok, limits());
    EXPECT_EQ(none.prompts, plain.prompts);
    EXPECT_TRUE(none.tools.functions.empty());
    // required and a named function open the reply with a call.
    const ParsedRequest req = parse_generation(chat_body({{"tools", kTools}, {"tool_choice", "required"}}), true, tok, limits());
    EXPECT_EQ(req.tools.reply_start, "<tool_call>\n");
    EXPECT_TRUE(text(req).ends_with("<|im_start|>assistant\n<tool_call>\n"));
    const ParsedRequest named = parse_generation(
        chat_body({{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "g"}}}}}, {"parallel_tool_calls", false}}),
        true, tok, limits());
    EXPECT_TRUE(text(named).ends_with("<|im_start|>assistant\n<tool_call>\n{\"name\": \"g\", \"arguments\": "));
    EXPECT_FALSE(named.tools.parallel);
    // The reply is held to the call's JSON, then its closing tag; it never speculates.
    const GenRequest::JsonReply & jr = named.choices[0].json;
    ASSERT_TRUE(jr.on && jr.schema);
    EXPECT_EQ(jr.prefix, "{\"name\": \"g\", \"arguments\": ");
    EXPECT_EQ(jr.suffix, "\n</tool_call>");
    EXPECT_FALSE(named.choices[0].speculative);
    EXPECT_TRUE(JsonPrefix(*jr.schema).feed(jr.prefix + "{\"x\": [1]}}"));
    EXPECT_FALSE(JsonPrefix(*jr.schema).feed(jr.prefix + "[1]"));  // arguments are an object
    EXPECT_FALSE(JsonPrefix(*jr.schema).feed("{\"name\": \"f\""));  // the named function only
    // Parameters JsonSchema cannot follow leave the arguments any object.
    const json odd = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                                       "properties": {"a": {"not": {"type": "null"}}}}}}])");
    const ParsedRequest loose = parse_generation(chat_body({{"tools", odd}, {"tool_choice", "required"}}), true, tok, limits());
    ASSERT_TRUE(loose.choices[0].json.schema);
    EXPECT_TRUE(JsonPrefix(*loose.choices[0].json.schema).feed("{\"name\": \"f\", \"arguments\": {\"a\": null, \"b\": 2}}"));
    // With the parameters' schema, and its $defs resolved in the parameters' own document.
    const json typed = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
        "properties": {"p": {"$ref": "#/$defs/P"}}, "required": ["p"], "additionalProperties": false,
        "$defs": {"P": {"enum": ["x", "y"]}}}}}])");
    const ParsedRequest strict = parse_generation(chat_body({{"tools", typed}, {"tool_choice", "required"}}), true, tok, limits());
    const JsonSchema & cs = *strict.choices[0].json.schema;
    EXPECT_TRUE(JsonPrefix(cs).feed("{\"name\": \"f\", \"arguments\": {\"p\": \"y\"}}"));
    EXPECT_FALSE(JsonPrefix(cs).feed("{\"arguments\""));  // the name first: it chooses the arguments' schema
    EXPECT_FALSE(JsonPrefix(cs).feed("{\"name\": \"f\", \"arguments\": {\"p\": \"z"));
    EXPECT_FALSE(JsonPrefix(cs).feed("{\"name\": \"f\", \"arguments\": {}"));
    // required among several functions: the name chooses the arguments' schema.
    const json two = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
        "properties": {"a": {"type": "integer"}}, "additionalProperties": false}}},
        {"type": "function", "function": {"name": "g", "parameters": {"type": "object",
        "properties": {"b": {"type": "boolean"}}, "additionalProperties": false}}}])");
    const ParsedRequest either = parse_generation(chat_body({{"tools", two}, {"tool_choice", "required"}}), true, tok, limits());
    const JsonSchema & es = *either.choices[0].json.schema;
    EXPECT_TRUE(JsonPrefix(es).feed("{\"name\": \"g\", \"arguments\": {\"b\": true}}"));
    EXPECT_FALSE(JsonPrefix(es).feed("{\"name\": \"g\", \"arguments\": {\"a\""));
    EXPECT_TRUE(JsonPrefix(es).feed("{\"name\": \"f\", \"arguments\": {\"a\": 5}}"));

    // An assistant's calls in the history, arguments as a string or an object.
    const json history = {{"model", "m"},
                          {"messages", json::parse(R"([{"role": "user", "content": "U"},
                              {"role": "assistant", "content": null, "tool_calls": [
                                  {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}},
                                  {"id": "c2", "type": "function", "function": {"name": "g", "arguments": {"y": [2]}}}]},
                              {"role": "tool", "tool_call_id": "c1", "content": "R"}])")}};
    EXPECT_NE(text(parse_generation(history, true, tok, limits()))
                  .find("<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
                        "<tool_call>\n{\"name\": \"g\", \"arguments\": {\"y\": [2]}}\n</tool_call><|im_end|>\n"
                        "<|im_start|>user\n<tool_response>\nR\n</tool_response><|im_end|>\n"),
              std::string::npos);

    auto fails = [&](json extra, const std::string & param) {
        try {
            parse_generation(chat_body(std::move(extra)), true, tok, limits());
            ADD_FAILURE() << "accepted; expected an error about " << param;
        } catch (const ApiError & e) {
            EXPECT_EQ(e.status, 400);
            EXPECT_EQ(e.param, param) << e.what();
        }
    };
    fails({{"tools", "f"}}, "tools");
    fails({{"tools", json::parse(R"([{"type": "retrieval"}])")}}, "tools[0].type");
    fails({{"tools", json::parse(R"([{"type": "function", "function": {"name": "a b"}}])")}}, "tools[0].function.name");
    fails({{"tools", json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": 3}}])")}}, "tools[0].function.parameters");
    fails({{"tools", json::parse(R"([{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}])")}},
          "tools[1].function.name");
    fails({{"tools", kTools}, {"tool_choice", "always"}}, "tool_choice");
    fails({{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "h"}}}}}}, "tool_choice");
    fails({{"tool_choice", "required"}}, "tool_choice");
    fails({{"tools", kTools}, {"parallel_tool_calls", 1}}, "parallel_tool_calls");
    json many = json::array();
    for (int i = 0; i < 65; ++i) many.push_back({{"type", "function"}, {"function", {{"name", "f" + std::to_string(i)}}}});
    EXPECT_NO_THROW(parse_generation(chat_body({{"tools", many}}), true, tok, limits()));
    fails({{"tools", many}, {"tool_choice", "required"}}, "tool_choice");
    json bad_call = chat_body({});
    bad_call["messages"].push_back({{"role", "assistant"}, {"tool_calls", {{{"type", "function"}, {"function", {{"name", 3}}}}}}});
    try {
        parse_generation(bad_call, true, tok, limits());
        ADD_FAILURE() << "a call without a name was taken";
    } catch (const ApiError & e) {
        EXPECT_EQ(e.param, "messages[1].tool_calls[0].function.name");
    }
}

TEST(ToolCalls, ReplyToolsGiveOpenAIsShapes) {
    ToolUse use;
    use.functions = {"f", "g"};
    std::vector<ReplyTools> r = reply_tools(use, "chatcmpl-abc1", 2);
    std::string content;
    json calls = json::array();
    r[1].add("Let me look.\n<tool_call>\n{\"name\": \"g\", \"arguments\": {\"p\": \"x\"}}\n</tool_", false, content, calls);
    EXPECT_EQ(content, "Let me look.");
    EXPECT_TRUE(calls.empty());
    r[1].add("call>", true, content, calls);
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0], json::parse(R"({"index": 0, "id": "call_abc1_1_0", "type": "function",
                                        "function": {"name": "g", "arguments": "{\"p\":\"x\"}"}})"));
    EXPECT_EQ(r[1].finish_reason("stop"), "tool_calls");
    EXPECT_EQ(r[1].finish_reason("length"), "length");
    EXPECT_EQ(r[0].finish_reason("stop"), "stop");

    // A forced call: the reply continues the opened block.
    use.reply_start = "<tool_call>\n{\"name\": \"f\", \"arguments\": ";
    ReplyTools forced(use, "x");
    std::string c2;
    json k2 = json::array();
    forced.add("{}}\n</tool_call>", true, c2, k2);
    ASSERT_EQ(k2.size(), 1u);
    EXPECT_EQ(k2[0]["function"]["name"], "f");
    EXPECT_EQ(c2, "");

    // Without tools the text passes through.
    ReplyTools off(ToolUse{}, "x");
    std::string c3;
    json k3 = json::array();
    off.add("<tool_call>{\"name\": \"f\"}</tool_call>", true, c3, k3);
    EXPECT_EQ(c3, "<tool_call>{\"name\": \"f\"}</tool_call>");
    EXPECT_TRUE(k3.empty());
}

}  // namespace
}  // namespace offgrid::server

namespace offgrid::test {
namespace {

// A real server: tools in the request change the prompt as the template says, and a reply without calls keeps
// its text and shape, streamed or not.
TEST(ToolCalls, ServerTakesToolsAndAnswersAsBefore) {
    ServerProcess s({"-np", "2", "-c", "4096", "-t", "1", "--quiet"});
    const json tools = json::parse(R"([{"type": "function", "function": {"name": "lookup", "description": "Looks a word up.",
                                        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}}}])");
    json body = {{"model", "tiny"},
                 {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Define cabin."}}}},
                 {"tools", tools},
                 {"max_tokens", 8},
                 {"temperature", 0}};
    server::ChatOptions o;
    o.tools = {server::template_json(server::json::parse(tools[0].dump()))};
    const Tokenizer tok = Tokenizer::from_file((work_dir() / "tiny.gguf").string());
    const size_t expected = server::render_chatml(tok, {{"system", "Be brief."}, {"user", "Define cabin."}}, o).size();
    Reply r = post(s, "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.j["usage"]["prompt_tokens"], expected);
    const json & msg = r.j["choices"][0]["message"];
    ASSERT_TRUE(msg["content"].is_string()) << r.body;
    EXPECT_FALSE(msg.contains("tool_calls"));
    const std::string reason = r.j["choices"][0]["finish_reason"];
    EXPECT_TRUE(reason == "length" || reason == "stop");

    json sb = body;
    sb["stream"] = true;
    Stream st = post_stream(s, "/v1/chat/completions", sb);
    EXPECT_TRUE(st.done);
    EXPECT_EQ(st.text, msg["content"]);

    // A named function opens the reply with its call: the prompt grows by the opened block.
    json forced = body;
    forced["tool_choice"] = {{"type", "function"}, {"function", {{"name", "lookup"}}}};
    Reply f = post(s, "/v1/chat/completions", forced);
    ASSERT_EQ(f.status, 200) << f.body;
    o.assistant_start = "<tool_call>\n{\"name\": \"lookup\", \"arguments\": ";
    EXPECT_EQ(f.j["usage"]["prompt_tokens"],
              server::render_chatml(tok, {{"system", "Be brief."}, {"user", "Define cabin."}}, o).size());
    const json & fm = f.j["choices"][0]["message"];
    // The random model writes no valid call: the opened block comes back as text.
    if (!fm.contains("tool_calls")) {
        EXPECT_TRUE(fm["content"].get<std::string>().starts_with("<tool_call>")) << f.body;
    }

    Reply bad = post(s, "/v1/chat/completions", json{{"model", "tiny"}, {"messages", body["messages"]}, {"tool_choice", "required"}});
    EXPECT_EQ(bad.status, 400);
    EXPECT_EQ(bad.j["error"]["param"], "tool_choice");
    EXPECT_EQ(s.stop(), 0) << s.log();
}

}  // namespace
}  // namespace offgrid::test
