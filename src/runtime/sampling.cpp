// The sampling chain: penalties, top-k, top-p, min-p, temperature, draw.
#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"

namespace offgrid::runtime {

namespace {

// Higher logit first; equal logits by lower id, so every step is deterministic.
template <typename Candidate>
bool ranks_before(const Candidate & a, const Candidate & b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Probabilities of candidates sorted by ranks_before (the first one has the largest logit) at a temperature,
// into p. Subtracting the top logit before dividing keeps a tiny temperature from overflowing.
template <typename Candidate>
void softmax_sorted(const std::vector<Candidate> & c, std::vector<double> & p, double temperature = 1.0) {
    p.resize(c.size());
    const double top = c.front().logit;
    double sum = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        p[i] = std::exp((static_cast<double>(c[i].logit) - top) / temperature);
        sum += p[i];
    }
    for (double & v : p) v /= sum;
}

std::string number(double v) { return std::to_string(v); }

}  // namespace

}  // namespace offgrid::runtime

namespace offgrid {

void validate(const SamplingParams & p) {
    using runtime::number;
    if (std::isnan(p.temperature)) throw Error("sampling: temperature is NaN");
    if (p.top_k < 0) throw Error("sampling: top_k must be >= 0 (0 disables it), got " + std::to_string(p.top_k));
    if (!(p.top_p > 0 && p.top_p <= 1)) {
        throw Error("sampling: top_p must be in (0, 1] (1 disables it), got " + number(p.top_p));
    }
    if (!(p.min_p >= 0 && p.min_p <= 1)) {
        throw Error("sampling: min_p must be in [0, 1] (0 disables it), got " + number(p.min_p));
    }
    if (!(p.repeat_penalty > 0) || !std::isfinite(p.repeat_penalty)) {
        throw Error("sampling: repeat_penalty must be a finite value > 0 (1 disables it), got " +
                    number(p.repeat_penalty));
    }
    if (!std::isfinite(p.frequency_penalty)) throw Error("sampling: frequency_penalty must be finite");
    if (!std::isfinite(p.presence_penalty)) throw Error("sampling: presence_penalty must be finite");
    if (p.repeat_last_n < -1) {
        throw Error("sampling: repeat_last_n must be >= -1 (-1: whole history, 0: off), got " +
                    std::to_string(p.repeat_last_n));
    }
}

}  // namespace offgrid

