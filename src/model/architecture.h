// The seam between the runtime and a model family: everything the runtime needs from a loaded model, whatever
// its architecture. One architecture implements this interface (src/model/<arch>/), registers its loader in
// registry.cpp under its `general.architecture` string, and the runtime never names it.
//
// Invariants an implementation keeps:
//  1. cache_shape() and memory_traits() are fixed at load: a context creates its memory from them once.
//  2. forward() changes only the storage rows the plan names (the tokens' cells, the new pools' rep rows, the
//     groups' recurrent rows and snapshots) and returns rows for the plan's output tokens only, in ubatch order.
//  3. A result row depends only on its token's sequence (its cells, its recurrent state), never on which other
//     tokens share the ubatch, nor on the thread count.
//  4. Bad input (a plan it cannot run, a token id out of range) throws offgrid::Error; it never crashes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "memory/plan.h"
#include "memory/window.h"
#include "ops/thread_pool.h"
#include "ops/workspace.h"
#include "tensor/types.h"

namespace offgrid::model {

// How the memory must book-keep for this model.
struct MemoryTraits {
    uint32_t kpool = 0;          // pool size of the indexer (0: no pools)
    bool kpool_by_order = true;  // pools are runs of a sequence's cells in order, or kpool consecutive
                                 // positions aligned to the sequence's first position
    memory::Window window;       // sliding window of the attention cache (none: every cell stays visible)
};

// What a ubatch carries from one range of layers to the next (a pipeline of processes, src/distributed/): the
// hyper-connection streams after the last layer run and any per-token data later layers read. Opaque to all but
// the architecture that wrote it; the same architecture on the same ubatch reads it back.
struct LayerCarry {
    std::vector<float> streams;   // n_tokens x carry_width() floats, ubatch order
    std::vector<uint32_t> side;   // per-token side data the later layers read (such as a sparse-attention selection); may be empty
};

struct ForwardOptions {
    bool dense = false;          // sparse-attention layers attend to every visible cell (comparisons,
                                 // benchmarks); pools are still stored and re-pooled, so the caches stay those
                                 // of a sparse run
    bool logits = true;          // compute the head for the output tokens
    bool hidden = false;         // also return every ubatch token's hidden state (embeddings, hidden_width()),
                                 // output flag or not
    bool wide_hidden = false;    // also return every ubatch token's final residual before the output mixer
                                 // (an MTP draft head's input, wide_hidden_width()); models without one ignore it
    // A layer range, as ForwardContext's fields of the same names (ForwardResult::carry is its output).
    uint32_t first_layer = 0;
    uint32_t end_layer = 0;
    const LayerCarry * carry_in = nullptr;
};

// Where a forward writes its results; a null pointer: not wanted.
struct ForwardOutput {
    float * logits = nullptr;       // n_outputs x n_vocab(), the output tokens in ubatch order
    float * hidden = nullptr;       // n_tokens x hidden_width(), ubatch order
    float * wide_hidden = nullptr;  // n_tokens x wide_hidden_width(), ubatch order (ignored when that is 0)
    LayerCarry * carry = nullptr;   // what a range ending before the last layer hands on (ForwardContext)
};

// Everything one forward works on. The caller checked the plan (memory::check_plan with the model's n_vocab and
// memory_traits().kpool), reset the workspace, which it sized with forward_workspace_size() for limits that hold
// for this plan (at most n_ubatch tokens, none seeing more than n_seq_cells cells), and bound it on its thread
// (ops::Workspace::Bind: the weight products take their scratch there).
struct ForwardContext {
    const memory::CacheShape & shape;  // cache_shape() of the storage's types
    const memory::Plan & plan;
    memory::Storage & storage;
    ops::ThreadPool * pool;            // null: everything on the calling thread
    ops::Workspace & workspace;        // one arena per pool thread (ops/workspace.h)
    bool dense = false;                // ForwardOptions::dense
    ForwardOutput out;
    // A pipeline stage (src/distributed/) runs the trunk layers [first_layer, end_layer) only (end_layer 0: through
    // the last). A range that does not start at layer 0 takes its input from carry_in instead of the embeddings;
    // one that does not end at n_layers() writes *out.carry (which must be set) and computes no head: the other
    // outputs stay unwritten. Only the storage rows of the range's layers are read or written (layer_caches() says
    // which). Running the ranges of a partition in order, each on its own storage, gives bit for bit
    // the result of one forward over all layers. A range outside the model or without its input throws.
    uint32_t first_layer = 0;
    uint32_t end_layer = 0;
    const LayerCarry * carry_in = nullptr;
    // The decode call's last ubatch (the runtime sets it): where a pipeline's ranks meet, so a ubatch before it
    // that wants no result may be handed on without waiting for the ranks after it.
    bool last_of_call = true;
};

// What a context sizes a forward's workspace for.
struct WorkspaceLimits {
    uint32_t n_ubatch = 0;     // most tokens of one forward
    uint32_t n_seq_cells = 0;  // most cells one token may see (a stream's cells)
    int n_threads = 1;         // pool threads
};

struct ForwardResult {
    std::vector<float> logits;   // n_outputs x n_vocab when options.logits
    std::vector<float> hidden;   // n_tokens x hidden_width() in ubatch order when options.hidden
    std::vector<float> wide_hidden;  // n_tokens x wide_hidden_width() in ubatch order when options.wide_hidden
    LayerCarry carry;                // when options.end_layer < n_layers()
};

// The trunk layers a process loads and runs (a pipeline rank, src/distributed/): [first, end), end 0 meaning
// through the last. Loaded with a span, a model binds only the tensors that span reads (registry.h): its layers',
// the embedding when it starts at layer 0, the head and everything after the trunk when it ends at the last layer,
// and whatever an architecture reads at a given layer (qwen4exp: the PLE table with the PLE layer). Its forward
// runs ranges inside the span only.
struct LayerSpan {
    uint32_t first = 0;
    uint32_t end = 0;
    bool whole() const { return first == 0 && end == 0; }
    uint32_t end_of(uint32_t n_layers) const { return end == 0 ? n_layers : end; }
    bool has(uint32_t il, uint32_t n_layers) const { return il >= first && il < end_of(n_layers); }
    bool starts(uint32_t) const { return first == 0; }
    bool ends(uint32_t n_layers) const { return end_of(n_layers) == n_layers; }
};

// The cache rows one trunk layer owns (a pipeline rank holds the rows of its layers).
struct LayerCaches {
    int attn = -1;     // index among the attention layers (K, V, indexer rows), -1: none
    int recr = -1;     // index among the recurrent layers (conv and delta-state rows), -1: none
    bool row_state = false;  // the per-row state outside any layer (CacheShape::row_floats) is this layer's
};

// The end of fc's layer range (end_layer 0: n_layers) after checking the range against n_layers and its input
// (carry_in with n_tokens x carry_width streams when it starts after layer 0, out.carry when it ends early).
// Throws offgrid::Error naming what is wrong.
uint32_t checked_layer_end(const ForwardContext & fc, uint32_t n_layers, size_t carry_width);
// Throws offgrid::Error when fc's layer range is not inside the span a model was loaded with (the tensors of the
// other layers were not bound).
void check_in_span(const ForwardContext & fc, const LayerSpan & span, uint32_t n_layers);


class Architecture {
public:
    virtual ~Architecture() = default;

