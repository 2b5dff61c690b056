// Chat templates: turning a conversation into prompt tokens. ChatML (`<|im_start|>role\n...<|im_end|>\n`, then
// `<|im_start|>assistant\n`) is the template of the Qwen family and the one the server uses.
//
// Thread safety: free functions over an immutable Tokenizer; safe from any number of threads.
//
// Invariants:
//  1. Special tokens come only from the template's own markers, never from message content: a marker becomes
//     its token id when the vocabulary has it as a control (or user-defined) token, else it stays text; the
//     content is tokenised as plain text whatever it contains.
//  2. The result ends with the assistant's turn opened, so generation continues as the assistant.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "offgrid/tokenizer.h"

namespace offgrid {

enum class ChatTemplate { ChatML, None };

// Chooses the template from a setting (auto, chatml, none) and the GGUF's tokenizer.chat_template. auto takes
// ChatML when the GGUF template is ChatML-shaped or absent; any other GGUF template is refused (Error naming
// --chat-template).
ChatTemplate choose_chat_template(const std::string & setting, const std::string & gguf_template);

struct ChatMessage {
    std::string role;  // system, developer (rendered as system), user, assistant, tool
    std::string content;
};

// The prompt tokens of a conversation (BOS first when the tokenizer asks for it).
std::vector<int32_t> render_chatml(const Tokenizer & tok, const std::vector<ChatMessage> & messages);

// The text that ends an assistant turn; a stop string when the vocabulary has no such control token.
inline constexpr const char * kChatMLEnd = "<|im_end|>";
// Whether `text` is one control or user-defined token of the vocabulary.
bool has_control_token(const Tokenizer & tok, const std::string & text);

}  // namespace offgrid
