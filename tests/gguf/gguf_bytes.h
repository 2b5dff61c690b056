// A little-endian byte builder for hand-made GGUF files in tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace offgrid::test {

struct GgufBytes {
    std::vector<uint8_t> b;

    size_t size() const { return b.size(); }

    template <class T>
    GgufBytes & put(T v) {
        uint8_t raw[sizeof(T)];
        std::memcpy(raw, &v, sizeof(T));
        b.insert(b.end(), raw, raw + sizeof(T));
        return *this;
    }
    GgufBytes & u8(uint8_t v) { return put(v); }
    GgufBytes & u32(uint32_t v) { return put(v); }
    GgufBytes & u64(uint64_t v) { return put(v); }
    GgufBytes & f32(float v) { return put(v); }
    GgufBytes & raw(std::string_view s) {
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
    GgufBytes & str(std::string_view s) { return u64(s.size()).raw(s); }
    GgufBytes & zeros(size_t n) {
        b.insert(b.end(), n, 0);
        return *this;
    }
    GgufBytes & pad_to(size_t alignment) { return zeros((alignment - b.size() % alignment) % alignment); }

    // "GGUF", version, tensor count, key-value count.
    GgufBytes & header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
    }
    // Key and value type; the caller appends the value.
    GgufBytes & key(std::string_view k, uint32_t type) { return str(k).u32(type); }
    // A tensor info: name, n_dims, dims, type id, offset.
    GgufBytes & tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
        str(name).u32(static_cast<uint32_t>(ne.size()));
        for (uint64_t d : ne) u64(d);
        return u32(type).u64(offset);
    }
};

}  // namespace offgrid::test
