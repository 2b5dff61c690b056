// Input files of the commands (prompts, perplexity texts, token-id lists), read in blocks and turned into tokens
// piece by piece, so that an input longer than what the caller can use is refused after reading about that much,
// never after holding the whole file.
//
// Text is cut only where the pre-tokenizers always end a word: after a line feed that is followed by a printable
// ASCII character, or at a space between two ASCII letters. No word spans such a position, so the tokens of the
// pieces are exactly the tokens of the whole text. A stretch of text without any such position is kept whole
// until its bytes alone prove it too long (no token is longer than the vocabulary's longest piece), so memory
// stays O(limit x longest piece) even then.
//
// Thread safety: the functions keep no state between calls; several threads may call them at once (a Tokenizer
// may be shared, offgrid/tokenizer.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "offgrid/tokenizer.h"

namespace offgrid {

struct BoundedTokens {
    std::vector<int32_t> tokens;  // the tokens, at most limit + (one piece) of them when `over`
    bool over = false;            // the input has more than `limit` tokens (reading stopped there)
};

// Opens `path` as a regular file or throws Error naming `what` ("-f") and the path (before any work, so a missing
// prompt file is reported before the model loads).
void check_input_file(const std::string & path, const std::string & what);
// Tokenises the text of `path` (no special tokens parsed, no BOS) until it has more than `limit` tokens.
// `block` is the read size. Throws Error on read errors.
BoundedTokens tokenize_file(const Tokenizer & tok, const std::string & path, size_t limit, const std::string & what,
                            size_t block = 1u << 20);
// The same cuts applied to a text in memory (what tokenize_file does with each block).
BoundedTokens tokenize_text(const Tokenizer & tok, std::string_view text, size_t limit, size_t block = 1u << 20);
// Token ids separated by white space, each in 0..n_vocab-1, until more than `limit`. Errors name the file, the
// token's index and its text with control bytes escaped.
BoundedTokens read_token_ids(const std::string & path, int32_t n_vocab, size_t limit, const std::string & what);
// Text shown in messages: printable ASCII and valid UTF-8 as they are, control bytes and invalid bytes as \xNN,
// cut to at most `max` bytes with "..." (a file's bytes must never drive the user's terminal).
std::string printable(std::string_view text, size_t max = 64);

}  // namespace offgrid
