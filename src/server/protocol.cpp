#include "server/protocol.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

namespace offgrid::server {

json error_body(const std::string & message, const std::string & type, const std::string & param,
                const std::string & code) {
    json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
    if (!param.empty()) e["param"] = param;
    if (!code.empty()) e["code"] = code;
    return json{{"error", e}};
}

json parse_body(const std::string & body) {
    try {
        json j = json::parse(body);
        if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object", "invalid_request_error", {}, "invalid_json");
        return j;
    } catch (const json::parse_error & e) {
        const std::string what = e.what();
        if (what.find("UTF-8") != std::string::npos) {
            throw ApiError(400, "the request body is not valid UTF-8: " + what, "invalid_request_error", {}, "invalid_utf8");
        }
        throw ApiError(400, "the request body is not valid JSON: " + what, "invalid_request_error", {}, "invalid_json");
    } catch (const json::exception & e) {
        // The parser's other refusal: a number beyond a double (1e999), out_of_range rather than parse_error.
        throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what(), "invalid_request_error", {},
                       "invalid_json");
    }
}

namespace {

// Fields that are absent or null count as not given (OpenAI's clients send null for unset options).
const json * field(const json & body, const char * name) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return nullptr;
    return &*it;
}

[[noreturn]] void bad(const std::string & param, const std::string & message, const std::string & code = "invalid_value") {
    throw ApiError(400, message, "invalid_request_error", param, code);
}

double number(const json & body, const char * name, double def, double lo, double hi, bool lo_open = false) {
    const json * f = field(body, name);
    if (!f) return def;
    if (!f->is_number()) bad(name, std::string("'") + name + "' must be a number", "invalid_type");
    const double v = f->get<double>();
    if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo)) {
        bad(name, std::string("'") + name + "' must be in " + (lo_open ? "(" : "[") + std::to_string(lo) + ", " +
                      std::to_string(hi) + "], got " + std::to_string(v));
    }
    return v;
}

int64_t integer(const json & body, const char * name, int64_t def, int64_t lo, int64_t hi) {
    const json * f = field(body, name);
    if (!f) return def;
    if (!f->is_number_integer()) bad(name, std::string("'") + name + "' must be an integer", "invalid_type");
    const int64_t v = f->is_number_unsigned() && f->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : f->get<int64_t>();
    if (v < lo || v > hi) {
        bad(name, std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                      std::to_string(v));
    }
    return v;
}

bool boolean(const json & body, const char * name, bool def) {
    const json * f = field(body, name);
    if (!f) return def;
    if (!f->is_boolean()) bad(name, std::string("'") + name + "' must be a boolean", "invalid_type");
    return f->get<bool>();
}

std::vector<int32_t> token_ids(const json & arr, const char * name, int32_t n_vocab) {
    std::vector<int32_t> out;
    for (const auto & t : arr) {
        if (!t.is_number_integer()) bad(name, std::string("'") + name + "' token ids must be integers", "invalid_type");
        const int64_t v = t.get<int64_t>();
        if (v < 0 || v >= n_vocab) bad(name, "token id " + std::to_string(v) + " is outside the vocabulary (0.." + std::to_string(n_vocab - 1) + ")");
        out.push_back(static_cast<int32_t>(v));
    }
    return out;
}

std::vector<std::vector<int32_t>> completion_prompts(const json & body, const Tokenizer & tok, int32_t n_vocab) {
    const json * p = field(body, "prompt");
    if (!p) bad("prompt", "you must provide a 'prompt'", "missing_required_parameter");
    auto text = [&](const std::string & s) {
        std::vector<int32_t> ids;
        if (tok.add_bos() && tok.bos()) ids.push_back(*tok.bos());
        tok.tokenize(s, false, ids);
        return ids;
    };
    std::vector<std::vector<int32_t>> out;
    if (p->is_string()) {
        out.push_back(text(p->get<std::string>()));
    } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
        out.push_back(token_ids(*p, "prompt", n_vocab));
    } else if (p->is_array() && !p->empty()) {
        for (const auto & e : *p) {
            if (e.is_string()) out.push_back(text(e.get<std::string>()));
            else if (e.is_array()) out.push_back(token_ids(e, "prompt", n_vocab));
            else bad("prompt", "'prompt' must be a string, an array of strings, or token ids", "invalid_type");
        }
    } else {
        bad("prompt", "'prompt' must be a string, an array of strings, or token ids (not empty)", "invalid_type");
    }
    if (out.size() > static_cast<size_t>(kMaxChoices)) bad("prompt", "at most " + std::to_string(kMaxChoices) + " prompts per request");
    for (const auto & ids : out) {
        if (ids.empty()) bad("prompt", "the prompt is empty");
    }
    return out;
}

