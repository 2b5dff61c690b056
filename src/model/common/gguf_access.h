// Checked access to a GGUF file for architecture loaders: metadata keys (Keys) and weight tensors
// (TensorLoader), with errors that name the file and the key or tensor. Shared by every architecture.
#pragma once

#include <algorithm>
#include <climits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "gguf/reader.h"
#include "ops/matmul.h"
#include "tensor/types.h"

namespace offgrid::model::common {

using gguf::Value;
using gguf::ValueType;
using gguf::TensorInfo;

// Typed access to an architecture's keys (`prefix` = "<arch>.") with errors that name the file and the key.
class Keys {
public:
    Keys(const gguf::Reader & r, std::string prefix) : r_(r), prefix_(std::move(prefix)) {}

    std::string full(std::string_view name) const { return prefix_ + std::string(name); }

    [[noreturn]] void fail(std::string_view name, const std::string & what) const {
        throw Error(r_.path() + ": key " + full(name) + ": " + what);
    }

    uint32_t u32(std::string_view name) const { return r_.get_u32(full(name)); }
    std::optional<uint32_t> u32_opt(std::string_view name) const { return r_.get_u32_opt(full(name)); }
    float f32(std::string_view name) const { return r_.get_f32(full(name)); }
    std::optional<float> f32_opt(std::string_view name) const { return r_.get_f32_opt(full(name)); }
    const Value * find(std::string_view name) const { return r_.find(full(name)); }

    uint32_t positive(std::string_view name) const {
        const uint32_t v = u32(name);
        if (v == 0) fail(name, "must be > 0");
        return v;
    }

    int64_t integer(std::string_view name, const Value & v) const {
        switch (v.type) {
            case ValueType::U8: case ValueType::U16: case ValueType::U32: case ValueType::U64:
                if (v.u > static_cast<uint64_t>(INT64_MAX)) fail(name, "value too large");
                return static_cast<int64_t>(v.u);
            case ValueType::I8: case ValueType::I16: case ValueType::I32: case ValueType::I64:
                return v.i;
            case ValueType::BOOL:
                return (v.u != 0 || v.i != 0) ? 1 : 0;
            default:
                fail(name, std::string("expected an integer, found ") + gguf::value_type_name(v.type));
        }
    }

    // An integer scalar or an array of integers; nullopt when absent.
    std::optional<std::vector<int64_t>> ints(std::string_view name) const {
        const Value * v = find(name);
        if (!v) return std::nullopt;
        std::vector<int64_t> out;
        if (v->type == ValueType::ARRAY) {
            out.reserve(v->array.size());
            for (const Value & e : v->array) out.push_back(integer(name, e));
        } else {
            out.push_back(integer(name, *v));
        }
        return out;
    }

    // A per-layer value: a scalar (repeated) or an array with one entry per layer.
    std::optional<std::vector<int64_t>> per_layer(std::string_view name, uint32_t n_layer_all) const {
        auto v = ints(name);
        if (!v) return v;
        const Value * raw = find(name);
        if (raw->type != ValueType::ARRAY) return std::vector<int64_t>(n_layer_all, (*v)[0]);
        if (v->size() != n_layer_all) {
            fail(name, "has " + std::to_string(v->size()) + " entries, expected one per layer (" +
                           std::to_string(n_layer_all) + ")");
        }
        return v;
    }

    // A per-layer value that this engine needs to be the same on every layer; layer 0's value is used when
    // `first_only` (the reference reads only layer 0 for those keys).
    std::optional<uint32_t> uniform(std::string_view name, uint32_t n_layer_all, bool first_only) const {
        auto v = per_layer(name, n_layer_all);
        if (!v) return std::nullopt;
        for (int64_t x : *v) {
            if (x < 0 || x > UINT32_MAX) fail(name, "value " + std::to_string(x) + " out of range");
            if (!first_only && x != (*v)[0]) fail(name, "differs between layers (not supported)");
        }
        return static_cast<uint32_t>((*v)[0]);
    }

    // A per-layer float: a scalar (repeated) or an array with one entry per layer; nullopt when absent.
    std::optional<std::vector<float>> floats_per_layer(std::string_view name, uint32_t n_layer_all) const {
        const Value * v = find(name);
        if (!v) return std::nullopt;
        auto one = [&](const Value & e) -> float {
            if (e.type != ValueType::F32 && e.type != ValueType::F64) {
                fail(name, std::string("expected a float, found ") + gguf::value_type_name(e.type));
            }
            return static_cast<float>(e.f);
        };
        if (v->type != ValueType::ARRAY) return std::vector<float>(n_layer_all, one(*v));
        if (v->array.size() != n_layer_all) {
            fail(name, "has " + std::to_string(v->array.size()) + " entries, expected one per layer (" +
                           std::to_string(n_layer_all) + ")");
        }
        std::vector<float> out;
        for (const Value & e : v->array) out.push_back(one(e));
        return out;
    }

