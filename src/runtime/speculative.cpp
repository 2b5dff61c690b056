// Speculative decoding (offgrid/speculative.h): drafts, one verify call per round, sample-and-match, rollback.
#include "offgrid/speculative.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "model/architecture.h"
#include "model/draft_head.h"
#include "runtime/ngram_draft.h"

namespace offgrid {

SpecType spec_type_from_name(const std::string & name) {
    if (name == "none") return SpecType::None;
    if (name == "draft-mtp") return SpecType::DraftMtp;
    if (name == "ngram-simple") return SpecType::NgramSimple;
    throw Error("unknown speculative type '" + name + "' (none, draft-mtp, ngram-simple)");
}

const char * spec_type_name(SpecType type) {
    switch (type) {
        case SpecType::DraftMtp: return "draft-mtp";
        case SpecType::NgramSimple: return "ngram-simple";
        default: return "none";
    }
}

namespace runtime {

namespace {

// Greedy draft token and its confidence: softmax over the 10 largest logits, at the largest (spec 3.5; ties to
// the lowest id).
std::pair<int32_t, float> draft_pick(const float * logits, size_t n) {
    constexpr size_t kTop = 10;
    size_t best = 0;
    for (size_t i = 1; i < n; ++i)
        if (logits[i] > logits[best]) best = i;
    std::vector<float> top;
    top.reserve(kTop + 1);
    for (size_t i = 0; i < n; ++i) {
        const float l = logits[i];
        if (top.size() < kTop || l > top.back()) {
            top.insert(std::upper_bound(top.begin(), top.end(), l, std::greater<float>()), l);
            if (top.size() > kTop) top.pop_back();
        }
    }
    double sum = 0.0;
    for (float l : top) sum += std::exp(double(l) - double(logits[best]));
    return {static_cast<int32_t>(best), static_cast<float>(1.0 / sum)};
}

}  // namespace

class SpeculativeImpl {
public:
    struct SeqState {
        std::vector<int32_t> history;           // tokens the target's memory holds, in position order
        std::unique_ptr<model::DraftHead::Cache> cache;  // the draft head's own rows (with a head)
        std::vector<float> pending_h;           // wide residual of the last decoded position (zero at start)
    };

    SpeculativeImpl(Context & ctx, const SpecParams & spec) : ctx_(ctx), spec_(spec) {
        if (spec.n_max < 1 || spec.n_max > 64) throw Error("speculative: n_max must be in 1..64");
        if (spec.n_min < 0 || spec.n_min > spec.n_max) throw Error("speculative: n_min must be in 0..n_max");
        if (!(spec.p_min >= 0.0f && spec.p_min <= 1.0f)) throw Error("speculative: p_min must be in [0, 1]");
        if (spec.ngram_min < 1 || spec.ngram_max < spec.ngram_min) throw Error("speculative: need 1 <= ngram_min <= ngram_max");
        const ContextParams & cp = ctx.params();
        {  // drafts of any source (the caller's too) roll back through the snapshots
            if (cp.n_rs_seq < static_cast<uint32_t>(spec.n_max)) {
                throw Error("speculative: the context keeps " + std::to_string(cp.n_rs_seq) +
                            " rollback snapshots, fewer than n_max " + std::to_string(spec.n_max) +
                            " (SpeculativeDecoder::configure)");
            }
            if (cp.n_ubatch < static_cast<uint32_t>(spec.n_max) + 1) throw Error("speculative: n_ubatch is below n_max + 1");
        }
        if (spec.type == SpecType::DraftMtp) {
            if (!cp.mtp_hidden) throw Error("speculative: draft-mtp needs a context with mtp_hidden (SpeculativeDecoder::configure)");
            head_ = model::make_draft_head(ctx.model().impl(), spec.draft_model);
            wide_ = head_->wide_width();
        }
    }

    SeqState & state(int32_t seq) {
        SeqState & s = seqs_[seq];
        if (s.pending_h.size() != wide_) s.pending_h.assign(wide_, 0.0f);
        if (head_ && !s.cache) s.cache = head_->new_cache();
        return s;
    }

    void reset(int32_t seq, const std::vector<int32_t> & history) {
        seqs_.erase(seq);
        state(seq).history = history;
    }

    // Feeds the draft head the rows of the last target decode: `tokens` at `pos0..` of `seq`, whose wide
    // hiddens are rows row0.. of the context. Row k pairs token k with the hidden of position k - 1.
    void catch_up(SeqState & s, const int32_t * tokens, int32_t pos0, size_t n, int32_t row0) {
        if (!head_ || n == 0) return;
        std::vector<int32_t> pos(n);
        std::vector<float> h(n * wide_);
        for (size_t k = 0; k < n; ++k) {
            pos[k] = pos0 + static_cast<int32_t>(k);
            const float * src = k == 0 ? s.pending_h.data() : ctx_.mtp_hidden(row0 + static_cast<int32_t>(k) - 1);
            std::copy(src, src + wide_, &h[k * wide_]);
        }
        head_->catch_up(*s.cache, tokens, pos.data(), h.data(), n);
    }