std::string message_content(const json & m, size_t i) {
    const json * c = field(m, "content");
    const std::string param = "messages[" + std::to_string(i) + "].content";
    if (!c) return {};
    if (c->is_string()) return c->get<std::string>();
    if (c->is_array()) {
        std::string out;
        for (const auto & part : *c) {
            if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
                !part["text"].is_string()) {
                bad(param, "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported", "invalid_type");
            }
            out += part["text"].get<std::string>();
        }
        return out;
    }
    bad(param, "'" + param + "' must be a string or an array of text parts", "invalid_type");
}

struct ChatPrompt {
    std::vector<int32_t> tokens;
    std::vector<size_t> message_ends;
    size_t shared_opening = 0;
};

bool valid_function_name(const std::string & name) {
    if (name.empty() || name.size() > 64) return false;
    return std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    });
}

// An assistant message's tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}], the
// arguments a JSON string (as OpenAI sends them; an object is taken too).
std::vector<ChatToolCall> message_tool_calls(const json & m, const std::string & param) {
    const json * calls = field(m, "tool_calls");
    std::vector<ChatToolCall> out;
    if (!calls) return out;
    const std::string p = param + ".tool_calls";
    if (!calls->is_array()) bad(p, "'" + p + "' must be an array", "invalid_type");
    for (size_t k = 0; k < calls->size(); ++k) {
        const json & c = (*calls)[k];
        const std::string pk = p + "[" + std::to_string(k) + "]";
        if (!c.is_object()) bad(pk, "'" + pk + "' must be an object", "invalid_type");
        const json * f = field(c, "function");
        if (!f || !f->is_object()) bad(pk + ".function", "'" + pk + ".function' must be an object", "invalid_type");
        const json * name = field(*f, "name");
        if (!name || !name->is_string()) bad(pk + ".function.name", "'" + pk + ".function.name' must be a string", "invalid_type");
        const json * args = field(*f, "arguments");
        std::string a = "{}";
        if (args && args->is_string()) a = args->get<std::string>();
        else if (args && args->is_object()) a = template_json(*args);
        else if (args) bad(pk + ".function.arguments", "'" + pk + ".function.arguments' must be a JSON string", "invalid_type");
        out.push_back({name->get<std::string>(), std::move(a)});
    }
    return out;
}

std::vector<ChatMessage> chat_messages(const json & body) {
    const json * msgs = field(body, "messages");
    if (!msgs) bad("messages", "you must provide 'messages'", "missing_required_parameter");
    if (!msgs->is_array() || msgs->empty()) bad("messages", "'messages' must be a non-empty array", "invalid_type");
    std::vector<ChatMessage> out;
    for (size_t i = 0; i < msgs->size(); ++i) {
        const json & m = (*msgs)[i];
        const std::string param = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) bad(param, "'" + param + "' must be an object", "invalid_type");
        const json * role = field(m, "role");
        if (!role) bad(param + ".role", "'" + param + ".role' is missing", "missing_required_parameter");
        if (!role->is_string()) bad(param + ".role", "'" + param + ".role' must be a string", "invalid_type");
        const std::string r = role->get<std::string>();
        if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool") {
            bad(param + ".role", "unknown role '" + r + "' (system, developer, user, assistant, tool)");
        }
        std::vector<ChatToolCall> calls;
        if (r == "assistant") calls = message_tool_calls(m, param);
        out.emplace_back(r, message_content(m, i), std::move(calls));
    }
    return out;
}

