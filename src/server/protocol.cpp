#include "server/protocol.h"

#include <algorithm>
#include <chrono>
#include <cmath>

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
};

ChatPrompt chat_prompt(const json & body, const Tokenizer & tok) {
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
        out.push_back({r, message_content(m, i)});
    }
    ChatPrompt cp;
    cp.tokens = render_chatml(tok, out);
    cp.message_ends = chat_message_ends(tok, out, cp.tokens);
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

std::vector<size_t> chat_message_ends(const Tokenizer & tok, const std::vector<ChatMessage> & messages,
                                      std::span<const int32_t> rendered) {
    // The conversation without messages is BOS (when the tokenizer asks for it) and the assistant's opener.
    const std::vector<int32_t> bare = render_chatml(tok, {});
    const size_t bos = tok.add_bos() && tok.bos() && !bare.empty() && bare[0] == *tok.bos() ? 1 : 0;
    if (bare.size() > rendered.size()) return {};
    std::vector<size_t> ends;
    size_t at = bos;
    for (const ChatMessage & m : messages) {
        const std::vector<int32_t> alone = render_chatml(tok, {m});
        if (alone.size() < bare.size()) break;
        const size_t n = alone.size() - bare.size();
        if (at + n > rendered.size() || !std::equal(alone.begin() + static_cast<std::ptrdiff_t>(bos),
                                                     alone.begin() + static_cast<std::ptrdiff_t>(bos + n),
                                                     rendered.begin() + static_cast<std::ptrdiff_t>(at))) {
            break;  // the tokens merged across a boundary (markers that are plain text): no exact end from here on
        }
        at += n;
        ends.push_back(at);
    }
    return ends;
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
    if (chat) {
        ChatPrompt cp = chat_prompt(body, tok);
        pr.prompts.push_back(std::move(cp.tokens));
        message_ends = std::move(cp.message_ends);
    } else pr.prompts = completion_prompts(body, tok, lim.n_vocab);

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
            g.speculative = speculative;
            g.top_logprobs = top_logprobs;
            g.index = static_cast<int32_t>(p) * pr.n + k;
            g.message_ends = message_ends;
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

}  // namespace offgrid::server
