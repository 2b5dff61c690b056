// A draft head for speculative decoding (`draft-mtp`): predicts the token after a position from the target
// model's wide hidden state there (an MTP / NextN block). An architecture that has one registers its maker in
// registry.cpp; the runtime drives it through this interface alone.
//
// Thread safety: a DraftHead is immutable after construction (const methods only); each sequence has its own
// Cache, used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace offgrid::model {

class Architecture;

class DraftHead {
public:
    // The head's own rows of one sequence (its keys and values), positions first()..end()-1.
    class Cache {
    public:
        virtual ~Cache() = default;
        virtual bool empty() const = 0;
        virtual int32_t end() const = 0;            // one past the last position held
        virtual void truncate(int32_t pos) = 0;     // drops the rows at positions >= pos
    };

    virtual ~DraftHead() = default;
    virtual uint32_t wide_width() const = 0;        // floats of the hidden state it reads (Context::mtp_hidden)
    virtual uint32_t n_vocab() const = 0;
    virtual std::unique_ptr<Cache> new_cache() const = 0;
    // Rows with no output: tokens[i] at pos[i] with hidden h + i * wide_width() only extend `cache`.
    virtual void catch_up(Cache & cache, const int32_t * tokens, const int32_t * pos, const float * h,
                          size_t n) const = 0;
    // One full row: extends `cache` at `pos`, writes n_vocab() logits and the row's own hidden h_out
    // (wide_width() floats, the input of the next draft step).
    virtual void step(Cache & cache, int32_t token, int32_t pos, const float * h, float * logits,
                      float * h_out) const = 0;
};

// The draft head of `target`: its own MTP block when `draft_file` is empty, else the block of that file (an
// MTP-only GGUF that borrows the target's tables). Throws offgrid::Error when the architecture has no draft head,
// the model has no block, or the file does not fit the target.
std::unique_ptr<DraftHead> make_draft_head(const Architecture & target, const std::string & draft_file);

}  // namespace offgrid::model