// The request's tools, tool_choice and parallel_tool_calls: the tools section of the prompt and the replies' parser.
void chat_tools(const json & body, ChatOptions & options, ToolUse & use) {
    const json * tools = field(body, "tools");
    const json * choice = field(body, "tool_choice");
    use.parallel = boolean(body, "parallel_tool_calls", true);
    std::vector<std::string> names, rendered;
    std::vector<json> parameters;
    if (tools) {
        if (!tools->is_array()) bad("tools", "'tools' must be an array", "invalid_type");
        if (tools->size() > kMaxTools) bad("tools", "at most " + std::to_string(kMaxTools) + " tools, got " + std::to_string(tools->size()));
        for (size_t i = 0; i < tools->size(); ++i) {
            const json & t = (*tools)[i];
            const std::string p = "tools[" + std::to_string(i) + "]";
            if (!t.is_object()) bad(p, "'" + p + "' must be an object", "invalid_type");
            const json * type = field(t, "type");
            if (!type || *type != "function") bad(p + ".type", "'" + p + ".type' must be \"function\"");
            const json * f = field(t, "function");
            if (!f || !f->is_object()) bad(p + ".function", "'" + p + ".function' must be an object", "invalid_type");
            const json * name = field(*f, "name");
            if (!name || !name->is_string() || !valid_function_name(name->get<std::string>())) {
                bad(p + ".function.name", "'" + p + ".function.name' must be 1-64 letters, digits, '_' or '-'");
            }
            const json * desc = field(*f, "description");
            if (desc && !desc->is_string()) bad(p + ".function.description", "'" + p + ".function.description' must be a string", "invalid_type");
            const json * params = field(*f, "parameters");
            if (params && !params->is_object()) bad(p + ".function.parameters", "'" + p + ".function.parameters' must be an object", "invalid_type");
            const std::string n = name->get<std::string>();
            if (std::find(names.begin(), names.end(), n) != names.end()) bad(p + ".function.name", "two tools are named '" + n + "'");
            names.push_back(n);
            rendered.push_back(template_json(t));
            parameters.push_back(params ? *params : json{{"type", "object"}});  // OpenAI: absent is any object
        }
    }
    std::string mode = names.empty() ? "none" : "auto";
    std::string forced;
    if (choice) {
        if (choice->is_string()) {
            mode = choice->get<std::string>();
            if (mode != "none" && mode != "auto" && mode != "required") {
                bad("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a function");
            }
        } else if (choice->is_object()) {
            const json * f = field(*choice, "function");
            const json * n = f && f->is_object() ? field(*f, "name") : nullptr;
            if (!n || !n->is_string()) bad("tool_choice", "'tool_choice' names a function as {\"type\": \"function\", \"function\": {\"name\": ...}}", "invalid_type");
            mode = "function";
            forced = n->get<std::string>();
            if (std::find(names.begin(), names.end(), forced) == names.end()) bad("tool_choice", "'tool_choice' names '" + forced + "', which is not among 'tools'");
        } else {
            bad("tool_choice", "'tool_choice' must be a string or an object", "invalid_type");
        }
        if (names.empty() && mode != "none") bad("tool_choice", "'tool_choice' needs 'tools'");
    }
    if (mode == "none") return;  // the tools are not shown; replies are text
    options.tools = std::move(rendered);
    // A call is made sure of by opening the reply with one and holding the rest to the call's JSON: the name of a
    // function that may be called, then arguments of that function's parameters (JsonSchema::tool_call).
    if (mode == "required" || mode == "function") {
        use.reply_start = std::string(kToolCallOpen) + "\n";
        if (mode == "function") use.reply_start += "{\"name\": \"" + forced + "\", \"arguments\": ";
        std::vector<std::string> callable;
        std::vector<const json *> params;
        for (size_t i = 0; i < names.size(); ++i) {
            if (mode == "function" && names[i] != forced) continue;
            callable.push_back(names[i]);
            params.push_back(&parameters[i]);
        }
        try {
            use.call = JsonSchema::tool_call(callable, params);
        } catch (const std::invalid_argument &) {
            bad("tool_choice", "'tool_choice' " + mode + " holds a reply to at most " + std::to_string(JsonSchema::kMaxLiterals) +
                                   " functions; this request has " + std::to_string(callable.size()));
        }
    }
    use.functions = std::move(names);
    options.assistant_start = use.reply_start;
}

