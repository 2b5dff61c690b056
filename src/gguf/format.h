// Constants of the GGUF container format shared by the reader and the writer.
#pragma once

#include <cstddef>
#include <cstdint>

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

}  // namespace offgrid::gguf
