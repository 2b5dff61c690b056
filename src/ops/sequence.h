// Kernels that run along time: the causal depthwise convolution (with dilation) and the gated delta rule.
// Both keep their history in a caller-owned state buffer, so a sequence can continue across ubatches.
#pragma once

#include <cstddef>
#include <cstdint>

namespace offgrid::ops {

// Causal depthwise convolution of one new frame x (channels floats) with kernel taps
// weights[k + c * kernel], k = 0..kernel-1, the last tap on the newest frame:
//   out[c] = sum_k weights[k + c*kernel] * frame(t - (kernel-1-k)*dilation)[c]
// history holds the previous (kernel-1)*dilation frames per channel, oldest first, time fastest:
// history[c * H + j], H = (kernel-1)*dilation. It is shifted by one frame and x appended. Taps are summed in
// order k = 0..kernel-1 in float.
void causal_conv_step(const float * weights, size_t kernel, size_t dilation, size_t channels, float * history,
                      const float * x, float * out);

// The same step with the history read from history_in and the shifted history written to history_out (which
// may be history_in itself, or a buffer that does not overlap it): the bits of causal_conv_step either way.
void causal_conv_step_into(const float * weights, size_t kernel, size_t dilation, size_t channels,
                           const float * history_in, float * history_out, const float * x, float * out);

// A history to copy on the way (a snapshot): after `frames` frames, the history is also written at `history`
// (channels [c0, c1) of it, laid out as above).
struct ConvHistoryCopy {
    size_t frames;
    float * history;
};

inline constexpr size_t kConvFramesMaxTaps = 8;

// Frames f < n of channels [c0, c1) with no dilation and 1 to kConvFramesMaxTaps taps, each channel's history
// kept in registers from frame to frame: frame f reads x + rows[f] * x_stride and writes out + f * out_stride;
// the history is read from history_in and the one after the last frame written to history_out (history_in
// itself, or a buffer that does not overlap it). The bits of causal_conv_step_into frame after frame. Channel
// ranges are independent, so a prompt's frames spread over threads by channels.
void causal_conv_frames(const float * weights, size_t kernel, size_t c0, size_t c1, const float * history_in,
                        float * history_out, const float * x, size_t x_stride, const uint32_t * rows, size_t n,
                        float * out, size_t out_stride, const ConvHistoryCopy * copies, size_t n_copies);

// Plain twin over a whole sequence: frames x[t * channels + c], t < n_frames, history as above (updated).
void causal_conv_ref(const float * weights, size_t kernel, size_t dilation, size_t channels, float * history,
                     const float * x, size_t n_frames, float * out);

// One token of the gated delta rule for one value head, with the SIMD kernel of the active ISA level
// (ops/cpu/vec.h; one fixed order per level). state[i + dk * m] (i < dk key index, m < dv value
// index). decay = exp(g) with g <= 0, beta in (0, 1); q and k are L2-normalised key-head vectors:
//   S <- decay * S;  delta[m] = beta * (v[m] - sum_i S[i,m] k[i]);  S[i,m] += k[i] * delta[m]
//   out[m] = scale * sum_i S[i,m] q[i]
void gated_delta_step(float * state, size_t dk, size_t dv, const float * q, const float * k, const float * v,
                      float decay, float beta, float scale, float * out);

// The same step with the state read from state_in and the new state written to state_out (state_in itself, or
// a buffer that does not overlap it): the bits of gated_delta_step either way. A decode step writes the new
// state next to the old one this way, so the old one stays as it was (memory/recurrent_cache.h).
void gated_delta_step_into(const float * state_in, float * state_out, size_t dk, size_t dv, const float * q,
                           const float * k, const float * v, float decay, float beta, float scale, float * out);

// Plain twin (the same maths, written element by element with no shared partial results).
void gated_delta_step_ref(float * state, size_t dk, size_t dv, const float * q, const float * k, const float * v,
                          float decay, float beta, float scale, float * out);

// One token of Kimi Delta Attention's delta rule for one head (hd x hd state): the gated delta rule with a decay
// per key channel. state[i + hd * j] (i < hd key index, j < hd value index); g[i] <= 0 is channel i's log decay;
// q and k are L2-normalised:
//   S[i,j] <- exp(g[i]) * S[i,j];  delta[j] = (v[j] - sum_i S[i,j] k[i]) * beta;  S[i,j] += k[i] * delta[j]
//   out[j] = (sum_i S[i,j] q[i]) * scale
// Every sum runs in index order in float, so the bits do not depend on the ISA level. `decay` is hd floats of
// working space (one exp per channel, shared by the rows).
void kda_step(float * state, size_t hd, const float * q, const float * k, const float * v, const float * g, float beta,
              float scale, float * out, float * decay);

// Plain twin: the same maths over the whole state one phase at a time (decay every element with its own exp,
// then every row's delta, then the updates, then the outputs), no working space shared between rows.
void kda_step_ref(float * state, size_t hd, const float * q, const float * k, const float * v, const float * g,
                  float beta, float scale, float * out);

}  // namespace offgrid::ops