ChatPrompt chat_prompt(const json & body, const Tokenizer & tok, ToolUse & use) {
    const std::vector<ChatMessage> messages = chat_messages(body);
    ChatOptions options;
    chat_tools(body, options, use);
    ChatPrompt cp;
    cp.tokens = render_chatml(tok, messages, options);
    cp.message_ends = chat_message_ends(tok, messages, cp.tokens, options);
    cp.shared_opening = chat_shared_opening(tok, messages, cp.tokens, options);
    return cp;
}

std::vector<std::string> stop_strings(const json & body) {
    const json * s = field(body, "stop");
    std::vector<std::string> out;
    if (!s) return out;
    if (s->is_string()) {
        out.push_back(s->get<std::string>());
    } else if (s->is_array()) {
        for (const auto & e : *s) {
            if (!e.is_string()) bad("stop", "'stop' must be a string or an array of strings", "invalid_type");
            out.push_back(e.get<std::string>());
        }
    } else {
        bad("stop", "'stop' must be a string or an array of strings", "invalid_type");
    }
    if (out.size() > kMaxStopStrings) {
        bad("stop", "at most " + std::to_string(kMaxStopStrings) + " stop strings, got " + std::to_string(out.size()));
    }
    for (const auto & e : out) {
        if (e.empty()) bad("stop", "stop strings must not be empty");
    }
    return out;
}

uint64_t fresh_seed() {
    static std::atomic<uint64_t> counter{0};
    const auto t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    return t ^ (0x9E3779B97F4A7C15ull * ++counter);
}

}  // namespace

void check_model(const json & body, const std::string & model_id) {
    const json * m = field(body, "model");
    if (!m) bad("model", "you must provide a 'model' parameter", "missing_required_parameter");
    if (!m->is_string()) bad("model", "'model' must be a string", "invalid_type");
    if (m->get<std::string>() != model_id) {
        throw ApiError(404, "the model '" + m->get<std::string>() + "' does not exist (this server has '" + model_id + "')",
                       "invalid_request_error", "model", "model_not_found");
    }
}

std::string template_json(const json & v) {
    if (v.is_object()) {
        std::string out = "{";
        bool first = true;
        for (auto it = v.begin(); it != v.end(); ++it) {
            if (!first) out += ", ";
            first = false;
            out += json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace);
            out += ": ";
            out += template_json(it.value());
        }
        return out + "}";
    }
    if (v.is_array()) {
        std::string out = "[";
        for (size_t i = 0; i < v.size(); ++i) {
            if (i > 0) out += ", ";
            out += template_json(v[i]);
        }
        return out + "]";
    }
    return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

// The conversation without messages: BOS (when the tokenizer asks for it) and the assistant's opener.
struct BareChat {
    std::vector<int32_t> tokens;
    size_t bos = 0;  // 1 when tokens start with BOS
};
BareChat bare_chat(const Tokenizer & tok) {
    BareChat b{render_chatml(tok, {}), 0};
    b.bos = tok.add_bos() && tok.bos() && !b.tokens.empty() && b.tokens[0] == *tok.bos() ? 1 : 0;
    return b;
}

