// The model fingerprint (Model::fingerprint, offgrid/context.h) in parts, for processes that each hold part of
// the tensor data (pipeline ranks, src/distributed/): each hashes the pieces of the tensors it maps, and the
// pieces' hashes, gathered in table order, fold into the value one process computes from the whole file.
#pragma once

#include <cstdint>
#include <vector>

#include "common/data_hash.h"
#include "gguf/reader.h"

namespace offgrid::runtime {

// A piece of one tensor's data: tensors are cut into pieces of at most 32 MiB, in table order.
struct HashPiece {
    size_t tensor;  // index in reader.tensors()
    uint64_t at;    // first byte within the tensor
    uint64_t n;
};
std::vector<HashPiece> fingerprint_pieces(const gguf::Reader & reader);

// The fingerprint from the metadata, the tensor table and one hash (data_hash) per piece of fingerprint_pieces,
// in that order.
uint64_t fold_fingerprint(const gguf::Reader & reader, const std::vector<LaneCrc> & piece_hashes);

// Everything in one process: hashes every piece (on all hardware threads) and folds them. Every tensor must be
// mapped.
uint64_t compute_fingerprint(const gguf::Reader & reader);

}  // namespace offgrid::runtime
