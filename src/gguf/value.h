// GGUF metadata values: scalars, strings and (nested) arrays.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace offgrid::gguf {

enum class ValueType : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
    U64 = 10, I64 = 11, F64 = 12,
};

const char * value_type_name(ValueType t);

// One metadata value. Integers are held widened (u64 for unsigned, i64 for signed and bool), floats as f64,
// with `type` remembering the stored type so a writer gives back the same bytes.
struct Value {
    ValueType type = ValueType::U32;
    uint64_t u = 0;         // U8 U16 U32 U64 BOOL
    int64_t i = 0;          // I8 I16 I32 I64
    double f = 0;           // F32 F64
    std::string s;          // STRING
    ValueType elem_type = ValueType::U8;   // ARRAY: element type
    std::vector<Value> array;              // ARRAY: elements (each of elem_type)

    static Value make_u32(uint32_t v);
    static Value make_i32(int32_t v);
    static Value make_u64(uint64_t v);
    static Value make_f32(float v);
    static Value make_bool(bool v);
    static Value make_string(std::string v);
    static Value make_array(ValueType elem_type, std::vector<Value> elems);

    bool is_integer() const;
    bool operator==(const Value &) const = default;
};

struct KeyValue {
    std::string key;
    Value value;
};

}  // namespace offgrid::gguf