namespace offgrid::runtime {

Sampler::Sampler(const SamplingParams & params) : params_(params) {
    validate(params_);
    reset();
}

void Sampler::reset() {
    ring_.clear();
    ring_start_ = 0;
    if (params_.repeat_last_n > 0) ring_.reserve(static_cast<size_t>(params_.repeat_last_n));
    rng_state_ = params_.seed;
}

void Sampler::accept(int32_t token) {
    if (params_.repeat_last_n == 0) return;
    if (params_.repeat_last_n > 0 && ring_.size() == static_cast<size_t>(params_.repeat_last_n)) {
        ring_[ring_start_] = token;  // over the oldest
        ring_start_ = (ring_start_ + 1) % ring_.size();
        return;
    }
    ring_.push_back(token);
}

std::vector<int32_t> Sampler::history() const {
    std::vector<int32_t> out(ring_.begin() + static_cast<long>(ring_start_), ring_.end());
    out.insert(out.end(), ring_.begin(), ring_.begin() + static_cast<long>(ring_start_));
    return out;
}

// splitmix64: a fixed, portable sequence for each seed.
double Sampler::next_uniform() {
    rng_state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = rng_state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;
}

void Sampler::run_chain(std::span<const float> logits) const {
    const SamplingParams & p = params_;
    if (logits.empty()) throw Error("sampling: empty logits row");
    if (logits.size() > static_cast<size_t>(INT32_MAX)) throw Error("sampling: logits row too long");
    std::vector<Candidate> & c = cand_;
    c.resize(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
        if (std::isnan(logits[i]) || logits[i] == INFINITY) {
            throw Error("sampling: logits[" + std::to_string(i) + "] is " + (std::isnan(logits[i]) ? "NaN" : "+inf"));
        }
        c[i] = {static_cast<int32_t>(i), logits[i]};
    }

    // Penalties, once per distinct token of the window (ids outside the row are ignored): the window sorted, so
    // each token's occurrences are one run.
    if (!ring_.empty()) {
        if (window_.capacity() < ring_.size()) window_.reserve(std::max(ring_.capacity(), 2 * window_.capacity()));
        window_.assign(ring_.begin(), ring_.end());
        std::sort(window_.begin(), window_.end());
        for (size_t i = 0; i < window_.size();) {
            size_t j = i + 1;
            while (j < window_.size() && window_[j] == window_[i]) ++j;
            const int32_t t = window_[i];
            if (t >= 0 && static_cast<size_t>(t) < c.size()) {
                float & l = c[t].logit;
                l = l > 0 ? l / p.repeat_penalty : l * p.repeat_penalty;
                l -= static_cast<float>(j - i) * p.frequency_penalty + p.presence_penalty;
            }
            i = j;
        }
    }

    if (p.temperature <= 0) {
        const auto best = std::min_element(c.begin(), c.end(), ranks_before<Candidate>);
        c[0] = *best;
        c.resize(1);
        prob_.assign(1, 1.0);
        return;
    }

    // Drop impossible tokens; they would only get probability 0.
    c.erase(std::remove_if(c.begin(), c.end(), [](const Candidate & x) { return x.logit == -INFINITY; }), c.end());
    if (c.empty()) throw Error("sampling: every logit is -inf");

    // Top-k, leaving the candidates sorted.
    if (p.top_k > 0 && static_cast<size_t>(p.top_k) < c.size()) {
        std::partial_sort(c.begin(), c.begin() + p.top_k, c.end(), ranks_before<Candidate>);
        c.resize(p.top_k);
    } else {
        std::sort(c.begin(), c.end(), ranks_before<Candidate>);
    }

    // Top-p: the shortest head whose probability reaches top_p.
    if (p.top_p < 1) {
        softmax_sorted(c, prob_);
        double cum = 0;
        size_t keep = c.size();
        for (size_t i = 0; i < prob_.size(); ++i) {
            cum += prob_[i];
            if (cum >= p.top_p) {
                keep = i + 1;
                break;
            }
        }
        c.resize(keep);
    }

    // Min-p: tokens at least min_p times as likely as the best one.
    if (p.min_p > 0) {
        const double top = c.front().logit;
        const auto weak = [&](const Candidate & x) { return std::exp(static_cast<double>(x.logit) - top) < p.min_p; };
        c.erase(std::remove_if(c.begin() + 1, c.end(), weak), c.end());
    }

    softmax_sorted(c, prob_, p.temperature);
}

std::vector<TokenProb> Sampler::distribution(std::span<const float> logits) const {
    run_chain(logits);
    std::vector<TokenProb> out(cand_.size());
    for (size_t i = 0; i < cand_.size(); ++i) out[i] = {cand_[i].id, static_cast<float>(prob_[i])};
    return out;
}

int32_t Sampler::sample(std::span<const float> logits) {
    const SamplingParams & p = params_;
    if (p.temperature <= 0 && p.repeat_penalty == 1 && p.frequency_penalty == 0 && p.presence_penalty == 0) {
        // Greedy without penalties (what servers see most): the argmax in one pass, without the candidate copy
        // distribution() makes; the same winner (lowest id on ties) and the same errors.
        if (logits.empty()) throw Error("sampling: empty logits row");
        size_t best = 0;
        for (size_t i = 0; i < logits.size(); ++i) {
            const float l = logits[i];
            if (std::isnan(l) || l == INFINITY) {
                throw Error("sampling: logits[" + std::to_string(i) + "] is " + (std::isnan(l) ? "NaN" : "+inf"));
            }
            if (l > logits[best]) best = i;
        }
        return static_cast<int32_t>(best);
    }
    run_chain(logits);
    if (cand_.size() == 1) return cand_.front().id;
    const double u = next_uniform();
    double cum = 0;
    for (size_t i = 0; i < cand_.size(); ++i) {
        cum += static_cast<float>(prob_[i]);  // the float probabilities distribution() gives
        if (u < cum) return cand_[i].id;
    }
    return cand_.back().id;  // u beyond the rounded total
}

}  // namespace offgrid::runtime
