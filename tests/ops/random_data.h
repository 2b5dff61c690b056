// Test inputs shared by the ops tests: normally distributed floats, the same for a seed on every platform run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace offgrid::ops::test_data {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (auto & x : v) x = dist(rng);
    return v;
}

}  // namespace offgrid::ops::test_data
