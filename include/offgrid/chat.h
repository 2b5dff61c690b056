// Chat templates: turning a conversation into prompt tokens. ChatML (`<|im_start|>role\n...<|im_end|>\n`, then
// `<|im_start|>assistant\n`) is the template of the Qwen family and the one the server uses, with the Qwen
// family's tool calling: the function definitions in the system turn inside `<tools></tools>`, an assistant's
// calls as `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>` blocks, and tool results as
// `<tool_response>` blocks of one user turn.
//
// Thread safety: free functions over an immutable Tokenizer; safe from any number of threads. A ToolCallParser
// is one reply's state: one thread at a time.
//
// Invariants:
//  1. Control tokens come only from the template's own markers, never from message content: a marker becomes
//     its token id when the vocabulary has it as a control (or user-defined) token, else it stays text; the
//     content (and a tool call's name and arguments, and a tool's definition) is tokenised as text whatever it
//     contains (user-defined tokens, such as the Qwen vocabularies' <tool_call>, are matched in it as the
//     tokenizer always matches them, as llama.cpp and Hugging Face tokenise such text).
//  2. The result ends with the assistant's turn opened (and ChatOptions::assistant_start after it), so
//     generation continues as the assistant.
//  3. ToolCallParser gives the same events whatever the pieces the text is fed in, and a reply without a
//     `<tool_call>` block comes out as its text, byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "offgrid/tokenizer.h"

namespace offgrid {

enum class ChatTemplate { ChatML, None };

// Chooses the template from a setting (auto, chatml, none) and the GGUF's tokenizer.chat_template. auto takes
// ChatML when the GGUF template is ChatML-shaped or absent; any other GGUF template is refused (Error naming
// --chat-template).
ChatTemplate choose_chat_template(const std::string & setting, const std::string & gguf_template);

// A call an assistant made: the function's name and its arguments as JSON text (written as given).
struct ChatToolCall {
    std::string name;
    std::string arguments;
};

struct ChatMessage {
    ChatMessage(std::string role, std::string content, std::vector<ChatToolCall> tool_calls = {})
        : role(std::move(role)), content(std::move(content)), tool_calls(std::move(tool_calls)) {}
    std::string role;  // system, developer (rendered as system), user, assistant, tool
    std::string content;
    std::vector<ChatToolCall> tool_calls;  // assistant messages only
};

struct ChatOptions {
    // The functions the assistant may call, each as the JSON text the template writes on its own line (for an
    // OpenAI request: the tool object, `{"type": "function", "function": {...}}`, in Python's json.dumps form).
    // Empty: no tools section.
    std::vector<std::string> tools;
    // Text that opens the assistant's reply (its tool-call tags become their tokens), e.g. "<tool_call>\n" to
    // make the reply a call.
    std::string assistant_start;
};

// The prompt tokens of a conversation (BOS first when the tokenizer asks for it).
std::vector<int32_t> render_chatml(const Tokenizer & tok, const std::vector<ChatMessage> & messages,
                                   const ChatOptions & options = {});

// The text that ends an assistant turn; a stop string when the vocabulary has no such control token.
inline constexpr const char * kChatMLEnd = "<|im_end|>";
inline constexpr std::string_view kToolCallOpen = "<tool_call>";
inline constexpr std::string_view kToolCallClose = "</tool_call>";
// Whether `text` is one control or user-defined token of the vocabulary.
bool has_control_token(const Tokenizer & tok, const std::string & text);

// Splits an assistant's reply, as it is generated, into its text and its tool calls. A `<tool_call>` block
// whose body is a JSON object with a "name" among the known functions (and "arguments", an object or a JSON
// string; absent: {}) is a call (bytes that are not valid UTF-8 read as U+FFFD); any other block, and a block never
// closed, stays text. Whitespace next to a
// call is dropped (the newline before it, the newlines between calls). A text that might still grow into
// `<tool_call>` is held back until it cannot. With parallel false only the first call is kept (later blocks are
// dropped).
class ToolCallParser {
public:
    struct Event {
        bool call = false;
        std::string text;       // !call: a piece of the reply's text
        std::string name;       // call: the function
        std::string arguments;  // call: its arguments, compact JSON
    };

    explicit ToolCallParser(std::vector<std::string> functions, bool parallel = true);
    // Feeds the next piece of the reply; returns what became certain.
    std::vector<Event> feed(std::string_view text);
    // The reply ended: returns the rest.
    std::vector<Event> finish();
    size_t calls() const { return calls_; }

private:
    void step(std::vector<Event> & out, bool final);
    void give_text(std::vector<Event> & out, std::string text);
    std::vector<std::string> functions_;
    bool parallel_;
    bool inside_ = false;      // within a `<tool_call>` block
    bool after_call_ = false;  // nothing but whitespace given out since the last call
    std::string pending_;      // text not yet given out
    std::string held_space_;   // whitespace before a block (or at the end), until the block proves a call or not
    size_t calls_ = 0;
};

}  // namespace offgrid
