#include "kl_divergence.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "offgrid/error.h"

namespace offgrid::cli {

namespace {

constexpr char kMagic[8] = {'O', 'G', 'K', 'L', 'D', '0', '0', '1'};

// log-softmax in double, stored as float.
void log_softmax(const float * logits, uint32_t n, std::vector<double> & out) {
    out.resize(n);
    double max = logits[0];
    for (uint32_t v = 1; v < n; ++v) max = std::max<double>(max, logits[v]);
    double sum = 0;
    for (uint32_t v = 0; v < n; ++v) sum += std::exp(static_cast<double>(logits[v]) - max);
    const double lse = std::log(sum) + max;
    for (uint32_t v = 0; v < n; ++v) out[v] = static_cast<double>(logits[v]) - lse;
}

}  // namespace

KldBaseWriter::KldBaseWriter(const std::string & path, uint32_t n_vocab, uint32_t chunk, bool half,
                             const std::vector<int32_t> & tokens)
    : file_(std::make_unique<AtomicFile>(path, "--kl-divergence-base")), n_vocab_(n_vocab), row_(n_vocab) {
    const uint32_t head[4] = {n_vocab, chunk, half ? 1u : 0u, 0u};
    const uint64_t n = tokens.size();
    file_->write(kMagic, sizeof kMagic);
    file_->write(head, sizeof head);
    file_->write(&n, sizeof n);
    file_->write(tokens.data(), tokens.size() * sizeof(int32_t));
}

void KldBaseWriter::add_row(const float * logits) {
    std::vector<double> lp;
    log_softmax(logits, n_vocab_, lp);
    for (uint32_t v = 0; v < n_vocab_; ++v) row_[v] = static_cast<float>(lp[v]);
    file_->write(row_.data(), row_.size() * sizeof(float));
}

void KldBaseWriter::finish() { file_->commit(); }

KldBaseReader::KldBaseReader(const std::string & path) : path_(path) {
    f_ = std::fopen(path.c_str(), "rb");
    if (!f_) throw Error("--kl-divergence-base " + path + ": cannot open: " + std::strerror(errno));
    char magic[8];
    uint32_t head[4];
    uint64_t n = 0;
    if (std::fread(magic, 1, 8, f_) != 8 || std::memcmp(magic, kMagic, 8) != 0 ||
        std::fread(head, sizeof head, 1, f_) != 1 || std::fread(&n, sizeof n, 1, f_) != 1) {
        throw Error("--kl-divergence-base " + path + ": not a base file written by --kl-divergence-base");
    }
    n_vocab_ = head[0];
    chunk_ = head[1];
    half_ = head[2] != 0;
    if (n_vocab_ == 0 || chunk_ < 2 || n > (uint64_t(1) << 32)) {
        throw Error("--kl-divergence-base " + path + ": damaged header");
    }
    tokens_.resize(n);
    if (n > 0 && std::fread(tokens_.data(), sizeof(int32_t), n, f_) != n) {
        throw Error("--kl-divergence-base " + path + ": truncated token list");
    }
    row_.resize(n_vocab_);
}

KldBaseReader::~KldBaseReader() {
    if (f_) std::fclose(f_);
}

const std::vector<float> & KldBaseReader::next_row() {
    if (std::fread(row_.data(), sizeof(float), n_vocab_, f_) != n_vocab_) {
        throw Error("--kl-divergence-base " + path_ + ": fewer rows than scored tokens (truncated file?)");
    }
    return row_;
}

void KldStats::add(const std::vector<float> & base, const float * logits, int32_t target) {
    std::vector<double> lq;
    log_softmax(logits, static_cast<uint32_t>(base.size()), lq);
    double kld = 0;
    size_t top_p = 0, top_q = 0;
    for (size_t v = 0; v < base.size(); ++v) {
        const double lp = base[v];
        kld += std::exp(lp) * (lp - lq[v]);
        if (base[v] > base[top_p]) top_p = v;
        if (lq[v] > lq[top_q]) top_q = v;
    }
    kld_.push_back(std::max(0.0, kld));  // rounding can leave a tiny negative sum for identical distributions
    nll_base_ -= base[target];
    nll_model_ -= lq[target];
    same_top_ += top_p == top_q ? 1 : 0;
}

double KldStats::mean_kld() const {
    double s = 0;
    for (double k : kld_) s += k;
    return kld_.empty() ? 0.0 : s / static_cast<double>(kld_.size());
}

void KldStats::print(std::FILE * out) const {
    const size_t n = kld_.size();
    if (n == 0) {
        std::fprintf(out, "kl-divergence: no scored tokens\n");
        return;
    }
    const double mean = mean_kld();
    double var = 0;
    for (double k : kld_) var += (k - mean) * (k - mean);
    const double err = n > 1 ? std::sqrt(var / static_cast<double>(n - 1) / static_cast<double>(n)) : 0.0;
    std::vector<double> s = kld_;
    std::sort(s.begin(), s.end());
    const auto pct = [&](double p) { return s[std::min(n - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(n - 1) + 0.5))]; };
    const double ppl_base = std::exp(nll_base_ / static_cast<double>(n));
    const double ppl_model = std::exp(nll_model_ / static_cast<double>(n));
    const double same = 100.0 * static_cast<double>(same_top_) / static_cast<double>(n);
    std::fprintf(out, "====== Perplexity statistics ======\n");
    std::fprintf(out, "Mean PPL(Q)                   : %10.6f\n", ppl_model);
    std::fprintf(out, "Mean PPL(base)                : %10.6f\n", ppl_base);
    std::fprintf(out, "Mean PPL(Q)/PPL(base)         : %10.6f\n", ppl_model / ppl_base);
    std::fprintf(out, "Mean PPL(Q)-PPL(base)         : %10.6f\n", ppl_model - ppl_base);
    std::fprintf(out, "\n====== KL divergence statistics ======\n");
    std::fprintf(out, "Mean    KLD: %10.6f +/- %10.6f\n", mean, err);
    std::fprintf(out, "Maximum KLD: %10.6f\n", s.back());
    std::fprintf(out, "99.9%%   KLD: %10.6f\n", pct(99.9));
    std::fprintf(out, "99.0%%   KLD: %10.6f\n", pct(99.0));
    std::fprintf(out, "95.0%%   KLD: %10.6f\n", pct(95.0));
    std::fprintf(out, "90.0%%   KLD: %10.6f\n", pct(90.0));
    std::fprintf(out, "Median  KLD: %10.6f\n", pct(50.0));
    std::fprintf(out, "10.0%%   KLD: %10.6f\n", pct(10.0));
    std::fprintf(out, " 5.0%%   KLD: %10.6f\n", pct(5.0));
    std::fprintf(out, " 1.0%%   KLD: %10.6f\n", pct(1.0));
    std::fprintf(out, "Minimum KLD: %10.6f\n", s.front());
    std::fprintf(out, "\n====== Token probability statistics ======\n");
    std::fprintf(out, "Same top p: %6.3f %% (%zu of %zu tokens)\n", same, same_top_, n);
}

}  // namespace offgrid::cli
