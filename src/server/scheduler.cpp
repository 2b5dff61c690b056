#include "server/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>

#include "offgrid/error.h"
#include "server/cache_files.h"
#include "server/stop_text.h"

namespace offgrid::server {

using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

ContextParams make_context_params(const Model & model, const SchedulerConfig & cfg) {
    ContextParams cp;
    const uint32_t per_slot = std::min<uint32_t>(model.n_ctx_train(), 4096);
    cp.n_ctx = cfg.n_ctx != 0 ? cfg.n_ctx : per_slot * cfg.n_slots;
    cp.n_seq_max = cfg.n_slots;
    cp.unified = false;  // one stream per slot: a long request can never take another's cells
    cp.n_batch = cfg.n_batch;
    cp.n_ubatch = cfg.n_ubatch;
    cp.n_threads = cfg.n_threads;
    if (cfg.spec.type != SpecType::None) SpeculativeDecoder::configure(cp, cfg.spec);
    return cp;
}

// log-softmax of the raw logits: the sampled token's log-probability and the `top` best alternatives.
TokenLogprob logprobs_of(const float * logits, int32_t n_vocab, int32_t chosen, int32_t top) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
    const float lse = mx + static_cast<float>(std::log(sum));
    TokenLogprob out;
    out.id = chosen;
    out.logprob = logits[chosen] - lse;
    if (top > 0) {
        std::vector<int32_t> ids(static_cast<size_t>(n_vocab));
        std::iota(ids.begin(), ids.end(), 0);
        const size_t k = std::min<size_t>(static_cast<size_t>(top), ids.size());
        std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                          [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
        for (size_t i = 0; i < k; ++i) out.top.emplace_back(ids[i], logits[ids[i]] - lse);
    }
    return out;
}

}  // namespace

// ---------------------------------------------------------------- Channel

void Channel::push(ChoiceEvent e) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        events_.push_back(std::move(e));
    }
    cv_.notify_all();
}

bool Channel::pop(ChoiceEvent & out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
    out = std::move(events_.front());
    events_.pop_front();
    return true;
}

// ---------------------------------------------------------------- Scheduler

struct Scheduler::Job {
    GenRequest req;
    std::shared_ptr<Channel> ch;
    std::string id;
    Clock::time_point t_arrival, t_start, t_first;
};

struct Scheduler::Slot {
    int32_t seq = 0;
    std::unique_ptr<Job> job;   // null: free
    size_t n_past = 0;          // tokens in the sequence
    size_t n_cached = 0;        // prompt tokens restored from the cache
    std::set<size_t> cuts;      // positions where a prefill chunk ends and a snapshot is taken (where prompts part)
    std::set<size_t> pins;      // cuts whose snapshots are pinned (the first message's end, a waiting request's part)
    bool prefilling = false;
    bool logits_ready = false;  // the cache gave the prompt's last logits: sample without a decode
    int32_t pending = -1;       // sampled, not yet decoded
    std::vector<int32_t> generated;
    std::unique_ptr<Sampler> sampler;
    std::unique_ptr<JsonConstraint> json;  // the reply held to JSON (GenRequest::json)
    std::vector<float> masked;             // the logits row with the constraint's -inf
    std::unique_ptr<StopText> stop;
    std::vector<float> cached_logits;
    // The cached snapshot the sequence's first base_len tokens are (restored or taken last): the next snapshot
    // is the tail since it, so the rows below are stored once.
    std::shared_ptr<const Snapshot> base;
    size_t base_len = 0;
    // The snapshot of this request's prompt end: the turn's end does not supersede it, since the next turn's prompt
    // may part from the reply (a reply re-tokenised otherwise, an end-of-turn token the text does not carry).
    std::shared_ptr<const Snapshot> prompt_snap;
    // The last chunk-boundary snapshot of this request's prefill: the prompt's end does not supersede it, so a
    // later prompt that shares all but the end of this one (a raw completion with another question, an edited
    // last message) restores it instead of prefilling from the last place two prompts parted.
    std::shared_ptr<const Snapshot> chunk_snap;

