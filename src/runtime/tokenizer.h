// Byte-level BPE tokenizer (tokenizer.ggml.model "gpt2") with the Qwen pre-tokenizers, built from GGUF metadata
// or from plain vectors. Tokenisation follows llama.cpp (the reference of the ecosystem's test vectors):
//   1. special tokens are cut out of the text as whole tokens (user-defined tokens always, control and unknown
//      tokens only with parse_special), longest first;
//   2. the remaining text is split into words by the pre-tokenizer (unicode_split.h);
//   3. each word's bytes are mapped to printable code points (GPT-2 bytes_to_unicode) and merged by BPE,
//      lowest merge rank first, leftmost first among equal ranks.
// Detokenisation maps the pieces back to bytes, so detokenize(tokenize(x)) == x for any byte string x.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/value.h"
#include "offgrid/tokenizer.h"
#include "runtime/unicode_split.h"

namespace offgrid::gguf {
class Reader;
}
namespace offgrid {
class Model;
}

namespace offgrid::runtime {

using TokenId = int32_t;

// tokenizer.ggml.token_type values (the public enum).
using TokenType = offgrid::TokenType;

// The tokenizer metadata as a GGUF file stores it (the tokenizer.ggml.* keys).
struct TokenizerSpec {
    std::string model = "gpt2";         // tokenizer.ggml.model
    std::string pre = "qwen2";          // tokenizer.ggml.pre
    std::vector<std::string> tokens;    // tokenizer.ggml.tokens, byte-level text (normal tokens)
    std::vector<int32_t> token_types;   // tokenizer.ggml.token_type; empty means all Normal
    std::vector<std::string> merges;    // tokenizer.ggml.merges, "left right", best first
    std::optional<TokenId> bos;         // tokenizer.ggml.bos_token_id
    std::optional<TokenId> eos;         // tokenizer.ggml.eos_token_id
    std::optional<TokenId> pad;         // tokenizer.ggml.padding_token_id
    std::optional<bool> add_bos;        // tokenizer.ggml.add_bos_token (absent: no BOS, as for gpt2 in llama.cpp)
};

class Tokenizer {
public:
    // Validates the spec; throws offgrid::Error naming the field (and the index) that is wrong.
    explicit Tokenizer(const TokenizerSpec & spec);

    // Reads the tokenizer.ggml.* keys. Throws offgrid::Error naming the file and key when the file has no
    // tokenizer, an unsupported model or pre-tokenizer, or inconsistent arrays.
    static Tokenizer from_gguf(const gguf::Reader & reader);
    // The same from a loaded public Model (its GGUF file's metadata).
    static Tokenizer from_model(const offgrid::Model & model);
    // Reads only the spec (e.g. to copy a tokenizer into another GGUF).
    static TokenizerSpec spec_from_gguf(const gguf::Reader & reader);

    std::vector<TokenId> tokenize(std::string_view text, bool parse_special = false) const;
    void tokenize(std::string_view text, bool parse_special, std::vector<TokenId> & out) const;

    // Bytes of the tokens, concatenated. With render_special false, control and unknown tokens give nothing.
    // Unused and byte-typed tokens always give nothing (as in llama.cpp). Throws Error on an id out of range.
    std::string detokenize(std::span<const TokenId> ids, bool render_special = true) const;
    std::string token_to_piece(TokenId id, bool render_special = true) const;

    size_t n_vocab() const;
    const std::string & token_text(TokenId id) const;   // as stored (byte-level text for normal tokens)
    TokenType token_type(TokenId id) const;
    std::optional<TokenId> find_token(std::string_view text) const;   // by stored text
    std::optional<TokenId> bos() const;
    std::optional<TokenId> eos() const;
    std::optional<TokenId> pad() const;
    // Whether a prompt should start with bos() (only when a BOS token exists and add_bos_token says so).
    bool add_bos() const;
    // Tokens that end a generation: eos, and the control tokens the ecosystem uses to end a turn or a text
    // (<|endoftext|>, <|im_end|>, <|eot_id|>, <|eom_id|>, <|end|>, <end_of_turn>, </s>, ...).
    bool is_end_of_generation(TokenId id) const;
    const std::vector<TokenId> & end_of_generation_tokens() const;   // sorted
    PreTokenizer pre_tokenizer() const;
    size_t n_merges() const;

private:
    struct Impl;
    std::shared_ptr<const Impl> impl_;  // immutable, so copies share it
};

// The same reading from a plain key/value list (e.g. metadata about to be written); `source` names it in errors.
TokenizerSpec spec_from_metadata(std::span<const gguf::KeyValue> metadata, const std::string & source = "<metadata>");

// The tokenizer.ggml.* key/values of a spec, ready for a GGUF writer: model, pre, tokens, token_type (i32; all
// Normal when the spec has none), merges, the bos / eos / padding ids (u32) and add_bos_token (bool) that are set.
std::vector<gguf::KeyValue> tokenizer_metadata(const TokenizerSpec & spec);

}  // namespace offgrid::runtime
