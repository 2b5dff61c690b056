// What every architecture's model generator (`offgrid gen-model`) shares: the seeded random numbers its weights
// are drawn from, and the checks and messages of its settings. The numbers are plain integer and double
// arithmetic, so a generated file is bit-identical on every platform and compiler.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "tensor/types.h"

namespace offgrid::model::common {

// splitmix64, with an approximately N(0, 1) draw: a centred sum of four uniforms scaled to unit variance (no
// libm, no std:: distributions).
class GenRng {
public:
    explicit GenRng(uint64_t seed) : state_(seed) {}
    uint64_t next() {
        uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
    float normal() {
        const double s = uniform() + uniform() + uniform() + uniform() - 2.0;
        return static_cast<float>(s * 1.7320508075688772);
    }

private:
    uint64_t state_;
};

// FNV-1a 64 of a tensor name: seeds each tensor on its own, so its values do not depend on the others.
inline uint64_t gen_name_hash(std::string_view s) {
    uint64_t h = 1469598103934665603ull;
    for (const char c : s) {
        h ^= static_cast<uint8_t>(c);
        h *= 1099511628211ull;
    }
    return h;
}

[[noreturn]] inline void bad_setting(const std::string & field, const std::string & what) {
    throw Error("model settings: " + field + ": " + what);
}

inline void check_setting_range(const char * field, uint64_t v, uint64_t lo, uint64_t hi) {
    if (v < lo || v > hi) {
        bad_setting(field, std::to_string(v) + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
    }
}

// The weight types a generator writes directly (others come from llama-quantize).
inline void check_gen_weight_type(tensor::ElemType t) {
    using tensor::ElemType;
    if (t != ElemType::F32 && t != ElemType::F16 && t != ElemType::BF16 && t != ElemType::Q8_0) {
        bad_setting("weight type", "must be f32, f16, bf16 or q8_0");
    }
}

// The weight type a generator's --type names.
inline tensor::ElemType gen_weight_type(const std::string & name) {
    using tensor::ElemType;
    if (name == "f32") return ElemType::F32;
    if (name == "f16") return ElemType::F16;
    if (name == "bf16") return ElemType::BF16;
    if (name == "q8_0") return ElemType::Q8_0;
    throw Error("--type: '" + name + "' is not one of f32, f16, bf16, q8_0");
}

[[noreturn]] inline void unknown_preset(const std::string & name, const std::vector<std::string> & names) {
    std::string list;
    for (const auto & n : names) list += (list.empty() ? "" : ", ") + n;
    throw Error("unknown preset '" + name + "' (" + list + ")");
}

}  // namespace offgrid::model::common
