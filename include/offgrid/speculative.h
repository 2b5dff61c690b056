// Speculative decoding over a Context: cheap drafts of the next few tokens (the model's own MTP head, or an
// n-gram lookup in the sequence's tokens), checked by the target model in one decode call per round, the
// rejected tail rolled back through the memory's own operations (seq_rm on the last tokens restores the
// recurrent snapshots; attention and indexer cells and pooled keys follow).
//
// Invariants:
//  1. Output is the target's: each emitted token is drawn by the caller's Sampler from the target's logits of
//     that position, one sample() and one accept() per emitted token in order (sample-and-match), so with the
//     same seed and sampler the tokens are those of one-token decoding (greedy or sampled), given the context's
//     batch invariance (offgrid/context.h invariant 3).
//  2. After step() the target's memory holds exactly the sequence's committed tokens (everything emitted but
//     the last token), as a fresh decode of them would: the rejected drafts are gone.
//  3. The drafter never writes the target's memory.
//
// Thread safety: as the Context it drives (one thread at a time).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "offgrid/context.h"
#include "offgrid/error.h"
#include "offgrid/sampler.h"

namespace offgrid {

namespace runtime { class SpeculativeImpl; }

enum class SpecType { None, DraftMtp, NgramSimple };

// "none", "draft-mtp", "ngram-simple" (llama.cpp's --spec-type names). Throws Error for anything else.
SpecType spec_type_from_name(const std::string & name);
const char * spec_type_name(SpecType type);

struct SpecParams {
    SpecType type = SpecType::None;
    int32_t n_max = 3;        // most draft tokens per round (--spec-draft-n-max), 1..64
    int32_t n_min = 0;        // a shorter draft is dropped (--spec-draft-n-min)
    float p_min = 0.0f;       // draft-mtp: stop at a draft token whose confidence (softmax over the head's 10
                              // largest logits, at the top one) is below p_min (--spec-draft-p-min)
    std::string draft_model;  // draft-mtp: an MTP-only GGUF (-md) that borrows the target's embedding and head;
                              // empty: the target file's own NextN block
    int32_t ngram_max = 4;    // ngram-simple: longest key (tokens ending at the last one) looked up first
    int32_t ngram_min = 2;    // ngram-simple: shortest key tried
};

struct SpecStats {
    uint64_t rounds = 0;    // (sequence, round) pairs
    uint64_t drafted = 0;   // draft tokens verified
    uint64_t accepted = 0;  // draft tokens the target agreed with
    uint64_t emitted = 0;   // tokens emitted (accepted + one per round)
    double acceptance() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
    double tokens_per_round() const { return rounds ? double(emitted) / double(rounds) : 0.0; }
};

class SpeculativeDecoder {
public:
    // Raises what the target context needs for `spec`: n_rs_seq >= n_max (rollback depth), n_ubatch and
    // n_batch >= n_max + 1 (also for type None: Request::draft), mtp_hidden for draft-mtp. Call before creating
    // the Context.
    static void configure(ContextParams & params, const SpecParams & spec);

    // Throws Error when `ctx` lacks what configure() sets, when draft-mtp finds no MTP block (or a draft file
    // that does not fit the target), or for out-of-range parameters. The decoder keeps a reference to ctx.
    SpeculativeDecoder(Context & ctx, const SpecParams & spec);
    ~SpeculativeDecoder();
    SpeculativeDecoder(const SpeculativeDecoder &) = delete;
    SpeculativeDecoder & operator=(const SpeculativeDecoder &) = delete;

    // Decodes `tokens` into `seq` after its last position (a prompt, or a chunk of one) in one decode call, the
    // last token with logits (row ctx.n_outputs() - 1), and keeps the drafter in step. Use it instead of
    // ctx.decode for sequences the decoder drives.
    DecodeResult prefill(int32_t seq, const std::vector<int32_t> & tokens);
    // After a ctx.decode the caller made itself (prefill chunks and single tokens of several sequences, as a
    // server's mixed batch), keeps the drafter of every sequence in `batch` in step. A token's sequence is its
    // first one; each sequence's tokens must continue its positions in order.
    void observe(const std::vector<BatchToken> & batch);
    // Starts `seq` over with `history` as the tokens its memory already holds (after a state load, or with {}
    // after the sequence was removed).
    void reset(int32_t seq, const std::vector<int32_t> & history = {});

    struct Request {
        int32_t seq = 0;
        int32_t last = 0;           // the sequence's last token: sampled and accepted, not decoded yet
        Sampler * sampler = nullptr;
        int32_t max_tokens = 1;     // most tokens to emit this round (>= 1)
        // Optional: the caller's own draft (any drafter), verified instead of the decoder's; cut to n_max and
        // to the room left, like the decoder's drafts.
        std::vector<int32_t> draft;
        std::vector<int32_t> out;   // filled: the emitted tokens, 1 .. draft + 1 of them; out.back() is the new last
    };
    // One round for every request in one decode call: draft, verify [last, drafts...] per sequence, sample and
    // match, roll back the rejected drafts. On a decode failure nothing is emitted and the memory is unchanged.
    DecodeResult step(std::vector<Request> & requests);

    const SpecStats & stats() const;
    void reset_stats();

private:
    std::unique_ptr<runtime::SpeculativeImpl> impl_;
};

}  // namespace offgrid
