// ToolCallParser (offgrid/chat.h): the Qwen family's <tool_call> blocks taken out of a reply as it is generated.
#include <algorithm>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "offgrid/chat.h"
#include "runtime/unicode.h"

namespace offgrid {

namespace {

using ordered_json = nlohmann::ordered_json;

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// The longest end of s that is the start of tag (and not all of it): text that may still become the tag.
size_t partial_tag(std::string_view s, std::string_view tag) {
    for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
        if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
    }
    return 0;
}

std::string compact(const ordered_json & j) { return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace); }

// The text with each byte that is not part of valid UTF-8 replaced by U+FFFD (as the server sends such bytes), so a
// model's stray byte inside a string does not make its call unreadable to the JSON parser.
std::string valid_utf8(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (size_t at = 0; at < text.size();) {
        const runtime::unicode::Decoded d = runtime::unicode::decode_utf8(text, at);
        if (d.valid) out.append(text.substr(at, d.len));
        else runtime::unicode::append_utf8(out, runtime::unicode::kReplacementChar);
        at += d.len;
    }
    return out;
}

// A block's body as a call: {"name": a known function, "arguments": an object or a JSON string of one}.
bool as_call(std::string_view raw, const std::vector<std::string> & functions, std::string & name, std::string & args) {
    const std::string body = valid_utf8(raw);
    const ordered_json j = ordered_json::parse(body.begin(), body.end(), nullptr, false);
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
    name = j["name"].get<std::string>();
    if (!functions.empty() && std::find(functions.begin(), functions.end(), name) == functions.end()) return false;
    if (!j.contains("arguments")) {
        args = "{}";
        return true;
    }
    const ordered_json & a = j["arguments"];
    if (a.is_object()) {
        args = compact(a);
        return true;
    }
    if (a.is_string()) {
        const std::string & s = a.get_ref<const std::string &>();
        const ordered_json inner = ordered_json::parse(s.begin(), s.end(), nullptr, false);
        if (!inner.is_object()) return false;
        args = compact(inner);
        return true;
    }
    return false;
}

}  // namespace

ToolCallParser::ToolCallParser(std::vector<std::string> functions, bool parallel)
    : functions_(std::move(functions)), parallel_(parallel) {}

std::vector<ToolCallParser::Event> ToolCallParser::feed(std::string_view text) {
    pending_ += text;
    std::vector<Event> out;
    step(out, false);
    return out;
}

std::vector<ToolCallParser::Event> ToolCallParser::finish() {
    std::vector<Event> out;
    step(out, true);
    if (inside_) {  // a block never closed: text
        give_text(out, held_space_ + std::string(kToolCallOpen) + pending_);
        inside_ = false;
    } else {
        give_text(out, held_space_ + pending_);
    }
    held_space_.clear();
    pending_.clear();
    return out;
}

void ToolCallParser::give_text(std::vector<Event> & out, std::string text) {
    if (after_call_) {  // whitespace after a call is dropped
        size_t n = 0;
        while (n < text.size() && is_space(text[n])) ++n;
        text.erase(0, n);
        if (text.empty()) return;
        after_call_ = false;
    }
    if (text.empty()) return;
    if (!out.empty() && !out.back().call) {
        out.back().text += text;
    } else {
        Event e;
        e.text = std::move(text);
        out.push_back(std::move(e));
    }
}

void ToolCallParser::step(std::vector<Event> & out, bool final) {
    for (;;) {
        if (!inside_) {
            const size_t at = pending_.find(kToolCallOpen);
            if (at == std::string::npos) {
                if (final) return;  // finish() gives out the rest
                // Hold back what may still become the tag, and the whitespace before it (dropped if a call follows).
                size_t cut = pending_.size() - partial_tag(pending_, kToolCallOpen);
                size_t text_end = cut;
                while (text_end > 0 && is_space(pending_[text_end - 1])) --text_end;
                if (text_end > 0) {
                    give_text(out, held_space_ + pending_.substr(0, text_end));
                    held_space_.clear();
                    pending_.erase(0, text_end);
                }
                return;
            }
            size_t text_end = at;
            while (text_end > 0 && is_space(pending_[text_end - 1])) --text_end;
            if (text_end > 0) {
                give_text(out, held_space_ + pending_.substr(0, text_end));
                held_space_.clear();
            }
            held_space_ += pending_.substr(text_end, at - text_end);
            pending_.erase(0, at + kToolCallOpen.size());
            inside_ = true;
            continue;
        }
        const size_t end = pending_.find(kToolCallClose);
        if (end == std::string::npos) return;
        const std::string body = pending_.substr(0, end);
        std::string name, args;
        if (as_call(body, functions_, name, args)) {
            if (parallel_ || calls_ == 0) {
                Event e;
                e.call = true;
                e.name = std::move(name);
                e.arguments = std::move(args);
                out.push_back(std::move(e));
                ++calls_;
            }
            after_call_ = true;
        } else {
            give_text(out, held_space_ + std::string(kToolCallOpen) + body + std::string(kToolCallClose));
        }
        held_space_.clear();
        pending_.erase(0, end + kToolCallClose.size());
        inside_ = false;
    }
}

}  // namespace offgrid
