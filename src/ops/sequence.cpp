#include "ops/sequence.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "ops/cpu/vec.h"

namespace offgrid::ops {

void causal_conv_step(const float * weights, size_t kernel, size_t dilation, size_t channels, float * history,
                      const float * x, float * out) {
    causal_conv_step_into(weights, kernel, dilation, channels, history, history, x, out);
}

namespace {

// The models' shape (4 taps, no dilation) without the inner loops, so the compiler can vectorise across
// channels: the same products and sums in the same order as the general loop below.
void conv4_step(const float * weights, size_t channels, const float * history_in, float * history_out,
                const float * x, float * out) {
    for (size_t c = 0; c < channels; ++c) {
        const float * w = weights + c * 4;
        const float h0 = history_in[c * 3], h1 = history_in[c * 3 + 1], h2 = history_in[c * 3 + 2], xc = x[c];
        float sum = 0.0f;
        sum += w[0] * h0;
        sum += w[1] * h1;
        sum += w[2] * h2;
        sum += w[3] * xc;
        out[c] = sum;
        history_out[c * 3] = h1;
        history_out[c * 3 + 1] = h2;
        history_out[c * 3 + 2] = xc;
    }
}

}  // namespace

void causal_conv_step_into(const float * weights, size_t kernel, size_t dilation, size_t channels,
                           const float * history_in, float * history_out, const float * x, float * out) {
    if (kernel == 4 && dilation == 1) {
        conv4_step(weights, channels, history_in, history_out, x, out);
        return;
    }
    const size_t h = (kernel - 1) * dilation;
    for (size_t c = 0; c < channels; ++c) {
        const float * hist = history_in + c * h;
        float * next = history_out + c * h;
        const float * w = weights + c * kernel;
        float sum = 0.0f;
        for (size_t k = 0; k < kernel; ++k) {
            const size_t back = (kernel - 1 - k) * dilation;  // frames before the new one
            const float v = back == 0 ? x[c] : hist[h - back];
            sum += w[k] * v;
        }
        out[c] = sum;
        if (h > 0) {  // in place, each element is read before the one below it is written
            for (size_t j = 0; j + 1 < h; ++j) next[j] = hist[j + 1];
            next[h - 1] = x[c];
        }
    }
}

namespace {

// causal_conv_frames for K taps (K - 1 history frames a channel), kChunk channels at a time in lanes.
template <size_t K>
void conv_frames(const float * weights, size_t kernel, size_t c0, size_t c1, const float * history_in,
                 float * history_out, const float * x, size_t x_stride, const uint32_t * rows, size_t n, float * out,
                 size_t out_stride, const ConvHistoryCopy * copies, size_t n_copies) {
    constexpr size_t kChunk = 16;
    constexpr size_t kMax = kConvFramesMaxTaps;
    const size_t taps = K != 0 ? K : kernel;  // K = 0: any count up to kMax
    const size_t h = taps - 1;
    for (size_t c = c0; c < c1; c += kChunk) {
        const size_t m = std::min(kChunk, c1 - c);
        float hist[kMax][kChunk] = {}, w[kMax][kChunk] = {};
        for (size_t i = 0; i < m; ++i) {
            for (size_t k = 0; k < h; ++k) hist[k][i] = history_in[(c + i) * h + k];
            for (size_t k = 0; k < taps; ++k) w[k][i] = weights[(c + i) * taps + k];
        }
        auto write_history = [&](float * dst) {
            for (size_t i = 0; i < m; ++i) {
                for (size_t k = 0; k < h; ++k) dst[(c + i) * h + k] = hist[k][i];
            }
        };
        for (size_t f = 0; f < n; ++f) {
            const float * xf = x + rows[f] * x_stride + c;
            float * of = out + f * out_stride + c;
            for (size_t i = 0; i < m; ++i) {
                // The taps in order, the newest frame last: causal_conv_step_into's sum.
                float sum = 0.0f;
                for (size_t k = 0; k < h; ++k) sum += w[k][i] * hist[k][i];
                sum += w[h][i] * xf[i];
                of[i] = sum;
                for (size_t k = 0; k + 1 < h; ++k) hist[k][i] = hist[k + 1][i];
                if (h > 0) hist[h - 1][i] = xf[i];
            }
            for (size_t j = 0; j < n_copies; ++j) {
                if (copies[j].frames == f + 1) write_history(copies[j].history);
            }
        }
        write_history(history_out);
    }
}

}  // namespace

void causal_conv_frames(const float * weights, size_t kernel, size_t c0, size_t c1, const float * history_in,
                        float * history_out, const float * x, size_t x_stride, const uint32_t * rows, size_t n,
                        float * out, size_t out_stride, const ConvHistoryCopy * copies, size_t n_copies) {
    if (kernel == 0 || kernel > kConvFramesMaxTaps) throw std::invalid_argument("causal_conv_frames: 1 to 8 taps");
    auto run = [&](auto taps) {
        conv_frames<decltype(taps)::value>(weights, kernel, c0, c1, history_in, history_out, x, x_stride, rows, n, out,
                                           out_stride, copies, n_copies);
    };
    if (kernel == 4) {
        run(std::integral_constant<size_t, 4>{});
    } else {
        run(std::integral_constant<size_t, 0>{});
    }
}

void causal_conv_ref(const float * weights, size_t kernel, size_t dilation, size_t channels, float * history,
                     const float * x, size_t n_frames, float * out) {
    const size_t h = (kernel - 1) * dilation;
    for (size_t c = 0; c < channels; ++c) {
        // The channel's whole timeline: history, then the new frames.
        std::vector<float> line(h + n_frames);
        for (size_t j = 0; j < h; ++j) line[j] = history[c * h + j];
        for (size_t t = 0; t < n_frames; ++t) line[h + t] = x[t * channels + c];
        for (size_t t = 0; t < n_frames; ++t) {
            float sum = 0.0f;
            for (size_t k = 0; k < kernel; ++k) sum += weights[c * kernel + k] * line[h + t - (kernel - 1 - k) * dilation];
            out[t * channels + c] = sum;
        }
        for (size_t j = 0; j < h; ++j) history[c * h + j] = line[n_frames + j];
    }
}

void gated_delta_step(float * state, size_t dk, size_t dv, const float * q, const float * k, const float * v,
                      float decay, float beta, float scale, float * out) {
    cpu::vec_kernels().gated_delta_step(state, state, dk, dv, q, k, v, decay, beta, scale, out);
}

void gated_delta_step_into(const float * state_in, float * state_out, size_t dk, size_t dv, const float * q,
                           const float * k, const float * v, float decay, float beta, float scale, float * out) {
    cpu::vec_kernels().gated_delta_step(state_in, state_out, dk, dv, q, k, v, decay, beta, scale, out);
}

void gated_delta_step_ref(float * state, size_t dk, size_t dv, const float * q, const float * k, const float * v,
                          float decay, float beta, float scale, float * out) {
    for (size_t n = 0; n < dk * dv; ++n) state[n] = decay * state[n];
    std::vector<float> delta(dv);
    for (size_t m = 0; m < dv; ++m) {
        float kv = 0.0f;
        for (size_t i = 0; i < dk; ++i) kv += state[i + dk * m] * k[i];
        delta[m] = beta * (v[m] - kv);
    }
    for (size_t m = 0; m < dv; ++m) {
        for (size_t i = 0; i < dk; ++i) state[i + dk * m] += k[i] * delta[m];
    }
    for (size_t m = 0; m < dv; ++m) {
        float qs = 0.0f;
        for (size_t i = 0; i < dk; ++i) qs += state[i + dk * m] * q[i];
        out[m] = scale * qs;
    }
}

void kda_step(float * state, size_t hd, const float * q, const float * k, const float * v, const float * g, float beta,
              float scale, float * out, float * decay) {
    // The decay of key channel i is the same for every row: one exp per channel (the values of an exp per
    // element, so the twin's bits). A row is decayed and read in one pass, then updated and read in another.
    for (size_t i = 0; i < hd; ++i) decay[i] = std::exp(g[i]);
    for (size_t j = 0; j < hd; ++j) {
        float * s = state + j * hd;
        float u = 0.0f;
        for (size_t i = 0; i < hd; ++i) {
            s[i] *= decay[i];
            u += s[i] * k[i];
        }
        const float delta = (v[j] - u) * beta;
        float o = 0.0f;
        for (size_t i = 0; i < hd; ++i) {
            s[i] += k[i] * delta;
            o += s[i] * q[i];
        }
        out[j] = o * scale;
    }
}

void kda_step_ref(float * state, size_t hd, const float * q, const float * k, const float * v, const float * g,
                  float beta, float scale, float * out) {
    for (size_t j = 0; j < hd; ++j)
        for (size_t i = 0; i < hd; ++i) state[i + hd * j] = state[i + hd * j] * std::exp(g[i]);
    std::vector<float> delta(hd);
    for (size_t j = 0; j < hd; ++j) {
        float ks = 0.0f;
        for (size_t i = 0; i < hd; ++i) ks += state[i + hd * j] * k[i];
        delta[j] = (v[j] - ks) * beta;
    }
    for (size_t j = 0; j < hd; ++j)
        for (size_t i = 0; i < hd; ++i) state[i + hd * j] = state[i + hd * j] + k[i] * delta[j];
    for (size_t j = 0; j < hd; ++j) {
        float qs = 0.0f;
        for (size_t i = 0; i < hd; ++i) qs += state[i + hd * j] * q[i];
        out[j] = qs * scale;
    }
}

}  // namespace offgrid::ops
