// OpenAI's request shapes: parsing and validation of /v1/completions and /v1/chat/completions bodies into the
// scheduler's GenRequests, and the error object every failure answers with
// ({"error": {"message", "type", "param", "code"}}). Every bad input is an ApiError with a 4xx status.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "offgrid/tokenizer.h"
#include "server/chat_template.h"
#include "server/scheduler.h"

namespace offgrid::server {

using json = nlohmann::ordered_json;  // objects keep their keys' order (a tool's definition is rendered as sent)

struct ApiError : std::runtime_error {
    ApiError(int status, std::string message, std::string type = "invalid_request_error", std::string param = {},
             std::string code = {})
        : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)), code(std::move(code)) {}
    int status;
    std::string type, param, code;
};

json error_body(const std::string & message, const std::string & type, const std::string & param = {},
                const std::string & code = {});

inline constexpr size_t kMaxStopStrings = 4;  // as OpenAI
inline constexpr int32_t kMaxChoices = 16;
inline constexpr int32_t kMaxTopLogprobs = 20;
inline constexpr size_t kMaxTools = 128;  // as OpenAI

struct ParseLimits {
    std::string model_id;     // the name /v1/models lists; requests must name it
    uint32_t seq_capacity;    // most tokens one sequence holds (prompt + generated)
    int32_t n_vocab;
    ChatTemplate chat_template;
};

// A chat request's tools: what its replies' ToolCallParser needs.
struct ToolUse {
    std::vector<std::string> functions;  // the functions a reply may call; empty: replies are text only
    bool parallel = true;                // parallel_tool_calls
    std::string reply_start;             // text the prompt already opened the reply with (tool_choice forcing a call)
    std::shared_ptr<const JsonSchema> call;  // a forced call's object: a function's name and its parameters
};

struct ParsedRequest {
    bool chat = false;
    bool stream = false;
    bool include_usage = false;
    bool logprobs = false;
    int32_t n = 1;
    std::vector<std::vector<int32_t>> prompts;  // one per prompt (the chat has one)
    std::vector<GenRequest> choices;            // prompts x n, index = prompt * n + k
    ToolUse tools;                              // chat only
};

// Where each message of a rendered chat ends in its tokens (after the message's closing marker and newline),
// ascending, for every message whose end is exact: the rendered prompt starts with the messages rendered one by
// one up to there. The ends stop at the first message whose tokens merge with the next one's (template markers
// that are plain text in the vocabulary); with control-token markers every message's end is exact.
// With tools, the system turn that holds them ends first (with the conversation's system message, if it opens it),
// and a run of tool messages (one user turn) ends once, after its last message.
std::vector<size_t> chat_message_ends(const Tokenizer & tok, const std::vector<ChatMessage> & messages,
                                      std::span<const int32_t> rendered, const ChatOptions & options = {});

// Where the content of the message after the chat's first turn (its system prompt, or the tools' system turn)
// begins: the first turn and the next message's opening marker and role line, the longest prefix of the rendered
// tokens that another chat with the same first turn shares whatever its next message of that role says (in a
// vocabulary where the role line's newline merges with a content's leading one, the opening stops before it).
// 0 without a next message, or when that prefix does not reach past the first turn's end (chat_message_ends'
// first) or reaches the prompt's end.
size_t chat_shared_opening(const Tokenizer & tok, const std::vector<ChatMessage> & messages,
                           std::span<const int32_t> rendered, const ChatOptions & options = {});

// A value as the chat template writes it (Python's json.dumps: ", " and ": " between items, keys in their order,
// non-ASCII characters as they are).
std::string template_json(const json & value);

// A chat choice's reply split into text and tool calls, as OpenAI's fields: a ToolCallParser fed the reply's
// start (what the prompt opened it with), then the generated text. Without the request's tools the text passes
// through unchanged.
class ReplyTools {
public:
    ReplyTools(const ToolUse & use, std::string call_id_base);
    // Adds the next piece of the reply (done: the last): appends the text that became certain to `content` and
    // each finished call to `calls` ({"index", "id", "type": "function", "function": {"name", "arguments"}}).
    void add(const std::string & text, bool done, std::string & content, json & calls);
    size_t calls() const { return n_calls_; }
    // The choice's finish_reason: "tool_calls" for a reply that called a tool and stopped by itself.
    std::string finish_reason(const std::string & reason) const;

private:
    bool active_;
    ToolCallParser parser_;
    std::string id_base_;
    size_t n_calls_ = 0;
};
// One per choice of a request whose id is `id` (call ids: call_<id's hex>_<choice>_<k>).
std::vector<ReplyTools> reply_tools(const ToolUse & use, const std::string & id, size_t n_choices);

// Parses a body. Throws ApiError.
json parse_body(const std::string & body);
ParsedRequest parse_generation(const json & body, bool chat, const Tokenizer & tok, const ParseLimits & lim);
// Checks the "model" field of a request (missing: 400; another model: 404).
void check_model(const json & body, const std::string & model_id);

}  // namespace offgrid::server
