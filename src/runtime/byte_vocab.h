// The project's own small byte-level BPE vocabulary, for the embedded default model (`offgrid run` without -m).
// It is generated in code, deterministically: the 256 byte tokens (id = byte value), then the merges learned by a
// tiny BPE trainer over an embedded English sample (one new token per merge, unless the merged text already
// exists), then <|endoftext|> as the control token that ends text (EOS, also the PLE end-of-sequence token).
// Pre-tokenizer "qwen2", model "gpt2": any byte string round-trips through tokenize / detokenize.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "gguf/value.h"

#include "runtime/tokenizer.h"

namespace offgrid::runtime {

inline constexpr size_t kByteVocabMaxMerges = 384;
inline constexpr std::string_view kByteVocabEos = "<|endoftext|>";

// The embedded training sample.
std::string_view byte_vocab_sample_text();

// Learns up to max_merges merges over `text` (split by the qwen2 pre-tokenizer; a pair must occur at least
// twice). The most frequent pair wins; ties go to the pair whose (left, right) ids are smallest.
TokenizerSpec train_byte_vocab(std::string_view text, size_t max_merges);

// train_byte_vocab(byte_vocab_sample_text(), kByteVocabMaxMerges), built once and cached.
const TokenizerSpec & byte_vocab_spec();
Tokenizer byte_vocab_tokenizer();
// The tokenizer.ggml.* key/values of byte_vocab_spec(), padded with Unused tokens up to n_vocab (the files the
// random-model generators write).
std::vector<gguf::KeyValue> byte_vocab_metadata(uint32_t n_vocab = 0);

}  // namespace offgrid::runtime
