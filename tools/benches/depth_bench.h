// Speed at depth: fill a context to each depth once (sparse QSA), then measure prompt processing and one-token
// decode from there, with QSA sparse and QSA forced dense (the same cache contents, moved by state get/set).
// Used by `offgrid bench` and bench/decode_depth.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "offgrid/context.h"

namespace offgrid::tools {

struct DepthBenchParams {
    std::vector<uint32_t> depths{0, 1024, 16384};
    uint32_t n_prompt = 512;   // tokens of the prompt-processing test (0 = skip)
    uint32_t n_gen = 128;      // one-token decode calls of the generation test (0 = skip)
    uint32_t n_batch = 512;    // decode call size while filling and for the prompt test
    uint32_t n_ubatch = 512;
    int n_threads = 1;
    bool sparse = true;
    bool dense = true;
    std::string type_k = "f16", type_v = "f16";
    uint64_t seed = 1;         // token ids are pseudo-random
    // Context cells; 0 = the deepest depth plus the larger test (without state files) or the model's context
    // length (with them, so a state saved by one run fits the context of any other run of the same model).
    uint32_t n_ctx = 0;
    // When not empty: after filling to each depth, the filler's state goes to DIR/depth-<depth>.ogstate
    // (Context::state_save_file, the filled tokens as its token list).
    std::string save_states_dir;
    // When not empty: the filler starts from this state file instead of an empty context; its depth is the
    // file's token count (checked against the restored positions). Depths below it are refused; deeper ones are
    // filled from there with the pseudo-random stream advanced past the saved tokens, so the figures equal those
    // of a run that filled everything itself. No depth given = the file's depth alone.
    std::string load_state;
    // Called with a short status line while filling (for a progress display); may be empty.
    std::function<void(const std::string &)> status;
};

struct DepthBenchResult {
    std::string mode;          // "sparse" or "dense"
    uint32_t depth = 0;
    uint32_t n_prompt = 0;
    double prompt_seconds = 0;
    uint32_t n_gen = 0;
    double gen_seconds = 0;
    double prompt_tokens_per_second() const { return prompt_seconds > 0 ? n_prompt / prompt_seconds : 0; }
    double gen_tokens_per_second() const { return gen_seconds > 0 ? n_gen / gen_seconds : 0; }
    double ms_per_decoded_token() const { return n_gen ? 1000.0 * gen_seconds / n_gen : 0; }
};

// Parallel sequences (as the server's continuous batching runs them): n_seq sequences, each first filled to
// `depth` tokens, then n_gen steps that decode one token of every sequence in one call (n_seq tokens per step,
// each in its own sequence and stream, all with logits).
struct ParallelBenchResult {
    uint32_t n_seq = 0;
    uint32_t depth = 0;
    uint32_t n_gen = 0;        // steps
    double gen_seconds = 0;
    double tokens_per_second() const { return gen_seconds > 0 ? double(n_seq) * n_gen / gen_seconds : 0; }
    double ms_per_step() const { return n_gen ? 1000.0 * gen_seconds / n_gen : 0; }
};

// One result per (depth, n_seq) in that order, using params' depths, n_gen, n_batch, n_ubatch, threads, cache
// types and seed (QSA sparse; prompt tests and state files are not used). With rounds > 1 every sequence count
// is measured that many times, the counts taking turns, and the fastest round is kept.
std::vector<ParallelBenchResult> run_parallel_bench(const std::shared_ptr<const Model> & model,
                                                    const DepthBenchParams & params,
                                                    const std::vector<uint32_t> & n_seqs, uint32_t rounds = 1);

// Path of the state saved at `depth` under `dir`.
std::string depth_state_path(const std::string & dir, uint32_t depth);

// Throws offgrid::Error (depths beyond the model's context, a failed decode, a state file of another model or
// context shape, ...).
std::vector<DepthBenchResult> run_depth_bench(const std::shared_ptr<const Model> & model, const DepthBenchParams & params);

}  // namespace offgrid::tools
