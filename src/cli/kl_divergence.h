// `offgrid perplexity --kl-divergence-base FILE` / `--kl-divergence`: a reference model's log-probabilities over a
// text are saved once, then another model (another weight type, activation path or attention mode) is scored
// against them token by token, in the manner of llama.cpp's llama-perplexity.
//
// File "OGKLD001": magic (8 bytes), u32 n_vocab, u32 chunk, u32 half (0/1), u32 reserved, u64 n_tokens,
// i32 tokens[n_tokens], then one row of f32 log-softmax values (n_vocab each) per scored position, in the order
// perplexity scores them. Invariant: the rows count equals the scored positions implied by (n_tokens, chunk, half).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "offgrid/files.h"

namespace offgrid::cli {

// Writes the base file row by row (atomically: the file appears only on finish()).
class KldBaseWriter {
public:
    KldBaseWriter(const std::string & path, uint32_t n_vocab, uint32_t chunk, bool half,
                  const std::vector<int32_t> & tokens);
    void add_row(const float * logits);  // stores log-softmax(logits)
    void finish();

private:
    std::unique_ptr<AtomicFile> file_;
    uint32_t n_vocab_;
    std::vector<float> row_;
};

// Reads the base file's header and tokens, then its rows one at a time in order.
class KldBaseReader {
public:
    explicit KldBaseReader(const std::string & path);
    ~KldBaseReader();
    uint32_t n_vocab() const { return n_vocab_; }
    uint32_t chunk() const { return chunk_; }
    bool half() const { return half_; }
    const std::vector<int32_t> & tokens() const { return tokens_; }
    // The next row of log-probabilities. Throws offgrid::Error past the end of the file.
    const std::vector<float> & next_row();

private:
    std::string path_;
    std::FILE * f_ = nullptr;
    uint32_t n_vocab_ = 0, chunk_ = 0;
    bool half_ = false;
    std::vector<int32_t> tokens_;
    std::vector<float> row_;
};

// Per-token statistics of KL(base || model), top-1 agreement and both perplexities.
class KldStats {
public:
    void add(const std::vector<float> & base_logprobs, const float * logits, int32_t target);
    // The llama.cpp-style summary: mean KLD with its standard error, percentiles, same-top-1 share, PPL of both
    // and their ratio and difference.
    void print(std::FILE * out) const;
    double mean_kld() const;

private:
    std::vector<double> kld_;
    double nll_base_ = 0, nll_model_ = 0;
    size_t same_top_ = 0;
};

}  // namespace offgrid::cli
