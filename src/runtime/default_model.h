// The built-in model that commands use without -m. By default it is the trained model shipped in the repository
// (models/offgrid-speaks.gguf, read in place). OFFGRID_BUILTIN=tiny selects instead the random `tiny` preset with
// the byte-level vocabulary, generated deterministically on first use into a cache directory and reused
// afterwards (the test suite runs with it, so its figures do not depend on the trained weights).
#pragma once

#include <string>
#include <vector>

#include "gguf/value.h"
#include "model/glm5next/gen_model.h"
#include "model/qwen4exp/gen_model.h"

namespace offgrid::runtime {

// Attaches the embedded byte-level vocabulary: the PLE end-of-sequence token follows it, and n_vocab becomes its
// size unless the config asks for more rows (then the vocabulary is padded with Unused tokens).
model::qwen4exp::GenConfig with_byte_vocab(model::qwen4exp::GenConfig config);
// The tokenizer.ggml.* key/values of the embedded vocabulary, padded with Unused tokens up to n_vocab.
std::vector<gguf::KeyValue> byte_vocab_metadata(uint32_t n_vocab = 0);

// Generates a model with the embedded vocabulary and writes it to `path` through a temporary file in the same
// directory that is renamed into place, so `path` is either absent or complete. Throws offgrid::Error.
void write_model_file(const model::qwen4exp::GenConfig & config, const std::string & path);
// The same for a glm5-next model (n_vocab follows the embedded vocabulary).
void write_model_file(model::glm5next::GenConfig config, const std::string & path);

// $OFFGRID_CACHE, else $XDG_CACHE_HOME/offgrid, else $HOME/.cache/offgrid. Throws when none can be formed.
std::string cache_dir();
// The built-in model's file: the shipped trained model (OFFGRID_BUILTIN unset, empty or "speaks"), or the tiny
// preset's file in cache_dir(), created (with its directory) when missing (OFFGRID_BUILTIN=tiny). Throws
// offgrid::Error for another value or when the shipped file cannot be found.
std::string default_model_path();
// Where the shipped model is looked for, in order: $OFFGRID_MODELS_DIR, the source tree's models/ (fixed at
// build time), then models/ next to and one level above the executable's folder.
std::string shipped_model_path();

}  // namespace offgrid::runtime