    virtual const std::string & name() const = 0;   // the general.architecture string
    virtual uint32_t n_vocab() const = 0;
    virtual uint32_t n_ctx_train() const = 0;
    // Trunk layers (blk.0 .. blk.n_layers()-1), the unit of a pipeline split; and the floats per token of a
    // LayerCarry's streams.
    virtual uint32_t n_layers() const = 0;
    virtual uint32_t carry_width() const = 0;
    virtual LayerCaches layer_caches(uint32_t il) const = 0;   // il < n_layers()
    // Whether a context's memory stores layer il's rows (a pipeline rank holds its own layers only).
    virtual bool holds_layer(uint32_t il) const { return true; }
    // A context that chose its own size (no n_ctx given: from this machine's free memory) asks here before it
    // builds its memory. The processes of a pipeline each choose and then take the smallest choice, so their
    // memories' books stay the same; every process creates its contexts in the same order.
    virtual uint32_t agreed_context_size(uint32_t mine) const { return mine; }
    // Width of the hidden state forward() returns with options.hidden (what an embedding is made of).
    virtual uint32_t hidden_width() const = 0;
    // Width of ForwardResult::wide_hidden; 0 when the model has no MTP draft head to feed.
    virtual uint32_t wide_hidden_width() const { return 0; }
    virtual const gguf::Reader & reader() const = 0;  // the open file (tokenizer metadata, fingerprint)
    // The model's fingerprint (offgrid::Model::fingerprint) when this architecture holds only part of the tensor
    // data and learnt the value from the processes holding the rest (runtime/fingerprint.h); 0: hash reader().
    virtual uint64_t known_fingerprint() const { return 0; }

