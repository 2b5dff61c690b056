// Test helper: writes small GGUF v3 files in memory (metadata and tensors), so tests can build random-weight
// qwen4exp models with chosen shapes, types and defects.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ops/half.h"
#include "tensor/types.h"

namespace offgrid::test {

class GgufBuilder {
public:
    enum class T : uint32_t { U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9, U64 = 10 };

    void set_u32(const std::string & k, uint32_t v) { put(k, T::U32, bytes_of(v)); }
    void set_i32(const std::string & k, int32_t v) { put(k, T::I32, bytes_of(v)); }
    void set_f32(const std::string & k, float v) { put(k, T::F32, bytes_of(v)); }
    void set_string(const std::string & k, const std::string & v) { put(k, T::STRING, str(v)); }
    template <typename E>
    void set_array(const std::string & k, T elem, const std::vector<E> & v) {
        std::vector<uint8_t> b = bytes_of(static_cast<uint32_t>(elem));
        append(b, bytes_of(static_cast<uint64_t>(v.size())));
        for (const E & e : v) append(b, bytes_of(e));
        put(k, T::ARRAY, b);
    }
    void remove(const std::string & k) {
        for (size_t i = 0; i < kv_.size(); ++i) {
            if (kv_[i].key == k) kv_.erase(kv_.begin() + i);
        }
    }

    // A tensor from floats, stored as F32, F16, BF16 or Q8_0.
    void add_tensor(const std::string & name, std::vector<int64_t> ne, const std::vector<float> & v,
                    tensor::ElemType type = tensor::ElemType::F32) {
        std::vector<uint8_t> data;
        if (type == tensor::ElemType::F32) {
            data.resize(4 * v.size());
            std::memcpy(data.data(), v.data(), data.size());
        } else if (type == tensor::ElemType::F16 || type == tensor::ElemType::BF16) {
            for (float x : v) append(data, bytes_of(type == tensor::ElemType::F16 ? ops::float_to_half(x) : ops::float_to_bf16(x)));
        } else if (type == tensor::ElemType::Q8_0) {
            for (size_t b = 0; b < v.size() / 32; ++b) {
                float amax = 0;
                for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[b * 32 + i]));
                const float d = amax / 127.0f;
                append(data, bytes_of(ops::float_to_half(d)));
                for (int i = 0; i < 32; ++i) {
                    const int q = d == 0 ? 0 : static_cast<int>(std::lround(v[b * 32 + i] / d));
                    data.push_back(static_cast<uint8_t>(static_cast<int8_t>(q)));
                }
            }
        } else {
            data.assign(v.size(), 0);  // raw placeholder bytes for types the model must reject
        }
        add_raw(name, std::move(ne), type, std::move(data));
    }
    void add_raw(const std::string & name, std::vector<int64_t> ne, tensor::ElemType type, std::vector<uint8_t> data) {
        remove_tensor(name);
        tensors_.push_back({name, std::move(ne), type, std::move(data)});
    }
    void remove_tensor(const std::string & name) {
        for (size_t i = 0; i < tensors_.size(); ++i) {
            if (tensors_[i].name == name) tensors_.erase(tensors_.begin() + i);
        }
    }
    bool has_tensor(const std::string & name) const {
        for (const auto & t : tensors_) if (t.name == name) return true;
        return false;
    }

    std::vector<uint8_t> build() const {
        std::vector<uint8_t> out;
        append(out, std::vector<uint8_t>{'G', 'G', 'U', 'F'});
        append(out, bytes_of(uint32_t(3)));
        append(out, bytes_of(uint64_t(tensors_.size())));
        append(out, bytes_of(uint64_t(kv_.size())));
        for (const auto & kv : kv_) {
            append(out, str(kv.key));
            append(out, bytes_of(static_cast<uint32_t>(kv.type)));
            append(out, kv.value);
        }
        uint64_t offset = 0;
        std::vector<uint64_t> offsets;
        for (const auto & t : tensors_) {
            append(out, str(t.name));
            append(out, bytes_of(uint32_t(t.ne.size())));
            for (int64_t n : t.ne) append(out, bytes_of(uint64_t(n)));
            append(out, bytes_of(static_cast<uint32_t>(t.type)));
            append(out, bytes_of(offset));
            offsets.push_back(offset);
            offset += (t.data.size() + 31) / 32 * 32;
        }
        while (out.size() % 32) out.push_back(0);
        for (const auto & t : tensors_) {
            append(out, t.data);
            while (out.size() % 32) out.push_back(0);
        }
        return out;
    }

private:
    struct Kv {
        std::string key;
        T type;
        std::vector<uint8_t> value;
    };
    struct Tensor {
        std::string name;
        std::vector<int64_t> ne;
        tensor::ElemType type;
        std::vector<uint8_t> data;
    };
    template <typename V>
    static std::vector<uint8_t> bytes_of(const V & v) {
        std::vector<uint8_t> b(sizeof(V));
        std::memcpy(b.data(), &v, sizeof(V));
        return b;
    }
    static std::vector<uint8_t> str(const std::string & s) {
        std::vector<uint8_t> b(8 + s.size());  // one allocation: GCC 12 warns (falsely) on a growing insert
        const uint64_t n = s.size();
        std::memcpy(b.data(), &n, 8);
        std::memcpy(b.data() + 8, s.data(), s.size());
        return b;
    }
    static void append(std::vector<uint8_t> & a, const std::vector<uint8_t> & b) { a.insert(a.end(), b.begin(), b.end()); }
    void put(const std::string & k, T type, std::vector<uint8_t> v) {
        for (auto & kv : kv_) {
            if (kv.key == k) {
                kv.type = type;
                kv.value = std::move(v);
                return;
            }
        }
        kv_.push_back({k, type, std::move(v)});
    }
    std::vector<Kv> kv_;
    std::vector<Tensor> tensors_;
};

}  // namespace offgrid::test