    DecodeResult prefill(int32_t seq, const std::vector<int32_t> & tokens) {
        if (tokens.empty()) return {DecodeStatus::InvalidBatch, "prefill: no tokens"};
        const int32_t pos0 = ctx_.seq_pos_max(seq) + 1;
        std::vector<BatchToken> batch(tokens.size());
        for (size_t i = 0; i < tokens.size(); ++i) {
            batch[i] = {tokens[i], pos0 + static_cast<int32_t>(i), {seq}, i + 1 == tokens.size()};
        }
        const DecodeResult r = ctx_.decode(batch);
        if (r.ok()) observe(batch);
        return r;
    }

    void observe(const std::vector<BatchToken> & batch) {
        // Batch indices per sequence, in batch order.
        std::map<int32_t, std::vector<int32_t>> rows;
        for (size_t i = 0; i < batch.size(); ++i) {
            if (!batch[i].seqs.empty()) rows[batch[i].seqs[0]].push_back(static_cast<int32_t>(i));
        }
        for (const auto & [seq, idx] : rows) {
            SeqState & s = state(seq);
            std::vector<int32_t> toks, pos;
            for (const int32_t i : idx) {
                toks.push_back(batch[size_t(i)].token);
                pos.push_back(batch[size_t(i)].pos >= 0 ? batch[size_t(i)].pos
                                                        : ctx_.seq_pos_max(seq) - int32_t(idx.size()) + 1 + int32_t(pos.size()));
            }
            s.history.insert(s.history.end(), toks.begin(), toks.end());
            if (!head_) continue;
            // Row k pairs its token with the residual of the sequence's previous row (pending_h for the first).
            std::vector<float> h(idx.size() * wide_);
            for (size_t k = 0; k < idx.size(); ++k) {
                const float * src = k == 0 ? s.pending_h.data() : ctx_.mtp_hidden(idx[k - 1]);
                std::copy(src, src + wide_, &h[k * wide_]);
            }
            head_->catch_up(*s.cache, toks.data(), pos.data(), h.data(), toks.size());
            const float * last = ctx_.mtp_hidden(idx.back());
            s.pending_h.assign(last, last + wide_);
        }
    }

    std::vector<int32_t> draft(SeqState & s, int32_t last, int32_t pos, int32_t n_cap) {
        std::vector<int32_t> d;
        if (n_cap <= 0) return d;
        if (spec_.type == SpecType::NgramSimple) {
            d = ngram_draft(s.history, last, spec_.ngram_min, spec_.ngram_max, n_cap);
        } else if (spec_.type == SpecType::DraftMtp) {
            std::vector<float> logits(head_->n_vocab()), h = s.pending_h, h_out(wide_);
            int32_t tok = last;
            for (int32_t j = 0; j < n_cap; ++j) {
                head_->step(*s.cache, tok, pos + j, h.data(), logits.data(), h_out.data());
                const auto [id, p] = draft_pick(logits.data(), logits.size());
                if (p < spec_.p_min) break;
                d.push_back(id);
                tok = id;
                std::swap(h, h_out);
            }
            // Row `pos` was computed from (last, h_{pos-1}), as the catch-up would; the draft's own rows go.
            s.cache->truncate(pos + 1);
        }
        if (static_cast<int32_t>(d.size()) < spec_.n_min) d.clear();
        return d;
    }