// A turn (its messages, with the tools when it is the tools' system turn) rendered alone, as its tokens after BOS
// and before the opener; none when its rendering is shorter than the bare conversation.
std::optional<std::vector<int32_t>> turn_alone(const Tokenizer & tok, const std::vector<ChatMessage> & turn, bool with_tools,
                                const ChatOptions & options, const BareChat & bare) {
    ChatOptions o;
    if (with_tools) o.tools = options.tools;
    std::vector<int32_t> alone = render_chatml(tok, turn, o);
    if (alone.size() < bare.tokens.size()) return std::nullopt;
    const size_t n = alone.size() - bare.tokens.size();
    return std::vector<int32_t>(alone.begin() + static_cast<std::ptrdiff_t>(bare.bos),
                                alone.begin() + static_cast<std::ptrdiff_t>(bare.bos + n));
}

}  // namespace

std::vector<size_t> chat_message_ends(const Tokenizer & tok, const std::vector<ChatMessage> & messages,
                                      std::span<const int32_t> rendered, const ChatOptions & options) {
    const BareChat bare = bare_chat(tok);
    if (bare.tokens.size() > rendered.size()) return {};
    // The template's turns, each rendered alone: the tools' system turn (with the system message that opens the
    // conversation), each other message, each run of tool messages.
    std::vector<std::pair<std::vector<ChatMessage>, bool>> turns;  // messages, with the tools
    size_t i = 0;
    if (!options.tools.empty()) {
        std::vector<ChatMessage> first;
        if (!messages.empty() && (messages[0].role == "system" || messages[0].role == "developer")) first.push_back(messages[i++]);
        turns.emplace_back(std::move(first), true);
    }
    while (i < messages.size()) {
        std::vector<ChatMessage> turn{messages[i++]};
        while (turn.back().role == "tool" && i < messages.size() && messages[i].role == "tool") turn.push_back(messages[i++]);
        turns.emplace_back(std::move(turn), false);
    }
    std::vector<size_t> ends;
    size_t at = bare.bos;
    for (const auto & [turn, with_tools] : turns) {
        const std::optional<std::vector<int32_t>> alone = turn_alone(tok, turn, with_tools, options, bare);
        if (!alone) break;
        const size_t n = alone->size();
        if (at + n > rendered.size() || !std::equal(alone->begin(), alone->end(), rendered.begin() + static_cast<std::ptrdiff_t>(at))) {
            break;  // the tokens merged across a boundary (markers that are plain text): no exact end from here on
        }
        at += n;
        ends.push_back(at);
    }
    return ends;
}

size_t chat_shared_opening(const Tokenizer & tok, const std::vector<ChatMessage> & messages,
                           std::span<const int32_t> rendered, const ChatOptions & options) {
    // The first turn's messages: the first message (with the tools: the system message that opens the
    // conversation, if any); its end as chat_message_ends finds it, the turn rendered alone after BOS.
    const bool opens_with_system = !messages.empty() && (messages[0].role == "system" || messages[0].role == "developer");
    const size_t first = options.tools.empty() ? 1 : (opens_with_system ? 1 : 0);
    if (first >= messages.size()) return 0;
    const std::vector<ChatMessage> head(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(first));
    const BareChat bare = bare_chat(tok);
    const std::optional<std::vector<int32_t>> head_alone = turn_alone(tok, head, !options.tools.empty(), options, bare);
    if (!head_alone) return 0;
    const size_t first_end = bare.bos + head_alone->size();
    // The conversation up to the next message, then that message's role with contents that share no token: what
    // all renderings have in common with the prompt is the role line as any content leaves it (a content that
    // opens with a newline merges it with the role line's in some vocabularies, as an empty one may with the
    // closing marker's text).
    size_t shared = rendered.size();
    for (const char * content : {"", "x", "\n"}) {
        std::vector<ChatMessage> probe = head;
        probe.emplace_back(messages[first].role, content);
        const std::vector<int32_t> r = render_chatml(tok, probe, options);
        const auto n = static_cast<size_t>(std::mismatch(rendered.begin(), rendered.end(), r.begin(), r.end()).first - rendered.begin());
        shared = std::min(shared, n);
    }
    return shared > first_end && shared < rendered.size() ? shared : 0;
}