    // The nearest snapshot below the sequence's end that is still cached (the base, or the nearest link of its
    // chain that is), and the tokens it covers; null and 0 when none.
    std::shared_ptr<const Snapshot> cached_base(size_t & len) const {
        std::shared_ptr<const Snapshot> b = base;
        len = base_len;
        while (b && !b->cached) {
            len = b->from;
            b = b->parent;
        }
        if (!b) len = 0;
        return b;
    }
};

Scheduler::Scheduler(std::shared_ptr<const Model> model, Tokenizer tok, const SchedulerConfig & cfg)
    : model_(std::move(model)),
      tok_(std::move(tok)),
      cfg_(cfg),
      ctx_(model_, make_context_params(*model_, cfg)),
      capacity_(ctx_.seq_capacity()),
      n_vocab_(model_->n_vocab()),
      cache_(cfg.cache_bytes) {
    // Bytes of one cell's K, V and indexer rows: the attention and indexer caches over all their cells.
    {
        const MemoryBreakdown mb = ctx_.memory_breakdown();
        const uint64_t cells = uint64_t(capacity_) * cfg_.n_slots;
        cell_row_bytes_ = cells ? static_cast<size_t>((mb.attention_bytes + mb.indexer_bytes) / cells) : 0;
    }
    slots_.resize(cfg_.n_slots);
    for (uint32_t i = 0; i < cfg_.n_slots; ++i) slots_[i].seq = static_cast<int32_t>(i);
    if (cfg_.spec.type != SpecType::None) spec_ = std::make_unique<SpeculativeDecoder>(ctx_, cfg_.spec);
    thread_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() { shutdown(std::chrono::milliseconds(0)); }

// The files of --slot-save-path, loaded on the scheduler thread before its first step: the server listens at
// once whatever the folder holds and however long the model's fingerprint takes to hash; requests that arrive
// meanwhile wait in the queue and then see the loaded cache.
void Scheduler::load_cache_files() {
    if (cfg_.cache_dir.empty() || !cache_.enabled()) return;
    try {
        // Each snapshot is restored once here, into slot 0, so one of another slot layout or cache type (or one
        // the memory refuses for any reason) is dropped now rather than found at every request.
        const size_t capacity = capacity_;
        auto check = [this, capacity](const std::vector<int32_t> & tokens, Snapshot & snap) -> std::string {
            if (tokens.size() > capacity) return "longer than a slot";
            snap.row_bytes = (tokens.size() - snap.from) * cell_row_bytes_;
            try {
                restore(0, snap);
                ctx_.seq_rm(0, -1, -1);
                return {};
            } catch (const std::exception & e) {
                ctx_.seq_rm(0, -1, -1);
                return std::string("cannot be restored: ") + e.what();
            }
        };
        const size_t n =
            load_prefix_cache(cache_, cfg_.cache_dir, model_->fingerprint(), static_cast<size_t>(n_vocab_), check);
        update_cache_stats();
        if (cfg_.log) std::fprintf(stderr, "serve: prefix cache: %zu snapshots loaded from %s\n", n, cfg_.cache_dir.c_str());
        cache_files_loaded_ = true;
    } catch (const std::exception & e) {
        // Not saved at shutdown either: a save would replace files this server never read.
        std::fprintf(stderr, "serve: prefix cache: not loaded (%s); it will not be saved\n", e.what());
    }
}

SubmitStatus Scheduler::submit(std::vector<GenRequest> reqs, std::shared_ptr<Channel> ch, const std::string & id) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (!accepting_) return SubmitStatus::ShuttingDown;
        size_t free_slots = 0;
        for (const auto & s : slots_) free_slots += s.job ? 0 : 1;
        // Queue room counts beyond the free slots, so an idle server takes n choices even with a small queue.
        if (waiting_.size() + reqs.size() > cfg_.max_queue + free_slots) return SubmitStatus::QueueFull;
        const auto now = Clock::now();
        for (auto & r : reqs) {
            auto job = std::make_unique<Job>();
            job->req = std::move(r);
            job->ch = ch;
            job->id = id;
            job->t_arrival = now;
            waiting_.push_back(std::move(job));
        }
        stats_.queue_length = waiting_.size();
        stats_.requests += reqs.size();
    }
    cv_.notify_all();
    return SubmitStatus::Ok;
}

