// The scheduler: one thread owns the Context (n_seq_max = slots, one memory stream per slot) and runs steps. Each
// step admits waiting requests into free slots (restoring the longest cached prefix), builds one batch from every
// generating request's next token plus prefill chunks of the others under a token budget (chunked prefill: a long
// prompt never stalls the rest), decodes it, samples per request and streams the text to each request's Channel.
// Finished or cancelled requests free their sequence at once.
//
// Invariants: a slot's sequence holds exactly the tokens counted in its n_past (prompt, then generated tokens but
// the last sampled one); a request's output depends only on its own tokens and sampling parameters, never on the
// other requests in a batch or on whether its prefix came from the cache (the kernels are batch-invariant, and a
// restored snapshot equals the cold prefill's memory).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "offgrid/context.h"
#include "offgrid/sampler.h"
#include "offgrid/speculative.h"
#include "offgrid/tokenizer.h"
#include "server/json_constraint.h"
#include "server/prefix_cache.h"

namespace offgrid::server {

struct TokenLogprob {
    int32_t id = 0;
    float logprob = 0;
    std::vector<std::pair<int32_t, float>> top;  // most likely tokens, best first
};

// One sequence to generate (one choice of a response).
struct GenRequest {
    std::vector<int32_t> prompt;  // not empty
    int32_t max_tokens = 16;      // >= 1
    SamplingParams sampling;
    std::vector<std::string> stop;
    bool ignore_eos = false;
    int32_t top_logprobs = -1;    // -1: no logprobs; else the sampled token's plus this many alternatives
    int32_t index = 0;            // choice index in the response
    bool speculative = true;      // with a speculative server: draft and verify this choice (off: one token a step)
    std::vector<size_t> message_ends;  // chat: where each message ends in the prompt (ascending), worth a snapshot
    size_t shared_opening = 0;         // chat: past the first end, where the next message's content begins (0: none)
    // The reply held to JSON (server/json_constraint.h): its schema, the text it already holds, the literal due
    // after the value; the reply ends when both are written.
    struct JsonReply {
        bool on = false;
        std::shared_ptr<const JsonSchema> schema;  // null: any object
        std::string prefix;
        std::string suffix;
    } json;
};

struct ChoiceEvent {
    int32_t index = 0;
    std::string text;                    // new text (may be empty: held back for a stop string or UTF-8)
    std::vector<TokenLogprob> logprobs;  // the tokens behind this event
    bool done = false;
    std::string finish_reason;           // "stop" or "length" when done
    std::string error;                   // not empty: the choice failed (done is true)
    int32_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;  // when done
};

// Events of one HTTP request's choices, from the scheduler thread to the HTTP thread. cancel() (client gone)
// makes the scheduler drop the request's choices at its next step.
class Channel {
public:
    void push(ChoiceEvent e);
    bool pop(ChoiceEvent & out, std::chrono::milliseconds timeout);  // false on timeout
    void cancel() { cancelled_ = true; }
    bool cancelled() const { return cancelled_; }

private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<ChoiceEvent> events_;
    std::atomic<bool> cancelled_{false};
};

struct SchedulerConfig {
    uint32_t n_slots = 4;
    uint32_t n_ctx = 0;           // total cells (0: slots x the model's context length, capped at 4096 per slot)
    uint32_t n_batch = 512;       // token budget of one step
    uint32_t n_ubatch = 512;
    int n_threads = 1;
    size_t cache_bytes = 256u << 20;  // prefix cache budget (0: off)
    uint32_t max_queue = 64;      // waiting requests beyond the slots
    uint32_t min_snapshot = 32;   // no chunk-boundary snapshot below this many tokens, nor this close to the last
    bool log = true;              // one line per request to stderr
    std::string cache_dir;        // not empty: the prefix cache is loaded from here at start and saved at shutdown
    SpecParams spec;              // speculative decoding of generating slots (type None: off)
    bool tails = true;            // snapshots as tails of the one below (false: whole states, for comparisons)
    // A snapshot that a later one on the same path supersedes (no other path parts below it, not pinned) is dropped
    // when the later one is stored (false: every snapshot stays until evicted, for comparisons).
    bool supersede = true;
};

// Counters for /metrics; written by the scheduler thread, read by anyone.
struct SchedulerStats {
    std::atomic<uint64_t> requests{0}, requests_failed{0}, requests_cancelled{0};
    std::atomic<uint64_t> prompt_tokens{0}, prompt_tokens_decoded{0}, generated_tokens{0};
    std::atomic<uint64_t> cache_lookups{0}, cache_hits{0}, cache_tokens_saved{0};
    std::atomic<uint64_t> cache_bytes{0}, cache_entries{0};
    std::atomic<uint64_t> cache_row_bytes{0}, cache_logits_bytes{0};  // parts of cache_bytes: K/V/indexer rows, logits
    std::atomic<uint64_t> queue_length{0}, slots_busy{0};
    std::atomic<uint64_t> steps{0}, step_us{0}, prefill_step_us{0};
    std::atomic<uint64_t> spec_rounds{0}, spec_drafted{0}, spec_accepted{0};  // speculative rounds and draft tokens
    std::atomic<uint64_t> busy_us{0};  // the scheduler thread's time in admit() and step() (decode, sampling, snapshots)
};

enum class SubmitStatus { Ok, QueueFull, ShuttingDown };

class Scheduler {
public:
    Scheduler(std::shared_ptr<const Model> model, Tokenizer tok, const SchedulerConfig & cfg);
    ~Scheduler();

