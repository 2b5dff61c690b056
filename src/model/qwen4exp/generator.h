// qwen4exp's random-weight files with the library's byte-level vocabulary: what `offgrid gen-model` and the
// built-in tiny model write (generator.cpp also registers the generator with tools/models/model_generator.h).
// Built into the tools library, not into the model library.
#pragma once

#include <string>

#include "model/qwen4exp/gen_model.h"

namespace offgrid::model::qwen4exp {

// Attaches the byte-level vocabulary: the PLE end-of-sequence token follows it, and n_vocab becomes its size
// unless the config asks for more rows (then the vocabulary is padded with Unused tokens).
GenConfig with_byte_vocab(GenConfig config);

// Generates the model with the byte-level vocabulary and writes it to `path` through a temporary file renamed
// into place, so `path` is either absent or complete. Throws offgrid::Error.
void write_model_file(const GenConfig & config, const std::string & path);

}  // namespace offgrid::model::qwen4exp
