// The public API's core: load a model, create a context over the hybrid memory, decode batches, read logits and
// embeddings, edit sequences, save and restore state. The rest of the contract: offgrid/tokenizer.h,
// offgrid/sampler.h, offgrid/chat.h, offgrid/error.h; for C, offgrid.h.
//
// Thread safety:
//  - A Model is immutable after load(): any number of threads and contexts may share it.
//  - A Context is not thread-safe: one thread at a time may call it (guard it when several threads do). Its
//    decode runs on its own pool of params().n_threads threads. Different contexts, even over one Model, run
//    in parallel without locks.
//  - Pointers from logits() and embeddings() stay valid until the next call that changes the context.
//
// Invariants:
//  1. A failed call (a decode status other than Ok, or an Error thrown by an edit or a state load) leaves the
//     memory as it was, or, for a failed state load, consistent with the target sequence dropped.
//  2. The three caches (attention, recurrent, indexer) hold the same cells after every call.
//  3. A token's logits do not depend on n_threads, n_ubatch or the other tokens of its micro-batch (at one ISA
//     level; docs/kernels.md, "Batch invariance").
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "offgrid/error.h"

namespace offgrid {

// Most threads a Context takes (ContextParams::n_threads).
inline constexpr int kMaxThreads = 256;

namespace model { class Architecture; }
namespace runtime { class ContextImpl; struct ContextAccess; }

// How the weights get into memory.
//  Read: the whole file is read at load into memory of the process's own, 2 MiB aligned and advised as
//        transparent huge pages: one TLB entry per 2 MiB, so decode (which streams every weight byte each
//        token) runs at the bus's speed; costs the file's size in RAM and the read time; a file changed later
//        cannot affect the process.
//  Map:  the file is memory-mapped: loads instantly, pages shared with the page cache and other processes, in
//        whatever page size the page cache holds the file (often 4 KiB: decode then runs 1.3-1.5x slower);
//        a file truncated while mapped ends the process with SIGBUS.
//  Auto: Read when the file takes at most half of the memory available now, else Map.
enum class WeightLoad { Auto, Map, Read };

// A loaded model. Shared by any number of contexts.
class Model {
public:
    // Throws offgrid::Error (or FileError) naming the file and what is wrong.
    // While the model lives, this process refuses to write over its file.
    static std::shared_ptr<const Model> load(const std::string & path, WeightLoad how = WeightLoad::Auto);
    // What Auto picks for a file of `file_bytes` with `available_bytes` free (0: unknown, then Map).
    static WeightLoad resolve(WeightLoad how, uint64_t file_bytes, uint64_t available_bytes);

    int32_t n_vocab() const;
    uint32_t n_ctx_train() const;
    std::string describe() const;   // one line: architecture, sizes, sparse-attention settings
    const std::string & architecture() const;  // general.architecture
    uint32_t n_embd() const;        // width of an embedding (Context::embeddings)
    const std::string & path() const;
    // Identifies what the model computes: every metadata key but the descriptive general.* ones (so every
    // hyperparameter and the tokenizer), the tensor table and every byte of tensor data (one changed weight byte
    // changes it). State and prefix-cache files carry it and refuse another model. Hashed on first use, on all
    // hardware threads (docs/cli.md gives the cost), then kept.
    uint64_t fingerprint() const;
    // Weight bytes one decoded token reads (the expert stacks for the experts a token uses; not the embedding
    // tables, of which a token reads a few rows).
    uint64_t weight_bytes_per_token() const;
    // A string metadata value of the GGUF file (e.g. "tokenizer.chat_template"); empty when absent or not a string.
    std::string metadata_string(const std::string & key) const;

    const model::Architecture & impl() const { return *impl_; }

    explicit Model(std::shared_ptr<const model::Architecture> impl, std::string path);

private:
    std::shared_ptr<const model::Architecture> impl_;
    std::string path_;
    mutable std::atomic<uint64_t> fingerprint_{0};  // 0: not computed yet
};

// How a decode call's hidden states become embeddings (ContextParams::embeddings). None: one row per output
// token. Mean, Last, Cls (the first): one row per sequence over its tokens in the call, output flag or not.
enum class Pooling { None, Mean, Last, Cls };

struct ContextParams {
    // Total cells, rounded up to a multiple of 256, at most 2^30. 0 = the model's context length, or less when its
    // caches would take more than half of the memory available (params() tells; ask for more explicitly).
    uint32_t n_ctx = 0;
    uint32_t n_batch = 0;      // most tokens per decode call; 0 = n_ctx
    uint32_t n_ubatch = 512;   // most tokens per micro-batch (clamped to n_batch)
    uint32_t n_seq_max = 1;    // sequence ids 0 .. n_seq_max-1
    bool unified = false;      // one stream shared by all sequences, or one per sequence
    uint32_t n_rs_seq = 0;     // recurrent rollback snapshots per sequence
    // "f32", "f16" or "q8_0" (head sizes a multiple of 32). K rows and, when f32 or f16, the indexer rows; a q8_0
    // K cache keeps its indexer rows in f16.
    std::string type_k = "f16";
    std::string type_v = "f16";  // "f32", "f16" or "q8_0"
    int n_threads = 1;         // 1..kMaxThreads; more is refused
    bool qsa_dense = false;    // force dense attention on sparse-attention layers (for comparisons)
    // Embeddings output: the model's hidden state per token (the vector its architecture defines as its embedding,
    // docs/architectures.md "Embeddings"), n_embd() floats, pooled as `pooling` says. Logits are still computed
    // for output tokens.
    bool embeddings = false;
    Pooling pooling = Pooling::None;
    // Keep every decoded token's final wide residual (the last layer's output before the output mixer, in models
    // with an MTP draft head), the hidden input of that head (offgrid/speculative.h). Read with mtp_hidden().
    bool mtp_hidden = false;
};

// One token of a decode call. pos < 0 means "next position of its first sequence".
struct BatchToken {
    int32_t token = 0;
    int32_t pos = -1;
    std::vector<int32_t> seqs{0};
    bool output = false;
};

// Ok; NoSpace: no cells for the batch; InvalidBatch: the batch breaks a rule (the message names the token and the
// rule); Aborted: the abort callback stopped the call; Failed: the model could not run a micro-batch.
// On anything but Ok the memory is as it was before the call.
enum class DecodeStatus { Ok, NoSpace, InvalidBatch, Aborted, Failed };

struct DecodeResult {
    DecodeStatus status = DecodeStatus::Ok;
    std::string message;  // why, when not Ok
    bool ok() const { return status == DecodeStatus::Ok; }
};

// Memory use of a context, by cache.
struct MemoryBreakdown {
    uint64_t attention_bytes = 0;
    uint64_t recurrent_bytes = 0;
    uint64_t indexer_bytes = 0;
    std::string describe() const;   // e.g. "attention 2.0 MiB (f16), recurrent 0.5 MiB (f32), indexer 1.0 MiB (f16)"
};

class Context {
public:
    // Throws offgrid::Error for parameters the model or the memory cannot take.
    Context(std::shared_ptr<const Model> model, const ContextParams & params);
    ~Context();
    Context(const Context &) = delete;
    Context & operator=(const Context &) = delete;

