// Pre-tokenisation: splitting text into the words that BPE then encodes one by one. The splitters follow the
// regular expressions of the Qwen tokenizers, written out by hand (llama.cpp runs the same hand-written scans
// rather than a regex engine, and its behaviour is the reference for the test vectors):
//
//   qwen2:  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+
//           |\s+(?!\S)|\s+
//   qwen35: the same, except that letter runs also take combining marks: [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+, and
//           the punctuation run excludes them: ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace offgrid::runtime {

enum class PreTokenizer { Qwen2, Qwen35 };

// "qwen2" / "qwen35" as written in tokenizer.ggml.pre; nullopt for any other name.
std::optional<PreTokenizer> pre_tokenizer_from_name(std::string_view name);
std::string_view pre_tokenizer_name(PreTokenizer pre);

// Appends the words of `text` to `words` (views into text). The words cover the text exactly, in order.
// Bytes that are not valid UTF-8 are split like U+FFFD but stay raw bytes in the words.
void split_words(std::string_view text, PreTokenizer pre, std::vector<std::string_view> & words);

}  // namespace offgrid::runtime
