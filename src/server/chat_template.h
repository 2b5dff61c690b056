// The server's chat templates are the public ones (offgrid/chat.h, implemented in src/runtime/); these names
// keep the server's spelling.
#pragma once

#include "runtime/chat_template.h"

namespace offgrid::server {

using offgrid::ChatMessage;
using offgrid::ChatTemplate;
using offgrid::choose_chat_template;
using offgrid::kChatMLEnd;
using runtime::has_control_token;
using runtime::render_chatml;

}  // namespace offgrid::server
