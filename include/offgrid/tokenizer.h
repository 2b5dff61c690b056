// The tokenizer of a model: text to token ids and back, special tokens, the vocabulary.
//
// Thread safety: a Tokenizer is immutable once built. Any number of threads may call its const methods at
// once, on the same object or on copies (copies share the tables; copying is cheap).
//
// Invariants:
//  1. detokenize(tokenize(x)) == x for every byte string x (parse_special false, render_special true).
//  2. Every id a Tokenizer returns is in [0, n_vocab()); ids out of that range given to it throw Error.
//  3. Special tokens (control, unknown) are produced from text only when parse_special is true; user-defined
//     tokens always are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "offgrid/error.h"

namespace offgrid {

class Model;
namespace runtime { class Tokenizer; }

// The kinds of tokenizer.ggml.token_type (values as stored in GGUF files).
enum class TokenType : int32_t {
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
};

class Tokenizer {
public:
    // The tokenizer stored in the model's GGUF file. Throws Error naming the file and key when the file has no
    // tokenizer, an unsupported model or pre-tokenizer, or inconsistent arrays.
    static Tokenizer from_model(const Model & model);
    // The same from a GGUF file's metadata alone (the weights are not loaded).
    static Tokenizer from_file(const std::string & gguf_path);
    // The byte-level BPE vocabulary built into the library (the one the generated test models carry), with no
    // model file at all. Built once per process and shared.
    static Tokenizer byte_level();

    // Token ids of `text`, appended to `out` by the second form. No BOS is added: prompt() does that.
    std::vector<int32_t> tokenize(std::string_view text, bool parse_special = false) const;
    void tokenize(std::string_view text, bool parse_special, std::vector<int32_t> & out) const;
    // The tokens a generation prompt starts with: bos() first when add_bos() says so, then tokenize(text).
    std::vector<int32_t> prompt(std::string_view text, bool parse_special = false) const;

    // The tokens' bytes, concatenated. With render_special false, control and unknown tokens give nothing;
    // unused and byte-typed tokens always give nothing. A piece may end inside a UTF-8 sequence (see
    // utf8_complete_prefix for streaming).
    std::string detokenize(std::span<const int32_t> ids, bool render_special = true) const;
    std::string token_to_piece(int32_t id, bool render_special = true) const;

    int32_t n_vocab() const;
    const std::string & token_text(int32_t id) const;  // as stored (byte-level text for normal tokens)
    TokenType token_type(int32_t id) const;
    std::optional<int32_t> find_token(std::string_view stored_text) const;
    std::optional<int32_t> bos() const;
    std::optional<int32_t> eos() const;
    std::optional<int32_t> pad() const;
    bool add_bos() const;  // whether a prompt starts with bos()
    // Tokens that end a generation: eos and the control tokens that end a turn or a text (<|im_end|>,
    // <|endoftext|>, <|eot_id|>, ...).
    bool is_end_of_generation(int32_t id) const;
    const std::vector<int32_t> & end_of_generation_tokens() const;  // sorted

    // The implementation, for the library's own modules.
    const runtime::Tokenizer & impl() const { return *impl_; }
    explicit Tokenizer(std::shared_ptr<const runtime::Tokenizer> impl);

private:
    std::shared_ptr<const runtime::Tokenizer> impl_;
};

// Length of the longest prefix of `bytes` that does not end inside an unfinished UTF-8 sequence: a stream of
// pieces prints that much and keeps the rest until the next piece completes it. A tail that can never become
// valid (a stray continuation byte, a bad lead byte) is not held back.
size_t utf8_complete_prefix(std::string_view bytes);

}  // namespace offgrid
