// Constants of the GGUF container format shared by the reader and the writer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/value.h"

namespace offgrid::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint32_t kVersion = 3;
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr const char * kKeyAlignment = "general.alignment";
inline constexpr uint32_t kMaxDims = 4;
// Arrays may contain arrays, to this many levels in all (a plain array is level 1).
inline constexpr int kMaxArrayDepth = 8;
// Smallest encodings: name length + n_dims + one dimension + type + offset; key length + type + one byte.
inline constexpr size_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
inline constexpr size_t kMinKeyValueBytes = 8 + 4 + 1;

// Bytes of one value of a fixed-size type (integers, floats, bool); 0 for strings and arrays, whose size
// depends on their content.
inline constexpr size_t fixed_value_bytes(ValueType type) {
    switch (type) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::STRING: case ValueType::ARRAY: return 0;
    }
    return 0;
}

}  // namespace offgrid::gguf
