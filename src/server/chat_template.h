// Chat templates: ChatML (`<|im_start|>role\n...<|im_end|>\n`, then `<|im_start|>assistant\n`), the template of
// the Qwen family, or none (the chat endpoint is refused). Special tokens are parsed in the template's own text,
// never in message content: the markers become their token ids when the vocabulary has them as control tokens
// (else they stay text), and the content is tokenised as plain text whatever it contains.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tokenizer.h"

namespace offgrid::server {

enum class ChatTemplate { ChatML, None };

// Chooses the template from --chat-template (auto, chatml, none) and the GGUF's tokenizer.chat_template. auto takes
// ChatML when the GGUF template is ChatML-shaped or absent; any other GGUF template is refused (offgrid::Error
// naming --chat-template).
ChatTemplate choose_chat_template(const std::string & flag, const std::string & gguf_template);

struct ChatMessage {
    std::string role;     // system, developer, user, assistant, tool
    std::string content;
};

// The prompt tokens of a conversation, ending with the assistant's turn opened (`<|im_start|>assistant\n`).
std::vector<int32_t> render_chatml(const runtime::Tokenizer & tok, const std::vector<ChatMessage> & messages);

// The text that ends an assistant turn; a stop string when the vocabulary has no such control token.
inline constexpr const char * kChatMLEnd = "<|im_end|>";
bool has_control_token(const runtime::Tokenizer & tok, const std::string & text);

}  // namespace offgrid::server
