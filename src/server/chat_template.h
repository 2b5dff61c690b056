// The server's chat templates are the public ones (offgrid/chat.h); these names keep the server's spelling.
#pragma once

#include "offgrid/chat.h"

namespace offgrid::server {

using offgrid::ChatMessage;
using offgrid::ChatOptions;
using offgrid::ChatToolCall;
using offgrid::ChatTemplate;
using offgrid::choose_chat_template;
using offgrid::has_control_token;
using offgrid::kChatMLEnd;
using offgrid::render_chatml;
using offgrid::ToolCallParser;

}  // namespace offgrid::server