void Scheduler::stop_accepting() {
    std::lock_guard<std::mutex> lock(mu_);
    accepting_ = false;
}

void Scheduler::shutdown(std::chrono::milliseconds grace) {
    stop_accepting();
    const auto deadline = Clock::now() + grace;
    while (Clock::now() < deadline) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (waiting_.empty() && stats_.slots_busy == 0) break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void Scheduler::run() {
    load_cache_files();
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mu_);
            cv_.wait_for(lock, std::chrono::milliseconds(50), [&] {
                if (stopping_ || !waiting_.empty()) return true;
                for (const auto & s : slots_) {
                    if (s.job) return true;
                }
                return false;
            });
            if (stopping_) break;
        }
        try {
            const auto t0 = Clock::now();
            admit();
            const bool stepped = step();
            if (stepped) {
                stats_.busy_us +=
                    static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
            }
        } catch (const std::exception & e) {
            // Nothing may take the server down: the requests in flight fail, their slots are freed.
            std::fprintf(stderr, "serve: scheduler error: %s\n", e.what());
            for (auto & s : slots_) {
                if (s.job) finish(s, "", std::string("internal error: ") + e.what());
            }
        }
    }
    // Stopping: everything left is cancelled with an error event.
    std::deque<std::unique_ptr<Job>> left;
    {
        std::lock_guard<std::mutex> lock(mu_);
        left.swap(waiting_);
        stats_.queue_length = 0;
    }
    for (auto & j : left) {
        ChoiceEvent e;
        e.index = j->req.index;
        e.done = true;
        e.error = "the server is shutting down";
        j->ch->push(std::move(e));
    }
    for (auto & s : slots_) {
        if (s.job) finish(s, "", "the server is shutting down");
    }
    if (cache_files_loaded_) {
        const size_t n = save_prefix_cache(cache_, cfg_.cache_dir, model_->fingerprint());
        if (cfg_.log) std::fprintf(stderr, "serve: prefix cache: %zu snapshots saved to %s\n", n, cfg_.cache_dir.c_str());
    }
}

// Whether a waiting job should wait for a running prefill that will soon hold a longer prefix of its prompt than
// the cache does: then it restores that prefix instead of computing it a second time alongside. The leader is
// told to end a chunk and take a snapshot where the two prompts part.
bool Scheduler::defer(const Job & job) {
    if (!cache_.enabled()) return false;
    const auto & prompt = job.req.prompt;
    size_t best = 0;
    Slot * leader = nullptr;
    for (auto & s : slots_) {
        if (!s.job || !s.prefilling) continue;
        const auto & other = s.job->req.prompt;
        const size_t n = std::min(prompt.size(), other.size());
        size_t k = 0;
        while (k < n && prompt[k] == other[k]) ++k;
        if (k == prompt.size() && k == other.size()) k = prompt.size();  // the same prompt: wait for its end
        else k = std::min(k, prompt.size() - 1);
        if (k > s.n_past && k > best) {
            best = k;
            leader = &s;
        }
    }
    if (!leader) return false;
    const size_t have = cache_.peek(prompt, prompt.size());
    if (best < have + kMinShared) return false;
    if (best < leader->job->req.prompt.size()) {
        leader->cuts.insert(best);
        leader->pins.insert(best);
    }
    return true;
}

void Scheduler::admit() {
    for (auto & s : slots_) {
        if (s.job) continue;
        std::unique_ptr<Job> job;
        {
            std::lock_guard<std::mutex> lock(mu_);
            for (auto it = waiting_.begin(); it != waiting_.end() && !job;) {
                if ((*it)->ch->cancelled()) {
                    ++stats_.requests_cancelled;
                    it = waiting_.erase(it);
                    continue;
                }
                if (defer(**it)) {
                    ++it;
                    continue;
                }
                job = std::move(*it);
                waiting_.erase(it);
            }
            stats_.queue_length = waiting_.size();
        }
        if (!job) return;
        start_job(s, std::move(job));
    }
}

