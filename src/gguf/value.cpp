// Construction helpers and names of GGUF metadata values.
#include "gguf/value.h"

#include <cstring>
#include <stdexcept>

#include "gguf/format.h"

namespace offgrid::gguf {

const char * value_type_name(ValueType t) {
    switch (t) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
    }
    return "unknown";
}

Value Value::make_u32(uint32_t v) {
    Value r;
    r.type = ValueType::U32;
    r.u = v;
    return r;
}

Value Value::make_i32(int32_t v) {
    Value r;
    r.type = ValueType::I32;
    r.i = v;
    return r;
}

Value Value::make_u64(uint64_t v) {
    Value r;
    r.type = ValueType::U64;
    r.u = v;
    return r;
}

Value Value::make_f32(float v) {
    Value r;
    r.type = ValueType::F32;
    r.f = v;
    return r;
}

Value Value::make_bool(bool v) {
    Value r;
    r.type = ValueType::BOOL;
    r.u = v ? 1 : 0;
    return r;
}

Value Value::make_string(std::string v) {
    Value r;
    r.type = ValueType::STRING;
    r.s = std::move(v);
    return r;
}

Value Value::make_array(ValueType elem_type, std::vector<Value> elems) {
    Value r;
    r.type = ValueType::ARRAY;
    r.elem_type = elem_type;
    r.array = ValueArray(std::move(elems));
    return r;
}

ValueArray::ValueArray(std::vector<Value> elems) : values_(std::move(elems)) {}

ValueArray & ValueArray::operator=(std::vector<Value> elems) {
    values_ = std::move(elems);
    packed_.reset();
    packed_count_ = 0;
    return *this;
}

ValueArray ValueArray::packed(ValueType elem, std::vector<uint8_t> bytes) {
    ValueArray a;
    const size_t width = fixed_value_bytes(elem);
    a.packed_type_ = elem;
    a.packed_count_ = width > 0 ? bytes.size() / width : 0;
    a.packed_ = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
    return a;
}

size_t ValueArray::size() const { return packed_ ? packed_count_ : values_.size(); }

std::span<const uint8_t> ValueArray::packed_bytes() const {
    if (!packed_) return {};
    return {packed_->data(), packed_->size()};
}

Value ValueArray::operator[](size_t i) const {
    if (!packed_) return values_[i];
    const uint8_t * p = packed_->data() + i * fixed_value_bytes(packed_type_);
    auto get = [p](auto v) {
        std::memcpy(&v, p, sizeof v);
        return v;
    };
    Value v;
    v.type = packed_type_;
    switch (packed_type_) {
    case ValueType::U8: v.u = get(uint8_t{}); break;
    case ValueType::I8: v.i = get(int8_t{}); break;
    case ValueType::U16: v.u = get(uint16_t{}); break;
    case ValueType::I16: v.i = get(int16_t{}); break;
    case ValueType::U32: v.u = get(uint32_t{}); break;
    case ValueType::I32: v.i = get(int32_t{}); break;
    case ValueType::U64: v.u = get(uint64_t{}); break;
    case ValueType::I64: v.i = get(int64_t{}); break;
    case ValueType::F32: v.f = get(float{}); break;
    case ValueType::F64: v.f = get(double{}); break;
    case ValueType::BOOL: v.u = get(uint8_t{}); break;
    case ValueType::STRING:
    case ValueType::ARRAY: break;  // never packed
    }
    return v;
}

Value ValueArray::back() const { return (*this)[size() - 1]; }

const Value & ValueArray::at(size_t i) const {
    if (packed_) throw std::out_of_range("ValueArray::at: a packed array has no Value elements");
    return values_.at(i);
}

Value ValueArray::const_iterator::operator*() const { return (*a_)[i_]; }

ValueArray::operator std::vector<Value>() const {
    if (!packed_) return values_;
    std::vector<Value> out;
    out.reserve(size());
    for (size_t i = 0; i < size(); ++i) out.push_back((*this)[i]);
    return out;
}

bool ValueArray::operator==(const ValueArray & o) const {
    if (packed_ && o.packed_ && packed_type_ == o.packed_type_) return *packed_ == *o.packed_;
    if (!packed_ && !o.packed_) return values_ == o.values_;
    if (size() != o.size()) return false;
    for (size_t i = 0; i < size(); ++i) {
        if (!((*this)[i] == o[i])) return false;
    }
    return true;
}

bool Value::is_integer() const {
    switch (type) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::U16:
    case ValueType::I16:
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::U64:
    case ValueType::I64:
        return true;
    default:
        return false;
    }
}

}  // namespace offgrid::gguf