ParsedRequest parse_generation(const json & body, bool chat, const Tokenizer & tok, const ParseLimits & lim) {
    check_model(body, lim.model_id);
    ParsedRequest pr;
    pr.chat = chat;
    if (chat && lim.chat_template == ChatTemplate::None) {
        throw ApiError(400, "chat completions are disabled: the server was started with --chat-template none",
                       "invalid_request_error", "messages", "chat_template_disabled");
    }
    pr.stream = boolean(body, "stream", false);
    if (const json * so = field(body, "stream_options")) {
        if (!so->is_object()) bad("stream_options", "'stream_options' must be an object", "invalid_type");
        pr.include_usage = boolean(*so, "include_usage", false);
    }
    pr.n = static_cast<int32_t>(integer(body, "n", 1, 1, kMaxChoices));

    SamplingParams sp;
    sp.temperature = static_cast<float>(number(body, "temperature", 0.8, 0, 2));
    sp.top_p = static_cast<float>(number(body, "top_p", 0.95, 0, 1, true));
    sp.top_k = static_cast<int32_t>(integer(body, "top_k", 40, 0, INT32_MAX));
    sp.min_p = static_cast<float>(number(body, "min_p", 0.05, 0, 1));
    sp.presence_penalty = static_cast<float>(number(body, "presence_penalty", 0, -2, 2));
    sp.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", 0, -2, 2));
    sp.repeat_penalty = static_cast<float>(number(body, "repeat_penalty", 1, 0, 100, true));
    const bool seeded = field(body, "seed") != nullptr;
    const uint64_t seed = static_cast<uint64_t>(integer(body, "seed", 0, INT64_MIN, INT64_MAX));

    int32_t top_logprobs = -1;
    if (chat) {
        pr.logprobs = boolean(body, "logprobs", false);
        const int64_t top = integer(body, "top_logprobs", 0, 0, kMaxTopLogprobs);
        if (field(body, "top_logprobs") && !pr.logprobs) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        if (pr.logprobs) top_logprobs = static_cast<int32_t>(top);
    } else if (field(body, "logprobs")) {
        top_logprobs = static_cast<int32_t>(integer(body, "logprobs", 0, 0, kMaxTopLogprobs));
        pr.logprobs = true;
    }
    const bool ignore_eos = boolean(body, "ignore_eos", false);
    const bool speculative = boolean(body, "speculative", true);
    std::vector<std::string> stop = stop_strings(body);
    if (chat && !has_control_token(tok, kChatMLEnd)) stop.push_back(kChatMLEnd);  // the turn's end as plain text

    std::vector<size_t> message_ends;
    size_t shared_opening = 0;
    if (chat) {
        ChatPrompt cp = chat_prompt(body, tok, pr.tools);
        pr.prompts.push_back(std::move(cp.tokens));
        message_ends = std::move(cp.message_ends);
        shared_opening = cp.shared_opening;
    } else pr.prompts = completion_prompts(body, tok, lim.n_vocab);

    // A reply held to JSON: a call the request forced (the rest of the opened <tool_call> block), or
    // response_format json_object.
    GenRequest::JsonReply json_reply;
    if (const json * rf = field(body, "response_format")) {
        const json * type = rf->is_object() ? field(*rf, "type") : nullptr;
        if (!type || !type->is_string()) bad("response_format", "'response_format' must be {\"type\": \"text\"} or {\"type\": \"json_object\"}", "invalid_type");
        const std::string t = type->get<std::string>();
        if (t != "text" && t != "json_object" && t != "json_schema") {
            bad("response_format", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
        }
        json_reply.on = t != "text";
        if (t == "json_schema") {
            const json * js = field(*rf, "json_schema");
            const json * schema = js && js->is_object() ? field(*js, "schema") : nullptr;
            if (!schema) bad("response_format", "'response_format.json_schema.schema' is missing", "missing_required_parameter");
            try {
                json_reply.schema = JsonSchema::compile(*schema);
            } catch (const std::invalid_argument & e) {
                bad("response_format", std::string("response_format.json_schema.") + e.what());
            }
        }
    }
    if (!pr.tools.reply_start.empty()) {
        json_reply.on = true;
        json_reply.schema = pr.tools.call;
        json_reply.prefix = pr.tools.reply_start.substr(kToolCallOpen.size() + 1);  // after "<tool_call>\n"
        json_reply.suffix = "\n" + std::string(kToolCallClose);
    }
    const char * max_name = field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    const bool max_given = field(body, max_name) != nullptr;
    const int64_t max_tokens = integer(body, max_name, chat ? 0 : 16, 1, INT32_MAX);
    for (size_t p = 0; p < pr.prompts.size(); ++p) {
        const size_t len = pr.prompts[p].size();
        if (len >= lim.seq_capacity) {
            throw ApiError(400, "the prompt is " + std::to_string(len) + " tokens; this server's context holds " +
                                    std::to_string(lim.seq_capacity) + " tokens per request (prompt and completion)",
                           "invalid_request_error", chat ? "messages" : "prompt", "context_length_exceeded");
        }
        int64_t budget = static_cast<int64_t>(lim.seq_capacity - len);
        if (max_given && max_tokens > budget) {
            throw ApiError(400, "'" + std::string(max_name) + "' is " + std::to_string(max_tokens) + ", but the prompt (" +
                                    std::to_string(len) + " tokens) leaves room for " + std::to_string(budget) +
                                    " in this server's context of " + std::to_string(lim.seq_capacity) + " tokens",
                           "invalid_request_error", max_name, "context_length_exceeded");
        }
        for (int32_t k = 0; k < pr.n; ++k) {
            GenRequest g;
            g.prompt = pr.prompts[p];
            g.max_tokens = static_cast<int32_t>(max_given || !chat ? std::min<int64_t>(max_tokens, budget) : budget);
            g.sampling = sp;
            g.sampling.seed = (seeded ? seed : fresh_seed()) + static_cast<uint64_t>(k);
            g.stop = stop;
            g.ignore_eos = ignore_eos;
            g.speculative = speculative && !json_reply.on;
            g.json = json_reply;
            g.top_logprobs = top_logprobs;
            g.index = static_cast<int32_t>(p) * pr.n + k;
            g.message_ends = message_ends;
            g.shared_opening = shared_opening;
            pr.choices.push_back(std::move(g));
        }
    }
    try {
        validate(sp);
    } catch (const std::exception & e) {
        bad("", e.what());
    }
    return pr;
}

ReplyTools::ReplyTools(const ToolUse & use, std::string call_id_base)
    : active_(!use.functions.empty()), parser_(use.functions, use.parallel), id_base_(std::move(call_id_base)) {
    if (active_) parser_.feed(use.reply_start);  // the opened block: nothing to give out yet
}

void ReplyTools::add(const std::string & text, bool done, std::string & content, json & calls) {
    if (!active_) {
        content += text;
        return;
    }
    std::vector<ToolCallParser::Event> events = parser_.feed(text);
    if (done) {
        std::vector<ToolCallParser::Event> rest = parser_.finish();
        events.insert(events.end(), rest.begin(), rest.end());
    }
    for (const auto & e : events) {
        if (!e.call) {
            content += e.text;
            continue;
        }
        const size_t k = n_calls_++;
        calls.push_back({{"index", k}, {"id", "call_" + id_base_ + "_" + std::to_string(k)}, {"type", "function"},
                         {"function", {{"name", e.name}, {"arguments", e.arguments}}}});
    }
}

std::string ReplyTools::finish_reason(const std::string & reason) const {
    return n_calls_ > 0 && reason == "stop" ? "tool_calls" : reason;
}

std::vector<ReplyTools> reply_tools(const ToolUse & use, const std::string & id, size_t n_choices) {
    std::vector<ReplyTools> out;
    out.reserve(n_choices);
    for (size_t i = 0; i < n_choices; ++i) out.emplace_back(use, id.substr(id.find('-') + 1) + "_" + std::to_string(i));
    return out;
}

}  // namespace offgrid::server
