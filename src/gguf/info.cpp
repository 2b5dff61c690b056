// The public view of a GGUF file's header (offgrid/gguf.h) over the reader.
#include "gguf/reader.h"
#include "tensor/types.h"

namespace offgrid::gguf {

GgufInfo GgufInfo::read(const std::string & path) {
    const Reader r = Reader::open(path);
    GgufInfo info;
    info.path = r.path();
    info.version = r.version();
    info.file_size = r.bytes().size();
    info.alignment = r.alignment();
    info.data_offset = r.data_offset();
    info.metadata = r.metadata();  // packed arrays are shared, not copied
    info.tensors.reserve(r.tensors().size());
    for (const TensorInfo & t : r.tensors()) {
        info.tensors.push_back({t.name, t.ne, std::string(tensor::traits(t.type).name), t.offset, t.n_bytes});
    }
    return info;
}

}  // namespace offgrid::gguf
