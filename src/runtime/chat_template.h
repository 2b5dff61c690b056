// ChatML rendering over the internal tokenizer (the public forms in offgrid/chat.h forward here).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "offgrid/chat.h"
#include "runtime/tokenizer.h"

namespace offgrid::runtime {

std::vector<int32_t> render_chatml(const Tokenizer & tok, const std::vector<ChatMessage> & messages,
                                   const ChatOptions & options = {});
bool has_control_token(const Tokenizer & tok, const std::string & text);

}  // namespace offgrid::runtime