    DecodeResult step(std::vector<SpeculativeDecoder::Request> & reqs) {
        if (reqs.empty()) return {DecodeStatus::InvalidBatch, "speculative step: no requests"};
        std::vector<std::vector<int32_t>> drafts(reqs.size());
        const int32_t n_vocab_i = ctx_.model().n_vocab();
        std::vector<int32_t> pos0(reqs.size());
        std::vector<BatchToken> batch;
        for (size_t r = 0; r < reqs.size(); ++r) {
            auto & q = reqs[r];
            if (!q.sampler) throw Error("speculative step: request without a sampler");
            if (q.max_tokens < 1) throw Error("speculative step: max_tokens must be >= 1");
            SeqState & s = state(q.seq);
            pos0[r] = ctx_.seq_pos_max(q.seq) + 1;
            // Room: the draft and `last` must fit the sequence's cells (a unified cache's free cells are shared).
            const int64_t room_pos = int64_t(ctx_.seq_capacity()) - pos0[r] - 1;
            const int64_t room_free = int64_t(ctx_.n_free_cells(q.seq)) / int64_t(reqs.size()) - 1;
            const int64_t cap = std::min<int64_t>({spec_.n_max, q.max_tokens - 1, room_pos, room_free});
            if (!q.draft.empty()) {
                drafts[r].assign(q.draft.begin(), q.draft.begin() + std::clamp<int64_t>(cap, 0, int64_t(q.draft.size())));
            } else if (spec_.type != SpecType::None) {
                drafts[r] = draft(s, q.last, pos0[r], static_cast<int32_t>(cap));
            }
            for (int32_t t : drafts[r]) {
                if (t < 0 || t >= n_vocab_i) throw Error("speculative step: draft token " + std::to_string(t) + " out of range");
            }
            batch.push_back({q.last, pos0[r], {q.seq}, true});
            for (size_t j = 0; j < drafts[r].size(); ++j) {
                batch.push_back({drafts[r][j], pos0[r] + 1 + static_cast<int32_t>(j), {q.seq}, true});
            }
        }
        const DecodeResult res = ctx_.decode(batch);
        if (!res.ok()) {
            for (size_t r = 0; r < reqs.size(); ++r) {
                if (head_) state(reqs[r].seq).cache->truncate(pos0[r]);
            }
            return res;
        }
        const size_t n_vocab = static_cast<size_t>(ctx_.model().n_vocab());
        int32_t row = 0;
        for (size_t r = 0; r < reqs.size(); ++r) {
            auto & q = reqs[r];
            SeqState & s = state(q.seq);
            const std::vector<int32_t> & d = drafts[r];
            const int32_t n = static_cast<int32_t>(d.size());
            // Sample and match: one draw per emitted token from the target's row, as one-token decoding draws.
            q.out.clear();
            int32_t n_acc = 0;
            for (int32_t i = 0; i <= n; ++i) {
                const int32_t t = q.sampler->sample({ctx_.logits(row + i), n_vocab});
                q.sampler->accept(t);
                q.out.push_back(t);
                if (i == n || t != d[i]) break;
                ++n_acc;
            }
            // Commit last + the accepted drafts; roll the rest back (within the memory's snapshots).
            const int32_t keep_end = pos0[r] + 1 + n_acc;
            if (n_acc < n && !ctx_.seq_rm(q.seq, keep_end, -1)) {
                throw Error("speculative: rolling back " + std::to_string(n - n_acc) + " tokens of sequence " +
                            std::to_string(q.seq) + " was refused");
            }
            s.history.push_back(q.last);
            s.history.insert(s.history.end(), d.begin(), d.begin() + n_acc);
            if (head_) {
                // Row pos0 from (last, pending_h) unless the draft's first step left it; then rows pos0+1..pos0+n
                // from the verify rows (rejected ones too, then dropped).
                if (s.cache->empty() || s.cache->end() != pos0[r] + 1) catch_up(s, &q.last, pos0[r], 1, 0);
                std::vector<int32_t> toks(d.begin(), d.end());
                if (!toks.empty()) catch_up_from(s, toks.data(), pos0[r] + 1, toks.size(), row);
                s.cache->truncate(keep_end);
                const float * h = ctx_.mtp_hidden(row + n_acc);
                s.pending_h.assign(h, h + wide_);
            }
            stats_.rounds += 1;
            stats_.drafted += static_cast<uint64_t>(n);
            stats_.accepted += static_cast<uint64_t>(n_acc);
            stats_.emitted += q.out.size();
            row += n + 1;
        }
        return res;
    }

    // Catch-up rows whose hiddens all come from the context: token k at pos0 + k pairs with row row0 + k.
    void catch_up_from(SeqState & s, const int32_t * tokens, int32_t pos0, size_t n, int32_t row0) {
        std::vector<int32_t> pos(n);
        std::vector<float> h(n * wide_);
        for (size_t k = 0; k < n; ++k) {
            pos[k] = pos0 + static_cast<int32_t>(k);
            const float * src = ctx_.mtp_hidden(row0 + static_cast<int32_t>(k));
            std::copy(src, src + wide_, &h[k * wide_]);
        }
        head_->catch_up(*s.cache, tokens, pos.data(), h.data(), n);
    }

    Context & ctx_;
    SpecParams spec_;
    std::unique_ptr<model::DraftHead> head_;
    size_t wide_ = 0;
    std::map<int32_t, SeqState> seqs_;
    SpecStats stats_;
};

}  // namespace runtime

void SpeculativeDecoder::configure(ContextParams & params, const SpecParams & spec) {
    const uint32_t n = static_cast<uint32_t>(std::max(spec.n_max, 1));
    params.n_rs_seq = std::max(params.n_rs_seq, n);
    params.n_ubatch = std::max(params.n_ubatch, n + 1);
    if (params.n_batch != 0) params.n_batch = std::max(params.n_batch, n + 1);
    if (spec.type == SpecType::DraftMtp) params.mtp_hidden = true;
}

SpeculativeDecoder::SpeculativeDecoder(Context & ctx, const SpecParams & spec)
    : impl_(std::make_unique<runtime::SpeculativeImpl>(ctx, spec)) {}
SpeculativeDecoder::~SpeculativeDecoder() = default;

DecodeResult SpeculativeDecoder::prefill(int32_t seq, const std::vector<int32_t> & tokens) { return impl_->prefill(seq, tokens); }
void SpeculativeDecoder::observe(const std::vector<BatchToken> & batch) { impl_->observe(batch); }
void SpeculativeDecoder::reset(int32_t seq, const std::vector<int32_t> & history) { impl_->reset(seq, history); }
DecodeResult SpeculativeDecoder::step(std::vector<Request> & requests) { return impl_->step(requests); }
const SpecStats & SpeculativeDecoder::stats() const { return impl_->stats_; }
void SpeculativeDecoder::reset_stats() { impl_->stats_ = {}; }

}  // namespace offgrid
