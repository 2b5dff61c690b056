// IMRoPE (interleaved multi-section rotary embedding, ggml mode 40) with NeoX pairing inside the first n_rot
// dimensions of a head; the remaining dimensions pass through (partial rotary).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace offgrid::ops {

struct RopeParams {
    int n_rot = 0;                       // rotated dimensions per head (even)
    std::array<int, 4> sections{};       // M-RoPE sections (t, h, w, e); their sum must be > 0
    float freq_base = 10000.0f;
    float freq_scale = 1.0f;
    float attn_factor = 1.0f;
};

// cos/sin of the n_rot/2 angles for a 4-component position (t, h, w, e). Text tokens use (p, p, p, 0); a QSA
// pooled key uses its first member's (pos, y, x, pos). The angles are iterated float products (theta *= ts)
// as the reference computes them, not pow() per pair.
// The most rotated pairs (n_rot / 2) a RopeAngles holds: it lives on the stack, so a position's angles cost
// no allocation. rope_angles throws for a larger n_rot.
inline constexpr int kMaxRopePairs = 512;
struct RopeAngles {
    std::array<float, kMaxRopePairs> cos, sin;
};
RopeAngles rope_angles(const RopeParams & p, const std::array<int32_t, 4> & pos4);

// Rotates one head vector in place (n_rot <= head dim).
void rope_apply(float * x, int n_rot, const RopeAngles & a);

// Both steps for n_heads consecutive heads of head_dim floats.
void imrope(float * x, int n_heads, int head_dim, const RopeParams & p, const std::array<int32_t, 4> & pos4);

// Which position component pair i uses: 0 = t, 1 = h, 2 = w, 3 = e (the spec's sector rule).
int rope_component(const std::array<int, 4> & sections, int pair);

}  // namespace offgrid::ops
