// The tokenizer.ggml.* metadata: reading a TokenizerSpec from a GGUF file (or a key/value list) and writing one
// back as key/values.
#include <cstdint>
#include <functional>

#include "common/error.h"
#include "gguf/reader.h"
#include "model/architecture.h"
#include "offgrid/context.h"
#include "runtime/tokenizer.h"

namespace offgrid::runtime {

namespace {

using gguf::Value;
using gguf::ValueType;
using Lookup = std::function<const Value *(std::string_view)>;

bool is_integer_type(ValueType t) {
    switch (t) {
        case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16:
        case ValueType::U32: case ValueType::I32: case ValueType::U64: case ValueType::I64:
            return true;
        default:
            return false;
    }
}

int64_t integer_of(const Value & v) {
    switch (v.type) {
        case ValueType::I8: case ValueType::I16: case ValueType::I32: case ValueType::I64:
            return v.i;
        default:
            return v.u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(v.u);
    }
}

std::string type_text(const Value & v) {
    std::string s = gguf::value_type_name(v.type);
    if (v.type == ValueType::ARRAY) s += std::string(" of ") + gguf::value_type_name(v.elem_type);
    return s;
}

class MetadataReader {
public:
    MetadataReader(Lookup find, std::string source) : find_(std::move(find)), source_(std::move(source)) {}

    [[noreturn]] void fail(std::string_view key, const std::string & what) const {
        throw Error(source_ + ": " + std::string(key) + ": " + what);
    }

    const Value * find(std::string_view key) const { return find_(key); }

    std::optional<std::string> string(std::string_view key) const {
        const Value * v = find_(key);
        if (!v) return std::nullopt;
        if (v->type != ValueType::STRING) fail(key, "expected a string, found " + type_text(*v));
        return v->s;
    }

    // nullptr when absent; throws when present with other elements.
    const Value * array(std::string_view key, bool integers) const {
        const Value * v = find_(key);
        if (!v) return nullptr;
        const bool ok = v->type == ValueType::ARRAY &&
                        (integers ? is_integer_type(v->elem_type) : v->elem_type == ValueType::STRING);
        if (!ok) fail(key, std::string("expected an array of ") + (integers ? "integers" : "strings") +
                               ", found " + type_text(*v));
        return v;
    }

    std::optional<TokenId> token_id(std::string_view key) const {
        const Value * v = find_(key);
        if (!v) return std::nullopt;
        if (!is_integer_type(v->type)) fail(key, "expected an integer, found " + type_text(*v));
        const int64_t id = integer_of(*v);
        if (id < 0 || id > INT32_MAX) fail(key, "token id " + std::to_string(id) + " is out of range");
        return static_cast<TokenId>(id);
    }

    std::optional<bool> boolean(std::string_view key) const {
        const Value * v = find_(key);
        if (!v) return std::nullopt;
        if (v->type != ValueType::BOOL) fail(key, "expected a bool, found " + type_text(*v));
        return v->u != 0;
    }