void Scheduler::start_job(Slot & s, std::unique_ptr<Job> job) {
    s.job = std::move(job);
    Job & j = *s.job;
    j.t_start = Clock::now();
    const auto & prompt = j.req.prompt;
    s.n_past = 0;
    s.n_cached = 0;
    s.cuts.clear();
    s.pending = -1;
    s.generated.clear();
    s.cached_logits.clear();
    s.logits_ready = false;
    s.prefilling = true;
    s.base.reset();
    s.base_len = 0;
    s.prompt_snap.reset();
    s.chunk_snap.reset();
    s.pins.clear();
    s.sampler = std::make_unique<Sampler>(j.req.sampling);
    for (const int32_t t : prompt) s.sampler->accept(t);
    s.json.reset();
    if (j.req.json.on) {
        if (!token_texts_) token_texts_ = std::make_shared<const TokenTexts>(tok_);
        s.json = std::make_unique<JsonConstraint>(token_texts_, j.req.json.schema, true, j.req.json.prefix, j.req.json.suffix);
    }
    s.stop = std::make_unique<StopText>(j.req.stop);
    ++stats_.slots_busy;
    stats_.prompt_tokens += prompt.size();

    ctx_.seq_rm(s.seq, -1, -1);
    if (spec_) spec_->reset(s.seq);
    if (cache_.enabled()) {
        ++stats_.cache_lookups;
        const PrefixCache::Hit hit = cache_.lookup(prompt, prompt.size());
        if (hit.length > 0) {
            try {
                restore(s.seq, *hit.snap);
                s.base = hit.snap;
                s.base_len = hit.length;
                if (spec_) spec_->reset(s.seq, std::vector<int32_t>(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(hit.length)));
                s.n_past = hit.length;
                s.n_cached = hit.length;
                if (hit.length == prompt.size()) {
                    s.prompt_snap = hit.snap;
                    s.cached_logits = hit.snap->logits;
                    s.logits_ready = true;
                    s.prefilling = false;
                }
                ++stats_.cache_hits;
                stats_.cache_tokens_saved += hit.length;
            } catch (const std::exception & e) {
                std::fprintf(stderr, "serve: prefix cache restore failed (%s); prefilling from scratch\n", e.what());
                ctx_.seq_rm(s.seq, -1, -1);
                if (spec_) spec_->reset(s.seq);
                s.n_past = 0;
                // A snapshot that failed once fails every time: drop it, so this prompt is cached afresh.
                cache_.erase(std::span<const int32_t>(prompt.data(), hit.length));
                update_cache_stats();
            }
        }
        // A turn end this prompt passes by (its conversation's reply not given back token for token) will not be
        // restored: dropped, so the place where the prompt parts is not kept as a branch point for it.
        if (cfg_.supersede && cache_.drop_passed_turn_ends(prompt) > 0) update_cache_stats();
        const size_t m = cache_.match_length(prompt);
        if (m > s.n_past && m < prompt.size()) s.cuts.insert(m);
        // Message ends: another chat with the same first messages (a system prompt), or this conversation's next
        // turn, restores exactly there. Each cut ends a chunk (one more step), so ends closer than min_snapshot
        // to the previous cut or to the prompt's end (which has its own snapshot) are left out.
        // The first message's end (a system prompt) is where other chats part: pinned, and taken past the next
        // message's opening marker and role line when the prompt has them (shared_opening), so that a chat whose
        // next message differs from its first token on restores every token it shares. The prompt's own end
        // does not serve those chats, so the opening is cut however close to it.
        size_t last = s.n_past;
        const auto after_last = [&](size_t e) { return e > last && e - last >= cfg_.min_snapshot; };
        const std::vector<size_t> & ends = j.req.message_ends;
        for (size_t k = 0; k < ends.size(); ++k) {
            size_t e = ends[k];
            const size_t opening = j.req.shared_opening;
            if (k == 0 && opening > e && opening < prompt.size() && after_last(opening)) {
                e = opening;
            } else if (!after_last(e) || e + cfg_.min_snapshot > prompt.size()) {
                continue;
            }
            s.cuts.insert(e);
            if (k == 0) s.pins.insert(e);
            last = e;
        }
    }
}

