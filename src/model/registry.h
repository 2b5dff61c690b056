// The architectures this build knows, keyed by the GGUF `general.architecture` string. Adding one is a line in
// registry.cpp (see docs/architectures.md, "Adding a third architecture").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "model/architecture.h"

namespace offgrid::model {

// Opens and maps a GGUF file and loads it with the loader its general.architecture names. Throws offgrid::Error
// (or FileError) naming the file and what is wrong, including an architecture this build does not know.
std::unique_ptr<const Architecture> load_model(const std::string & path);
// The same, from an open reader (tests build models in memory).
std::unique_ptr<const Architecture> load_model(gguf::Reader reader);
// Only the layers of `span` (a pipeline rank, model/architecture.h): the model binds the tensors tensors_for
// names and nothing else, so a reader from gguf::Reader::open_table with those mapped (map_tensors) suffices.
std::unique_ptr<const Architecture> load_model(gguf::Reader reader, const LayerSpan & span);
// Which of reader.tensors() loading `span` binds (one flag per tensor). Every tensor is wanted by at least one
// span of any partition of the layers. Reads the metadata and the tensor table only.
std::vector<bool> tensors_for(const gguf::Reader & reader, const LayerSpan & span);

// The known general.architecture strings, in registry order.
std::vector<std::string> architecture_names();

}  // namespace offgrid::model