    const std::string & source() const { return source_; }

private:
    Lookup find_;
    std::string source_;
};

TokenizerSpec read_spec(const MetadataReader & md) {
    TokenizerSpec spec;
    const auto model = md.string("tokenizer.ggml.model");
    if (!model) throw Error(md.source() + ": no tokenizer in the file (tokenizer.ggml.model is missing)");
    spec.model = *model;
    // llama.cpp calls a missing pre-tokenizer "default"; the constructor rejects it with the other unknowns.
    spec.pre = md.string("tokenizer.ggml.pre").value_or("default");

    const Value * tokens = md.array("tokenizer.ggml.tokens", false);
    if (!tokens) md.fail("tokenizer.ggml.tokens", "missing");
    spec.tokens.reserve(tokens->array.size());
    for (const auto & t : tokens->array) spec.tokens.push_back(t.s);

    if (const Value * types = md.array("tokenizer.ggml.token_type", true)) {
        spec.token_types.reserve(types->array.size());
        for (size_t i = 0; i < types->array.size(); ++i) {
            const int64_t t = integer_of(types->array[i]);
            if (t < INT32_MIN || t > INT32_MAX) {
                md.fail("tokenizer.ggml.token_type[" + std::to_string(i) + "]",
                        "invalid token type " + std::to_string(t));
            }
            spec.token_types.push_back(static_cast<int32_t>(t));
        }
    }
    if (const Value * merges = md.array("tokenizer.ggml.merges", false)) {
        spec.merges.reserve(merges->array.size());
        for (const auto & m : merges->array) spec.merges.push_back(m.s);
    }
    spec.bos = md.token_id("tokenizer.ggml.bos_token_id");
    spec.eos = md.token_id("tokenizer.ggml.eos_token_id");
    spec.pad = md.token_id("tokenizer.ggml.padding_token_id");
    spec.add_bos = md.boolean("tokenizer.ggml.add_bos_token");
    return spec;
}

Value string_value(const std::string & s) {
    Value v;
    v.type = ValueType::STRING;
    v.s = s;
    return v;
}

Value array_value(ValueType elem, std::vector<Value> elems) {
    Value v;
    v.type = ValueType::ARRAY;
    v.elem_type = elem;
    v.array = std::move(elems);
    return v;
}

Value u32_value(uint32_t x) {
    Value v;
    v.type = ValueType::U32;
    v.u = x;
    return v;
}

Value i32_value(int32_t x) {
    Value v;
    v.type = ValueType::I32;
    v.i = x;
    return v;
}

}  // namespace

TokenizerSpec Tokenizer::spec_from_gguf(const gguf::Reader & reader) {
    return read_spec(MetadataReader([&](std::string_view key) { return reader.find(key); }, reader.path()));
}

TokenizerSpec spec_from_metadata(std::span<const gguf::KeyValue> metadata, const std::string & source) {
    const auto find = [&](std::string_view key) -> const Value * {
        for (const auto & kv : metadata) {
            if (kv.key == key) return &kv.value;
        }
        return nullptr;
    };
    return read_spec(MetadataReader(find, source));
}

Tokenizer Tokenizer::from_gguf(const gguf::Reader & reader) {
    const TokenizerSpec spec = spec_from_gguf(reader);
    try {
        return Tokenizer(spec);
    } catch (const Error & e) {
        throw Error(reader.path() + ": " + e.what());
    }
}

Tokenizer Tokenizer::from_model(const offgrid::Model & model) { return from_gguf(model.impl().reader()); }

std::vector<gguf::KeyValue> tokenizer_metadata(const TokenizerSpec & spec) {
    if (!spec.token_types.empty() && spec.token_types.size() != spec.tokens.size()) {
        throw Error("tokenizer.ggml.token_type: " + std::to_string(spec.token_types.size()) + " types for " +
                    std::to_string(spec.tokens.size()) + " tokens");
    }
    std::vector<gguf::KeyValue> out;
    out.push_back({"tokenizer.ggml.model", string_value(spec.model)});
    out.push_back({"tokenizer.ggml.pre", string_value(spec.pre)});
    std::vector<Value> tokens;
    tokens.reserve(spec.tokens.size());
    for (const auto & t : spec.tokens) tokens.push_back(string_value(t));
    out.push_back({"tokenizer.ggml.tokens", array_value(ValueType::STRING, std::move(tokens))});
    std::vector<Value> types;
    types.reserve(spec.tokens.size());
    for (size_t i = 0; i < spec.tokens.size(); ++i) {
        types.push_back(i32_value(spec.token_types.empty() ? static_cast<int32_t>(TokenType::Normal)
                                                           : spec.token_types[i]));
    }
    out.push_back({"tokenizer.ggml.token_type", array_value(ValueType::I32, std::move(types))});
    std::vector<Value> merges;
    merges.reserve(spec.merges.size());
    for (const auto & m : spec.merges) merges.push_back(string_value(m));
    out.push_back({"tokenizer.ggml.merges", array_value(ValueType::STRING, std::move(merges))});
    const auto id = [&](const char * key, std::optional<TokenId> v) {
        if (v) out.push_back({key, u32_value(static_cast<uint32_t>(*v))});
    };
    id("tokenizer.ggml.bos_token_id", spec.bos);
    id("tokenizer.ggml.eos_token_id", spec.eos);
    id("tokenizer.ggml.padding_token_id", spec.pad);
    if (spec.add_bos) {
        Value v;
        v.type = ValueType::BOOL;
        v.u = *spec.add_bos ? 1 : 0;
        out.push_back({"tokenizer.ggml.add_bos_token", v});
    }
    return out;
}

}  // namespace offgrid::runtime