void Scheduler::snapshot(Slot & s, size_t n_tokens, const float * logits, bool pinned, bool turn_end) {
    if (!cache_.enabled() || n_tokens == 0) return;
    const Job & j = *s.job;
    std::vector<int32_t> path;
    path.reserve(n_tokens);
    const size_t from_prompt = std::min(n_tokens, j.req.prompt.size());
    path.assign(j.req.prompt.begin(), j.req.prompt.begin() + static_cast<std::ptrdiff_t>(from_prompt));
    for (size_t i = from_prompt; i < n_tokens; ++i) path.push_back(s.generated[i - from_prompt]);
    const auto prefix = [&](size_t n) { return std::span<const int32_t>(path.data(), n); };
    if (auto there = cache_.find(path); there && (!logits || !there->logits.empty())) {
        if (pinned) there->pinned = true;
        s.base = std::move(there);  // the same state (restores are exact): later tails build on it
        s.base_len = n_tokens;
        return;
    }
    // The snapshots below this one on its path that it supersedes: walking down from the sequence's end, each
    // that is not pinned, not this request's prompt end (nor, for the prompt end, its prefill's last chunk
    // boundary), has no tails but the one just passed, and has no other path parting below it. The new snapshot
    // is then the tail since the first one kept.
    size_t below_len = 0;
    std::shared_ptr<const Snapshot> below = s.cached_base(below_len);
    while (below && below_len >= n_tokens) {  // (the same path without logits: replaced)
        below_len = below->from;
        below = below->parent;
    }
    std::vector<size_t> superseded;  // their lengths, deepest first
    const bool prompt_end = logits != nullptr;
    while (cfg_.supersede && below && !below->pinned && below != s.prompt_snap &&
           !(prompt_end && below == s.chunk_snap) &&
           below->dependents == (superseded.empty() ? 0u : 1u) && cache_.lone_path(prefix(below_len), path)) {
        superseded.push_back(below_len);
        below_len = below->from;
        below = below->parent;  // cached while its tail is
    }
    Snapshot snap;
    if (cfg_.tails && below && below_len > 0) {
        snap.from = below_len;
        snap.parent = below;
        snap.state = ctx_.state_get_tail(s.seq, static_cast<int32_t>(below_len));
    } else {
        snap.state = ctx_.state_get(s.seq);
    }
    snap.pinned = pinned;
    snap.turn_end = turn_end;
    snap.row_bytes = (n_tokens - snap.from) * cell_row_bytes_;
    // What a snapshot adds besides rows, as measured (the smallest seen: books grow a little with the cells).
    if (snap.state.size() > snap.row_bytes) {
        const size_t fixed = snap.state.size() - snap.row_bytes;
        snapshot_fixed_bytes_ = snapshot_fixed_bytes_ == 0 ? fixed : std::min(snapshot_fixed_bytes_, fixed);
    }
    if (logits) snap.logits.assign(logits, logits + n_vocab_);
    if (auto kept = cache_.insert(path, std::move(snap))) {
        s.base = std::move(kept);
        s.base_len = n_tokens;
        for (const size_t n : superseded) cache_.erase(prefix(n));
    }
    update_cache_stats();
}

// A chunk boundary (not a place where prompts part or a message ends) is worth a snapshot once the rows since the
// slot's last snapshot weigh at least what a snapshot adds besides rows (its recurrent state, conv histories and
// books): so such snapshots never take more RAM than the rows they cover, whatever the model's recurrent state
// weighs against its rows per token.
bool Scheduler::chunk_snapshot_due(const Slot & s) const {
    if (s.n_past < cfg_.min_snapshot) return false;
    size_t below = 0;
    s.cached_base(below);
    const size_t since = s.n_past - std::min(below, s.n_past);
    return since >= cfg_.min_snapshot && since * cell_row_bytes_ >= snapshot_fixed_bytes_;
}