    // Queues a request's choices, all or none.
    SubmitStatus submit(std::vector<GenRequest> reqs, std::shared_ptr<Channel> ch, const std::string & id);
    // Refuse new requests from now on (ShuttingDown).
    void stop_accepting();
    // Waits up to `grace` for the running and waiting requests, cancels what is left, stops the thread.
    void shutdown(std::chrono::milliseconds grace);

    uint32_t seq_capacity() const { return capacity_; }
    uint32_t n_slots() const { return cfg_.n_slots; }
    const SchedulerStats & stats() const { return stats_; }
    const Tokenizer & tokenizer() const { return tok_; }
    const ContextParams & context_params() const { return ctx_.params(); }
    const std::shared_ptr<const Model> & model() const { return model_; }
    size_t row_bytes_per_token() const { return cell_row_bytes_; }  // K, V and indexer bytes of one cell

private:
    struct Job;
    struct Slot;

    void run();
    void load_cache_files();
    void admit();
    bool defer(const Job & job);
    static constexpr size_t kMinShared = 64;  // a running prefill this many tokens ahead of the cache is waited for
    void start_job(Slot & s, std::unique_ptr<Job> job);
    bool step();
    void sample(Slot & s, const float * logits);
    // Draws the slot's next token from its logits (held to its JSON constraint, if any) and accepts it.
    int32_t draw(Slot & s, const float * logits);
    // Streams one sampled (and accepted) token; logits (for logprobs) may be null. Returns why the request ends
    // with it ("stop", "length"), or empty; the caller then calls finish().
    std::string emit(Slot & s, int32_t t, const float * logits);
    // One speculative round for the slots that take part (a decode call of their own).
    void speculate(const std::vector<Slot *> & slots);
    void finish(Slot & s, const std::string & reason, const std::string & error = {});
    // Stores the slot's first n_tokens as a snapshot (with the last position's logits, if given); pinned: never
    // superseded; turn_end: the whole exchange at a turn's end (Snapshot::turn_end). Snapshots below it on its path
    // that it supersedes are dropped.
    void snapshot(Slot & s, size_t n_tokens, const float * logits, bool pinned = false, bool turn_end = false);
    void restore(int32_t seq, const Snapshot & snap);
    bool chunk_snapshot_due(const Slot & s) const;
    void update_cache_stats();

    std::shared_ptr<const Model> model_;
    Tokenizer tok_;
    SchedulerConfig cfg_;
    Context ctx_;
    std::unique_ptr<SpeculativeDecoder> spec_;  // null: no speculation
    uint32_t capacity_ = 0;
    int32_t n_vocab_ = 0;
    std::shared_ptr<const TokenTexts> token_texts_;  // built at the first request with a JSON reply
    size_t cell_row_bytes_ = 0;  // K, V and indexer bytes of one cell
    size_t snapshot_fixed_bytes_ = 0;  // a snapshot's bytes besides rows (recurrent state, books), once one was taken
    PrefixCache cache_;
    bool cache_files_loaded_ = false;  // --slot-save-path was read: the cache is saved there at shutdown
    SchedulerStats stats_;

    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::unique_ptr<Job>> waiting_;
    bool accepting_ = true;
    bool stopping_ = false;
    std::vector<Slot> slots_;
    std::thread thread_;
};

}  // namespace offgrid::server
