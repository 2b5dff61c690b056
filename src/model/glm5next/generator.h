// glm5-next's random-weight files with the library's byte-level vocabulary: what `offgrid gen-model --arch
// glm5-next` writes (generator.cpp also registers the generator with tools/models/model_generator.h). Built into
// the tools library, not into the model library.
#pragma once

#include <string>

#include "model/glm5next/gen_model.h"

namespace offgrid::model::glm5next {

// Generates the model (n_vocab follows the byte-level vocabulary) and writes it to `path` through a temporary
// file renamed into place, so `path` is either absent or complete. Throws offgrid::Error.
void write_model_file(GenConfig config, const std::string & path);

}  // namespace offgrid::model::glm5next