void Scheduler::update_cache_stats() {
    stats_.cache_bytes = cache_.bytes();
    stats_.cache_row_bytes = cache_.row_bytes();
    stats_.cache_logits_bytes = cache_.logits_bytes();
    stats_.cache_entries = cache_.entries();
}

// A snapshot's chain, whole state first, into an empty sequence. Throws as Context::state_set does (the sequence
// is then dropped).
void Scheduler::restore(int32_t seq, const Snapshot & snap) {
    ctx_.seq_rm(seq, -1, -1);
    for (const Snapshot * part : snap.chain()) {
        if (part->from == 0) ctx_.state_set(part->state, seq);
        else ctx_.state_append(part->state, seq);
    }
}

bool Scheduler::step() {
    // Cancelled requests (client gone) free their slot first.
    for (auto & s : slots_) {
        if (s.job && s.job->ch->cancelled()) {
            ++stats_.requests_cancelled;
            finish(s, "", "cancelled");
        }
    }
    // Prompts served wholly by the cache sample straight from the stored logits.
    for (auto & s : slots_) {
        if (s.job && s.logits_ready) {
            s.logits_ready = false;
            const std::vector<float> logits = std::move(s.cached_logits);
            sample(s, logits.data());
        }
    }

    std::vector<BatchToken> batch;
    struct Part {
        Slot * slot;
        size_t n;         // tokens of this slot in the batch
        bool output;
    };
    std::vector<Part> parts;
    size_t budget = ctx_.params().n_batch;
    std::vector<Slot *> speculating;  // generating slots that draft: a verify call of their own after this batch
    for (auto & s : slots_) {
        if (!s.job || s.prefilling || s.pending < 0) continue;
        if (spec_ && s.job->req.speculative && s.job->req.top_logprobs < 0 && !s.job->req.json.on) {
            speculating.push_back(&s);
            continue;
        }
        if (budget == 0) continue;
        batch.push_back(BatchToken{s.pending, static_cast<int32_t>(s.n_past), {s.seq}, true});
        parts.push_back({&s, 1, true});
        --budget;
    }
    bool has_prefill = false;
    for (auto & s : slots_) {
        if (!s.job || !s.prefilling || budget == 0) continue;
        const auto & prompt = s.job->req.prompt;
        size_t n = std::min(prompt.size() - s.n_past, budget);
        const auto cut = s.cuts.upper_bound(s.n_past);
        if (cut != s.cuts.end() && *cut < s.n_past + n) n = *cut - s.n_past;  // end the chunk there
        const bool last = s.n_past + n == prompt.size();
        for (size_t i = 0; i < n; ++i) {
            const size_t p = s.n_past + i;
            batch.push_back(BatchToken{prompt[p], static_cast<int32_t>(p), {s.seq}, last && i + 1 == n});
        }
        parts.push_back({&s, n, last});
        budget -= n;
        has_prefill = true;
    }
    if (batch.empty()) {
        if (speculating.empty()) return false;
        speculate(speculating);
        return true;
    }

    const auto t0 = Clock::now();
    const DecodeResult r = ctx_.decode(batch);
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
    ++stats_.steps;
    stats_.step_us += static_cast<uint64_t>(us);
    if (has_prefill) stats_.prefill_step_us += static_cast<uint64_t>(us);
    if (!r.ok()) {
        std::fprintf(stderr, "serve: decode failed: %s\n", r.message.c_str());
        for (auto & p : parts) finish(*p.slot, "", "decode failed: " + r.message);
        return true;
    }
    if (spec_) spec_->observe(batch);  // the drafter follows every sequence, prefills included
    // 1. Every slot's next token, in one pass right after the logits (each sampler reads its own row only).
    struct Drawn {
        Slot * slot;
        int32_t token;
        const float * logits;
        bool prompt_end;
        std::string ending;  // not empty: the request ends with this token
    };
    std::vector<Drawn> drawn;
    std::vector<Slot *> chunk_ends;
    int32_t row = 0;
    for (auto & p : parts) {
        Slot & s = *p.slot;
        s.n_past += p.n;
        const bool prompt_end = s.prefilling && p.output;
        if (s.prefilling) {
            stats_.prompt_tokens_decoded += p.n;
            if (!p.output) {
                chunk_ends.push_back(&s);
                continue;
            }
            s.prefilling = false;
        } else {
            s.pending = -1;
        }
        const float * logits = ctx_.logits(row++);
        const int32_t t = draw(s, logits);
        drawn.push_back({&s, t, logits, prompt_end, {}});
    }
    // 2. Out to the channels (queues the HTTP threads drain: a slow client never holds a step), before the
    // snapshots' state copies.
    for (auto & d : drawn) d.ending = emit(*d.slot, d.token, d.logits);
    // 3. Snapshots: chunk boundaries, prompt ends (with their logits), then the requests that ended (their turn's
    // end) free their sequences.
    for (Slot * s : chunk_ends) {
        // A chunk boundary: later prompts sharing this prefix restore it.
        if (s->cuts.count(s->n_past) || chunk_snapshot_due(*s)) {
            snapshot(*s, s->n_past, nullptr, s->pins.count(s->n_past) > 0);
            if (s->base_len == s->n_past) s->chunk_snap = s->base;
        }
    }
    for (auto & d : drawn) {
        if (!d.prompt_end) continue;
        Slot & s = *d.slot;
        snapshot(s, s.n_past, d.logits, s.pins.count(s.n_past) > 0);
        if (s.base_len == s.n_past) s.prompt_snap = s.base;
    }
    for (auto & d : drawn) {
        if (!d.ending.empty()) finish(*d.slot, d.ending);
    }
    if (!speculating.empty()) speculate(speculating);
    return true;
}

