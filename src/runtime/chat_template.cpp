// ChatML rendering and the choice of template.
#include "runtime/chat_template.h"

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

std::vector<int32_t> render_chatml(const Tokenizer & tok, const std::vector<ChatMessage> & messages) {
    return runtime::render_chatml(tok.impl(), messages);
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
    std::vector<int32_t> finish() {
        flush();
        return std::move(out_);
    }

private:
    void flush() {
        if (!run_.empty()) tok_.tokenize(run_, false, out_);
        run_.clear();
    }
    const Tokenizer & tok_;
    std::vector<int32_t> out_;
    std::string run_;
};

}  // namespace

std::vector<int32_t> render_chatml(const Tokenizer & tok, const std::vector<ChatMessage> & messages) {
    Builder b(tok);
    if (tok.add_bos() && tok.bos()) {
        // ChatML models do not add BOS; one that asks for it gets it first.
        b.marker(tok.token_text(*tok.bos()));
    }
    for (const auto & m : messages) {
        b.marker("<|im_start|>");
        b.text((m.role == "developer" ? std::string("system") : m.role) + "\n");
        b.text(m.content);
        b.marker(kChatMLEnd);
        b.text("\n");
    }
    b.marker("<|im_start|>");
    b.text("assistant\n");
    return b.finish();
}

}  // namespace offgrid::runtime
