// The public Sampler (offgrid/sampler.h): owns one internal sampler.
#include "offgrid/sampler.h"

#include <string>

#include "offgrid/context.h"
#include "runtime/sampling.h"

namespace offgrid {

Sampler::Sampler(const SamplingParams & params) : impl_(std::make_unique<runtime::Sampler>(params)) {}
Sampler::~Sampler() = default;
Sampler::Sampler(Sampler &&) noexcept = default;
Sampler & Sampler::operator=(Sampler &&) noexcept = default;

int32_t Sampler::sample(std::span<const float> logits) { return impl_->sample(logits); }

int32_t Sampler::sample(const Context & ctx, int32_t i) {
    const int32_t n = ctx.n_outputs();
    if (i < 0) i = n - 1;
    if (i < 0 || i >= n) {
        throw Error("sampling: output row " + std::to_string(i) + " of " + std::to_string(n) +
                    " rows of the last decode call");
    }
    return impl_->sample({ctx.logits(i), static_cast<size_t>(ctx.model().n_vocab())});
}

void Sampler::accept(int32_t token) { impl_->accept(token); }
void Sampler::reset() { impl_->reset(); }
std::vector<TokenProb> Sampler::distribution(std::span<const float> logits) const { return impl_->distribution(logits); }
const SamplingParams & Sampler::params() const { return impl_->params(); }

}  // namespace offgrid
