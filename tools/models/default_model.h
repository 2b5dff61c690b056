// The built-in model that commands use without -m. By default it is the trained model shipped in the repository
// (models/offgrid-speaks.gguf, read in place). OFFGRID_BUILTIN=tiny selects instead the random `tiny` preset with
// the byte-level vocabulary, generated deterministically on first use into a cache directory and reused
// afterwards (the test suite runs with it, so its figures do not depend on the trained weights).
//
// Thread safety: default_model_path() may create the cached file; two processes doing so at once each write a
// temporary file and rename it into place, so the file is always complete.
#pragma once

#include <string>

namespace offgrid::tools {

// $OFFGRID_CACHE, else $XDG_CACHE_HOME/offgrid, else $HOME/.cache/offgrid. Throws when none can be formed.
std::string cache_dir();
// The built-in model's file: the shipped trained model (OFFGRID_BUILTIN unset, empty or "speaks"), or the tiny
// preset of the first registered generator (models/model_generator.h) in cache_dir(), created (with its
// directory) when missing (OFFGRID_BUILTIN=tiny). Throws offgrid::Error for another value or when the shipped
// file cannot be found.
std::string default_model_path();
// Where the shipped model is looked for, in order: $OFFGRID_MODELS_DIR, the source tree's models/ (fixed at
// build time), then models/ next to and one level above the executable's folder.
std::string shipped_model_path();

}  // namespace offgrid::tools
