// ChatML rendering and the choice of template.
#include "runtime/chat_template.h"

#include <string_view>

#include "common/error.h"

namespace offgrid {

ChatTemplate choose_chat_template(const std::string & flag, const std::string & gguf_template) {
    if (flag == "chatml") return ChatTemplate::ChatML;
    if (flag == "none") return ChatTemplate::None;
    if (flag != "auto") throw Error("--chat-template: unknown template '" + flag + "' (chatml, none or auto)");
    if (gguf_template.empty()) return ChatTemplate::ChatML;
    if (gguf_template.find("<|im_start|>") != std::string::npos && gguf_template.find("<|im_end|>") != std::string::npos) {
        return ChatTemplate::ChatML;
    }
    throw Error("the model's tokenizer.chat_template is not ChatML-shaped and no other template is supported; "
                "start with --chat-template chatml to use ChatML anyway, or --chat-template none to disable chat");
}

std::vector<int32_t> render_chatml(const Tokenizer & tok, const std::vector<ChatMessage> & messages,
                                   const ChatOptions & options) {
    return runtime::render_chatml(tok.impl(), messages, options);
}

bool has_control_token(const Tokenizer & tok, const std::string & text) {
    return runtime::has_control_token(tok.impl(), text);
}

}  // namespace offgrid

namespace offgrid::runtime {

bool has_control_token(const Tokenizer & tok, const std::string & text) {
    const auto id = tok.find_token(text);
    if (!id) return false;
    const auto type = tok.token_type(*id);
    return type == TokenType::Control || type == TokenType::UserDefined;
}

namespace {

// Builds the prompt as runs of plain text between template markers, so the tokens are those of tokenising the
// whole rendered text with special tokens parsed, except that nothing inside a message becomes a special token.
class Builder {
public:
    explicit Builder(const Tokenizer & tok) : tok_(tok) {}

    void marker(const std::string & text) {
        if (has_control_token(tok_, text)) {
            flush();
            out_.push_back(*tok_.find_token(text));
        } else {
            run_ += text;
        }
    }
    void text(const std::string & t) { run_ += t; }
    // The template's own text: its tool-call and tool-response tags are markers, the rest plain text.
    void tagged(std::string_view t) {
        while (!t.empty()) {
            size_t at = std::string_view::npos, len = 0;
            for (const std::string_view tag : kTags) {
                const size_t p = t.find(tag);
                if (p < at) {
                    at = p;
                    len = tag.size();
                }
            }
            if (at == std::string_view::npos) {
                run_ += t;
                return;
            }
            run_ += t.substr(0, at);
            marker(std::string(t.substr(at, len)));
            t.remove_prefix(at + len);
        }
    }
    std::vector<int32_t> finish() {
        flush();
        return std::move(out_);
    }

private:
    static constexpr std::string_view kTags[] = {kToolCallOpen, kToolCallClose, "<tool_response>", "</tool_response>"};
    void flush() {
        if (!run_.empty()) tok_.tokenize(run_, false, out_);
        run_.clear();
    }
    const Tokenizer & tok_;
    std::vector<int32_t> out_;
    std::string run_;
};

}  // namespace

// The Qwen family's tool prompt (its chat template's wording), around the tool definitions.
constexpr const char * kToolsIntro =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr const char * kToolsOutro =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>";

std::vector<int32_t> render_chatml(const Tokenizer & tok, const std::vector<ChatMessage> & messages,
                                   const ChatOptions & options) {
    Builder b(tok);
    if (tok.add_bos() && tok.bos()) {
        // ChatML models do not add BOS; one that asks for it gets it first.
        b.marker(tok.token_text(*tok.bos()));
    }
    const auto is_system = [](const ChatMessage & m) { return m.role == "system" || m.role == "developer"; };
    size_t first = 0;
    if (!options.tools.empty()) {
        // One system turn: the conversation's system message (if it opens the conversation), then the tools.
        b.marker("<|im_start|>");
        b.text("system\n");
        if (!messages.empty() && is_system(messages[0])) {
            b.text(messages[0].content);
            b.text("\n\n");
            first = 1;
        }
        b.tagged(kToolsIntro);
        for (const std::string & t : options.tools) {
            b.text("\n");
            b.text(t);
        }
        b.tagged(kToolsOutro);
        b.marker(kChatMLEnd);
        b.text("\n");
    }
    for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage & m = messages[i];
        if (m.role == "tool") {
            // A run of tool results is one user turn of <tool_response> blocks.
            if (i == first || messages[i - 1].role != "tool") {
                b.marker("<|im_start|>");
                b.text("user");
            }
            b.text("\n");
            b.tagged("<tool_response>");
            b.text("\n");
            b.text(m.content);
            b.text("\n");
            b.tagged("</tool_response>");
            if (i + 1 == messages.size() || messages[i + 1].role != "tool") {
                b.marker(kChatMLEnd);
                b.text("\n");
            }
            continue;
        }
        b.marker("<|im_start|>");
        b.text((is_system(m) ? std::string("system") : m.role) + "\n");
        b.text(m.content);
        if (m.role == "assistant") {
            for (size_t k = 0; k < m.tool_calls.size(); ++k) {
                if (k > 0 || !m.content.empty()) b.text("\n");
                b.tagged(kToolCallOpen);
                b.text("\n{\"name\": \"" + m.tool_calls[k].name + "\", \"arguments\": " + m.tool_calls[k].arguments + "}\n");
                b.tagged(kToolCallClose);
            }
        }
        b.marker(kChatMLEnd);
        b.text("\n");
    }
    b.marker("<|im_start|>");
    b.text("assistant\n");
    b.tagged(options.assistant_start);
    return b.finish();
}

}  // namespace offgrid::runtime