    const Model & model() const;
    const ContextParams & params() const;  // after rounding and clamping

    // One decode call. On failure the memory is as it was before the call.
    DecodeResult decode(const std::vector<BatchToken> & batch);
    // Called between micro-batches; returning true, or throwing anything, aborts the call (status Aborted, memory
    // rolled back).
    void set_abort_callback(std::function<bool()> cb);

    // Logits of the last decode call, one row per output token in batch order (none after a failed call).
    int32_t n_outputs() const;
    const float * logits(int32_t i) const;

    // Embeddings of the last decode call (needs params().embeddings; throws offgrid::Error otherwise or out of
    // range). Pooling None: row i of the output tokens in batch order (the rows of logits()).
    const float * embeddings(int32_t i) const;
    // With params().mtp_hidden: the final wide residual of token i of the last decode call (every token, batch
    // order), mtp_hidden_width() floats. Throws offgrid::Error otherwise or out of range.
    const float * mtp_hidden(int32_t i) const;
    uint32_t mtp_hidden_width() const;  // 0 when the model has none
    // Pooling Mean, Last or Cls: the pooled embedding of `seq` over its tokens in the last call; a token shared
    // by several sequences counts in each. Throws when seq had no token in the call.
    const float * embeddings_seq(int32_t seq) const;
    // One text's embedding (what a server's /v1/embeddings asks): decodes `tokens` into the empty sequence `seq`
    // at positions 0.., pools them with params().pooling (None counts as Mean), then removes the sequence again,
    // so the memory is as before. At most params().n_batch tokens. Throws offgrid::Error with the reason.
    std::vector<float> embed(const std::vector<int32_t> & tokens, int32_t seq = 0);

    // Sequence operations, ranges [p0, p1) with negative p0 = 0 and negative p1 = no upper bound.
    bool seq_rm(int32_t seq, int32_t p0, int32_t p1);
    void seq_cp(int32_t src, int32_t dst, int32_t p0 = -1, int32_t p1 = -1);
    void seq_keep(int32_t seq);
    void seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta);
    void seq_div(int32_t seq, int32_t p0, int32_t p1, int32_t d);
    int32_t seq_pos_min(int32_t seq) const;  // -1 when empty
    int32_t seq_pos_max(int32_t seq) const;  // -1 when empty
    // Most cells one sequence can hold: its stream's size (per-sequence streams) or the whole cache (unified).
    uint32_t seq_capacity() const;
    // Cells not used by any sequence in the stream of `seq` (unified: the whole cache).
    uint32_t n_free_cells(int32_t seq) const;
    void clear();

    MemoryBreakdown memory_breakdown() const;

    // State of the whole context (seq < 0) or of one sequence. Loading a sequence state may target another id.
    // A failed load throws offgrid::Error and leaves the caches consistent (the target sequence dropped).
    std::vector<uint8_t> state_get(int32_t seq = -1) const;
    void state_set(const std::vector<uint8_t> & data, int32_t seq = -1);
    // A sequence's tail: its cells at positions >= `from` and its whole recurrent state. state_append restores one
    // onto a sequence whose cells all lie before the tail's first position (appending the cells, replacing the
    // recurrent state), so a chain of tails, each taken where the one below it ended, rebuilds a sequence whose
    // earlier part is stored once. A failed append throws offgrid::Error with the target sequence dropped.
    std::vector<uint8_t> state_get_tail(int32_t seq, int32_t from) const;
    void state_append(const std::vector<uint8_t> & data, int32_t seq);
    // State files carry a header (magic, version, model fingerprint, token list) and refuse another model.
    void state_save_file(const std::string & path, const std::vector<int32_t> & tokens, int32_t seq = -1) const;
    std::vector<int32_t> state_load_file(const std::string & path, int32_t seq = -1);

private:
    friend struct runtime::ContextAccess;  // the engine's own tools reach the memory (src/runtime/context_access.h)
    std::unique_ptr<runtime::ContextImpl> impl_;
};

}  // namespace offgrid
