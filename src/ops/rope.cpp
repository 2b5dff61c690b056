#include "ops/rope.h"

#include <cmath>

#include "common/error.h"

namespace offgrid::ops {

int rope_component(const std::array<int, 4> & s, int pair) {
    const int total = s[0] + s[1] + s[2] + s[3];
    const int sec = pair % total;
    if (sec % 3 == 1 && sec < 3 * s[1]) return 1;
    if (sec % 3 == 2 && sec < 3 * s[2]) return 2;
    if (sec % 3 == 0 && sec < 3 * s[0]) return 0;
    return 3;
}

RopeAngles rope_angles(const RopeParams & p, const std::array<int32_t, 4> & pos4) {
    if (p.n_rot <= 0 || p.n_rot % 2 != 0) throw Error("rope: n_rot " + std::to_string(p.n_rot) + " is not even");
    if (p.n_rot > 2 * kMaxRopePairs) {
        throw Error("rope: n_rot " + std::to_string(p.n_rot) + " is above " + std::to_string(2 * kMaxRopePairs));
    }
    if (p.sections[0] + p.sections[1] + p.sections[2] + p.sections[3] <= 0) throw Error("rope: sections sum to 0");
    const int half = p.n_rot / 2;
    const float ts = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
    float theta[4] = {static_cast<float>(pos4[0]), static_cast<float>(pos4[1]), static_cast<float>(pos4[2]),
                      static_cast<float>(pos4[3])};
    RopeAngles a;
    for (int i = 0; i < half; ++i) {
        const float phi = p.freq_scale * theta[rope_component(p.sections, i)];
        a.cos[i] = std::cos(phi) * p.attn_factor;
        a.sin[i] = std::sin(phi) * p.attn_factor;
        for (float & t : theta) t *= ts;
    }
    return a;
}

void rope_apply(float * x, int n_rot, const RopeAngles & a) {
    const int half = n_rot / 2;
    for (int i = 0; i < half; ++i) {
        const float x0 = x[i];
        const float x1 = x[i + half];
        x[i] = x0 * a.cos[i] - x1 * a.sin[i];
        x[i + half] = x0 * a.sin[i] + x1 * a.cos[i];
    }
}

void imrope(float * x, int n_heads, int head_dim, const RopeParams & p, const std::array<int32_t, 4> & pos4) {
    if (p.n_rot > head_dim) throw Error("rope: n_rot " + std::to_string(p.n_rot) + " exceeds head size");
    const RopeAngles a = rope_angles(p, pos4);
    for (int h = 0; h < n_heads; ++h) rope_apply(x + static_cast<size_t>(h) * head_dim, p.n_rot, a);
}

}  // namespace offgrid::ops