void Scheduler::speculate(const std::vector<Slot *> & slots) {
    std::vector<SpeculativeDecoder::Request> reqs;
    for (Slot * s : slots) {
        if (!s->job || s->pending < 0) continue;  // finished meanwhile
        SpeculativeDecoder::Request q;
        q.seq = s->seq;
        q.last = s->pending;
        q.sampler = s->sampler.get();
        const int64_t left = int64_t(s->job->req.max_tokens) - int64_t(s->generated.size());
        const int64_t room = int64_t(capacity_) - int64_t(s->n_past) - 1;
        q.max_tokens = static_cast<int32_t>(std::max<int64_t>(1, std::min(left, room)));
        reqs.push_back(std::move(q));
    }
    if (reqs.empty()) return;
    const SpecStats before = spec_->stats();
    const auto t0 = Clock::now();
    DecodeResult r;
    try {
        r = spec_->step(reqs);
    } catch (const std::exception & e) {
        r = {DecodeStatus::Failed, e.what()};
    }
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
    ++stats_.steps;
    stats_.step_us += static_cast<uint64_t>(us);
    if (!r.ok()) {
        std::fprintf(stderr, "serve: speculative decode failed: %s\n", r.message.c_str());
        for (Slot * s : slots)
            if (s->job) finish(*s, "", "decode failed: " + r.message);
        return;
    }
    const SpecStats & after = spec_->stats();
    stats_.spec_rounds += after.rounds - before.rounds;
    stats_.spec_drafted += after.drafted - before.drafted;
    stats_.spec_accepted += after.accepted - before.accepted;
    for (const auto & q : reqs) {
        Slot & s = slots_[size_t(q.seq)];
        // The memory now holds `last` and the accepted drafts: out.size() tokens more. Each token is emitted with
        // the count one-token decoding would have at its draw.
        const size_t base = s.n_past;
        s.pending = -1;
        for (size_t k = 0; k < q.out.size(); ++k) {
            s.n_past = base + k + 1;
            const std::string ending = emit(s, q.out[k], nullptr);
            if (!ending.empty()) {
                finish(s, ending);
                break;  // the rest is discarded
            }
        }
    }
}

int32_t Scheduler::draw(Slot & s, const float * logits) {
    const size_t n = static_cast<size_t>(n_vocab_);
    if (s.json) {
        s.masked.assign(logits, logits + n);
        if (s.json->mask(s.masked.data(), n) == 0 && !tok_.end_of_generation_tokens().empty()) {
            // Nothing continues the value (a schema that nests deeper than the automaton allows): the reply ends.
            const int32_t end = tok_.end_of_generation_tokens().front();
            s.sampler->accept(end);
            return end;
        }
        logits = s.masked.data();
    }
    const int32_t t = s.sampler->sample({logits, n});
    s.sampler->accept(t);
    if (s.json) s.json->accept(t);
    return t;
}