    // What the memory must store, with K rows in type_k and V rows in type_v (F32 or F16, Q8_0 where the model
    // supports it; throws offgrid::Error naming the reason for any other type). The indexer rows' type is the
    // model's choice from type_k (CacheShape::type_idx).
    virtual memory::CacheShape cache_shape(tensor::ElemType type_k, tensor::ElemType type_v) const = 0;
    virtual MemoryTraits memory_traits() const = 0;

    // Batch rules beyond the memory's own: empty when a token in these sequences may be decoded together with
    // the rest of the batch, else the reason it may not (the caller names the token).
    virtual std::string check_token_seqs(const std::vector<memory::SeqId> & seqs) const { return {}; }

    // Runs one ubatch (see the invariants above and ForwardContext). Takes its scratch from fc.workspace only,
    // so a context whose workspace is sized by workspace_size() runs a decode step without heap allocation.
    virtual void forward(const ForwardContext & fc) const = 0;
    // The scratch forward() takes at most for the given limits.
    virtual ops::WorkspaceSize workspace_size(const WorkspaceLimits & limits) const = 0;

    // After a position shift (the memory's seq_add / seq_div): turns the cached keys of `cell` from old_pos to
    // new_pos in place. A model whose caches hold nothing positional does nothing.
    virtual void rerotate_keys(const memory::CacheShape & shape, memory::Storage & storage, uint32_t cell,
                               memory::Pos old_pos, memory::Pos new_pos) const = 0;

    // One line: the architecture, its main sizes and its sparse-attention settings.
    virtual std::string describe() const = 0;

    // Weight bytes one decoded token reads from the file: every tensor except the gathered embedding tables
    // (`*token_embd.weight`, a few rows a token), each expert stack (`*_exps.*`) counted for the experts a
    // token uses (`ARCH.expert_used_count` of `ARCH.expert_count`). The bus figure of `offgrid bench` divides
    // it by the time per token. A model that reads its weights otherwise overrides it.
    virtual uint64_t weight_bytes_per_token() const;

protected:
    Architecture() = default;
    Architecture(const Architecture &) = default;
    Architecture(Architecture &&) = default;
    Architecture & operator=(const Architecture &) = default;
    Architecture & operator=(Architecture &&) = default;
};

// The workspace a forward of `model` needs: its own declaration (workspace_size) with the weight products' scratch
// held inside it (ops::matmul_workspace over every tensor of the file, for n_ubatch tokens a product and, in one
// group, the rows of every routed expert and one more input per token).
ops::WorkspaceSize forward_workspace_size(const Architecture & model, const WorkspaceLimits & limits);

}  // namespace offgrid::model
