// Reading a tokenizer from the tokenizer.ggml.* keys of a GGUF file.
#include <cstdint>

#include "common/error.h"
#include "gguf/reader.h"
#include "runtime/tokenizer.h"

namespace offgrid::runtime {


namespace {

const gguf::Value * find_array(const gguf::Reader & reader, std::string_view key, gguf::ValueType elem,
                               bool integer_elems, bool required) {
    const gguf::Value * v = reader.find(key);
    if (!v) {
        if (required) throw Error(reader.path() + ": " + std::string(key) + ": missing");
        return nullptr;
    }
    const bool elems_ok = integer_elems ? (v->type == gguf::ValueType::ARRAY && (v->array.empty() ||
                                                                                 v->array.front().is_integer()))
                                        : (v->type == gguf::ValueType::ARRAY && v->elem_type == elem);
    if (!elems_ok) {
        throw Error(reader.path() + ": " + std::string(key) + ": expected an array of " +
                    (integer_elems ? std::string("integers") : std::string(gguf::value_type_name(elem))) +
                    ", found " + gguf::value_type_name(v->type) +
                    (v->type == gguf::ValueType::ARRAY ? std::string(" of ") + gguf::value_type_name(v->elem_type)
                                                       : std::string()));
    }
    return v;
}

int64_t integer_of(const gguf::Value & v) {
    switch (v.type) {
        case gguf::ValueType::I8:
        case gguf::ValueType::I16:
        case gguf::ValueType::I32:
        case gguf::ValueType::I64:
            return v.i;
        default:
            return v.u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(v.u);
    }
}

std::optional<TokenId> optional_id(const gguf::Reader & reader, std::string_view key) {
    const gguf::Value * v = reader.find(key);
    if (!v) return std::nullopt;
    if (!v->is_integer()) {
        throw Error(reader.path() + ": " + std::string(key) + ": expected an integer, found " +
                    gguf::value_type_name(v->type));
    }
    const int64_t id = integer_of(*v);
    if (id < 0 || id > INT32_MAX) {
        throw Error(reader.path() + ": " + std::string(key) + ": token id " + std::to_string(id) + " is out of range");
    }
    return static_cast<TokenId>(id);
}

}  // namespace

TokenizerSpec Tokenizer::spec_from_gguf(const gguf::Reader & reader) {
    TokenizerSpec spec;
    const gguf::Value * model = reader.find("tokenizer.ggml.model");
    if (!model) throw Error(reader.path() + ": no tokenizer in the file (tokenizer.ggml.model is missing)");
    spec.model = reader.get_string("tokenizer.ggml.model");
    const gguf::Value * pre = reader.find("tokenizer.ggml.pre");
    spec.pre = pre ? reader.get_string("tokenizer.ggml.pre") : std::string("default");

    const gguf::Value * tokens =
        find_array(reader, "tokenizer.ggml.tokens", gguf::ValueType::STRING, false, true);
    spec.tokens.reserve(tokens->array.size());
    for (const auto & t : tokens->array) spec.tokens.push_back(t.s);

    if (const gguf::Value * types =
            find_array(reader, "tokenizer.ggml.token_type", gguf::ValueType::I32, true, false)) {
        spec.token_types.reserve(types->array.size());
        for (size_t i = 0; i < types->array.size(); ++i) {
            const int64_t t = integer_of(types->array[i]);
            if (t < INT32_MIN || t > INT32_MAX) {
                throw Error(reader.path() + ": tokenizer.ggml.token_type[" + std::to_string(i) +
                            "]: invalid token type " + std::to_string(t));
            }
            spec.token_types.push_back(static_cast<int32_t>(t));
        }
    }
    if (const gguf::Value * merges =
            find_array(reader, "tokenizer.ggml.merges", gguf::ValueType::STRING, false, false)) {
        spec.merges.reserve(merges->array.size());
        for (const auto & m : merges->array) spec.merges.push_back(m.s);
    }
    spec.bos = optional_id(reader, "tokenizer.ggml.bos_token_id");
    spec.eos = optional_id(reader, "tokenizer.ggml.eos_token_id");
    spec.pad = optional_id(reader, "tokenizer.ggml.padding_token_id");
    return spec;
}

Tokenizer Tokenizer::from_gguf(const gguf::Reader & reader) {
    const TokenizerSpec spec = spec_from_gguf(reader);
    try {
        return Tokenizer(spec);
    } catch (const FileError &) {
        throw;
    } catch (const Error & e) {
        throw Error(reader.path() + ": " + e.what());
    }
}

}  // namespace offgrid::runtime