void Scheduler::sample(Slot & s, const float * logits) {
    const int32_t t = draw(s, logits);
    const std::string ending = emit(s, t, logits);
    if (!ending.empty()) finish(s, ending);
}

std::string Scheduler::emit(Slot & s, int32_t t, const float * logits) {
    Job & j = *s.job;
    s.generated.push_back(t);
    ++stats_.generated_tokens;
    if (s.generated.size() == 1) j.t_first = Clock::now();

    ChoiceEvent e;
    e.index = j.req.index;
    if (j.req.top_logprobs >= 0 && logits) e.logprobs.push_back(logprobs_of(logits, n_vocab_, t, j.req.top_logprobs));
    std::string ending;
    if (!j.req.ignore_eos && tok_.is_end_of_generation(t)) {
        e.text = s.stop->flush();
        ending = "stop";
    } else {
        e.text = s.stop->push(tok_.token_to_piece(t, false));
        if (s.stop->stopped()) {
            ending = "stop";
        } else if (s.json && s.json->complete()) {  // the JSON value (and what follows it) is written
            e.text += s.stop->flush();
            ending = "stop";
        } else if (static_cast<int32_t>(s.generated.size()) >= j.req.max_tokens || s.n_past + 1 >= capacity_) {
            e.text += s.stop->flush();
            ending = "length";
        }
    }
    j.ch->push(std::move(e));
    if (ending.empty()) s.pending = t;
    return ending;
}

void Scheduler::finish(Slot & s, const std::string & reason, const std::string & error) {
    Job & j = *s.job;
    const auto now = Clock::now();
    // (After a speculative round cut short by a stop, the memory holds more than n_past: no snapshot then.)
    if (error.empty() && s.generated.size() >= 2 && int64_t(ctx_.seq_pos_max(s.seq)) + 1 == int64_t(s.n_past)) {
        // The whole exchange (prompt and reply so far) serves a conversation's next turn.
        snapshot(s, s.n_past, nullptr, false, true);
    }
    ChoiceEvent e;
    e.index = j.req.index;
    e.done = true;
    e.finish_reason = reason;
    e.error = error;
    e.prompt_tokens = static_cast<int32_t>(j.req.prompt.size());
    e.cached_tokens = static_cast<int32_t>(s.n_cached);
    e.completion_tokens = static_cast<int32_t>(s.generated.size());
    if (!error.empty() && error != "cancelled") ++stats_.requests_failed;
    if (cfg_.log) {
        const double ttft = s.generated.empty() ? 0.0 : seconds(j.t_arrival, j.t_first);
        std::fprintf(stderr,
                     "serve: %s choice %d: prompt %zu (cached %zu), generated %zu, queued %.3f s, ttft %.3f s, "
                     "total %.3f s, %s\n",
                     j.id.c_str(), j.req.index, j.req.prompt.size(), s.n_cached, s.generated.size(),
                     seconds(j.t_arrival, j.t_start), ttft, seconds(j.t_arrival, now),
                     error.empty() ? ("finish " + reason).c_str() : ("error: " + error).c_str());
    }
    // The slot is free before the client hears of the end, so /metrics never shows a finished request's slot busy.
    ctx_.seq_rm(s.seq, -1, -1);
    if (spec_) spec_->reset(s.seq);
    --stats_.slots_busy;
    std::shared_ptr<Channel> ch = j.ch;
    s.job.reset();
    s.base.reset();  // (a snapshot dropped from the cache is freed with the last slot that holds it)
    s.prompt_snap.reset();
    s.chunk_snap.reset();
    s.sampler.reset();
    s.json.reset();
    s.stop.reset();
    s.prefilling = false;
    s.logits_ready = false;
    s.pending = -1;
    ch->push(std::move(e));
}

}  // namespace offgrid::server