    bool boolean_opt(std::string_view name, bool fallback) const {
        const Value * v = find(name);
        if (!v) return fallback;
        if (v->type != ValueType::BOOL) fail(name, std::string("expected a bool, found ") + gguf::value_type_name(v->type));
        return v->u != 0 || v->i != 0;
    }

private:
    const gguf::Reader & r_;
    std::string prefix_;
};

// The layer of a tensor named blk.<il>.*; nullopt for a tensor outside the layers.
inline std::optional<uint32_t> layer_of(std::string_view name) {
    if (name.rfind("blk.", 0) != 0) return std::nullopt;
    uint64_t il = 0;
    size_t k = 4;
    for (; k < name.size() && name[k] >= '0' && name[k] <= '9' && il <= UINT32_MAX; ++k) il = il * 10 + (name[k] - '0');
    if (k == 4 || k >= name.size() || name[k] != '.' || il > UINT32_MAX) return std::nullopt;
    return static_cast<uint32_t>(il);
}

inline std::string shape_str(const std::vector<int64_t> & ne) {
    std::string s = "{";
    for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "}";
}

inline std::vector<int64_t> trimmed(std::vector<int64_t> ne) {
    while (ne.size() > 1 && ne.back() == 1) ne.pop_back();
    return ne;
}

class TensorLoader {
public:
    explicit TensorLoader(const gguf::Reader & r) : r_(r) {}

    [[noreturn]] void fail(const std::string & name, const std::string & what) const {
        throw Error(r_.path() + ": tensor " + name + ": " + what);
    }

    const TensorInfo * find(const std::string & name) const { return r_.find_tensor(name); }

    const TensorInfo & require(const std::string & name) const {
        const TensorInfo * t = find(name);
        if (!t) fail(name, "missing");
        return *t;
    }

    void check_shape(const TensorInfo & t, std::vector<int64_t> want) const {
        if (trimmed(t.ne) != trimmed(want)) {
            fail(t.name, "shape " + shape_str(t.ne) + ", expected " + shape_str(want));
        }
    }

    ops::Matrix view(const TensorInfo & t, int64_t cols, int64_t rows) const {
        // Any type dequantize_row reads may hold any matrix (real files mix them); the matrix stays in place in
        // the mapping and the kernels read its blocks directly.
        if (!ops::supported_weight_type(t.type)) {
            fail(t.name, "element type " + std::string(tensor::traits(t.type).name) +
                             " is not supported (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_K q3_K q4_K q5_K q6_K "
                             "iq4_nl iq4_xs)");
        }
        const uint32_t block = tensor::traits(t.type).block_size;
        if (cols % block != 0) {
            fail(t.name, std::string(tensor::traits(t.type).name) + " rows must be a multiple of " +
                             std::to_string(block) + " wide");
        }
        ops::Matrix m = ops::make_matrix(t.type, t.data, cols, rows);
        if (m.row_bytes * static_cast<uint64_t>(rows) > t.n_bytes || t.data == nullptr) {
            fail(t.name, "data is shorter than its shape needs");
        }
        return m;
    }

    // A 2-D weight {cols, rows}, or a stack {cols, rows, n_stack} viewed as rows * n_stack rows.
    ops::Matrix matrix(const std::string & name, int64_t cols, int64_t rows, int64_t n_stack = 1) const {
        const TensorInfo & t = require(name);
        if (n_stack == 1) {
            check_shape(t, {cols, rows});
        } else {
            check_shape(t, {cols, rows, n_stack});
        }
        return view(t, cols, rows * n_stack);
    }

    // Any tensor of n elements, converted to F32. When `shape` is given it must match; otherwise any
    // layout with n elements is accepted (the spec allows reshaped norm gammas).
    std::vector<float> floats(const TensorInfo & t, int64_t n, const std::vector<int64_t> * shape = nullptr) const {
        if (shape) {
            check_shape(t, *shape);
        } else if (t.n_elements() != n) {
            fail(t.name, "has " + std::to_string(t.n_elements()) + " elements, expected " + std::to_string(n));
        }
        const ops::Matrix m = view(t, n, 1);
        std::vector<float> out(n);
        ops::dequantize_matrix_row(m, 0, out.data());
        return out;
    }

    std::vector<float> vec(const std::string & name, int64_t n) const {
        const std::vector<int64_t> shape{n};
        return floats(require(name), n, &shape);
    }

    std::vector<float> any_layout(const std::string & name, int64_t n) const { return floats(require(name), n); }

    // Optional `.scale` sidecar of one element; 1 when absent.
    float scale(const std::string & name) const {
        const TensorInfo * t = find(name);
        if (!t) return 1.0f;
        return floats(*t, 1)[0];
    }

    std::vector<float> expert_scale(const std::string & name, int64_t n_expert) const {
        const TensorInfo * t = find(name);
        if (!t) return std::vector<float>(n_expert, 1.0f);
        return floats(*t, n_expert);
    }

private:
    const gguf::Reader & r_;
};

}  // namespace offgrid::model::common
