// /v1/embeddings: parsing OpenAI's request shape and computing the vectors on a Context of its own
// (embeddings = true, mean pooling, one sequence), created on the first request. The generation scheduler's
// context is never touched, so embedding requests cannot disturb running generations or their outputs.
//
// Invariants: one embedding request runs at a time (a mutex serialises them); after each text the context's
// memory is empty again (Context::embed removes its sequence), so a vector depends only on its own tokens.
// Vectors are L2-normalised (unit norm; a zero vector stays zero), as OpenAI-compatible servers return them.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "offgrid/context.h"
#include "offgrid/tokenizer.h"
#include "server/protocol.h"

namespace offgrid::server {

inline constexpr size_t kMaxEmbeddingInputs = 2048;  // as OpenAI

struct EmbeddingRequest {
    std::vector<std::vector<int32_t>> inputs;  // token ids, one list per input, none empty
    bool base64 = false;                       // encoding_format "base64"
};

// Parses a body ("input", "model", "encoding_format", "dimensions"). Throws ApiError (400/404) for bad input,
// including an input longer than `capacity` tokens.
EmbeddingRequest parse_embedding_request(const json & body, const Tokenizer & tok, const std::string & model_id,
                                         int32_t n_vocab, uint32_t n_embd, uint32_t capacity);

// Little-endian f32 bytes, base64-encoded (OpenAI's encoding_format "base64").
std::string base64_floats(const std::vector<float> & v);

class Embedder {
public:
    // n_ctx: cells of the embedding context (the longest input it takes, rounded up by Context).
    Embedder(std::shared_ptr<const Model> model, uint32_t n_ctx, int n_threads);

    // The most tokens one input may have.
    uint32_t capacity() const { return n_ctx_; }
    // Mean-pooled, L2-normalised embedding of each input, in order. Throws offgrid::Error when the model fails.
    std::vector<std::vector<float>> embed(const std::vector<std::vector<int32_t>> & inputs);

private:
    std::shared_ptr<const Model> model_;
    uint32_t n_ctx_;
    int n_threads_;
    std::mutex mu_;
    std::unique_ptr<Context> ctx_;  // created by the first embed()
};

}  // namespace offgrid::server
