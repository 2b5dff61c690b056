// Construction helpers and names of GGUF metadata values.
#include "gguf/value.h"

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
    r.array = std::move(elems);
    return r;
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
