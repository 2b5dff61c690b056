// GGUF files as data: metadata values (scalars, strings and nested arrays) and GgufInfo, the metadata and tensor
// table of a file (`offgrid gguf-info`). Loading a model reads these itself (offgrid/context.h); this header is
// for looking into a file.
//
// Thread safety: Values and GgufInfo are plain data; copies share packed arrays read-only, so any number of
// threads may read them at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace offgrid::gguf {

enum class ValueType : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
    U64 = 10, I64 = 11, F64 = 12,
};

const char * value_type_name(ValueType t);

struct Value;

// The elements of an array value. Arrays of numbers and bools read from a file are kept packed (the file's own
// little-endian bytes, shared between copies), so a large array costs its size in the file and no more; arrays of
// strings and of arrays hold one Value per element. Elements are handed out by value either way.
class ValueArray {
public:
    ValueArray() = default;
    explicit ValueArray(std::vector<Value> elems);
    ValueArray & operator=(std::vector<Value> elems);
    // `bytes` holds count * fixed_value_bytes(elem) bytes of a number or bool type.
    static ValueArray packed(ValueType elem, std::vector<uint8_t> bytes);

    size_t size() const;
    bool empty() const { return size() == 0; }
    Value operator[](size_t i) const;
    Value back() const;
    // Element i by reference, for unpacked arrays (strings, arrays); throws std::out_of_range otherwise.
    const Value & at(size_t i) const;
    operator std::vector<Value>() const;  // every element (callers that want a plain vector)
    bool operator==(const ValueArray & o) const;

    bool is_packed() const { return packed_ != nullptr; }
    std::span<const uint8_t> packed_bytes() const;  // empty unless is_packed()

    class const_iterator {
    public:
        using iterator_category = std::input_iterator_tag;
        using value_type = Value;
        using difference_type = std::ptrdiff_t;
        using pointer = void;
        using reference = Value;
        const_iterator(const ValueArray * a, size_t i) : a_(a), i_(i) {}
        Value operator*() const;
        const_iterator & operator++() {
            ++i_;
            return *this;
        }
        bool operator==(const const_iterator & o) const { return i_ == o.i_; }

    private:
        const ValueArray * a_;
        size_t i_;
    };
    const_iterator begin() const { return {this, 0}; }
    const_iterator end() const { return {this, size()}; }

private:
    std::vector<Value> values_;                          // unpacked elements
    ValueType packed_type_ = ValueType::U8;
    size_t packed_count_ = 0;
    std::shared_ptr<const std::vector<uint8_t>> packed_;  // packed elements
};

// One metadata value. Integers are held widened (u64 for unsigned, i64 for signed and bool), floats as f64,
// with `type` remembering the stored type so a writer gives back the same bytes.
struct Value {
    ValueType type = ValueType::U32;
    uint64_t u = 0;         // U8 U16 U32 U64 BOOL
    int64_t i = 0;          // I8 I16 I32 I64
    double f = 0;           // F32 F64
    std::string s;          // STRING
    ValueType elem_type = ValueType::U8;   // ARRAY: element type
    ValueArray array;                      // ARRAY: elements (each of elem_type)

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

// One entry of a file's tensor table.
struct TensorEntry {
    std::string name;
    std::vector<int64_t> shape;  // ggml order: shape[0] is the contiguous axis
    std::string type;            // "f32", "q8_0", "q4_K", ... as the ecosystem's tools print it
    uint64_t offset = 0;         // relative to the start of the data section
    uint64_t n_bytes = 0;
};

// The header of a GGUF file: everything but the tensor data.
struct GgufInfo {
    std::string path;
    uint32_t version = 0;
    uint64_t file_size = 0;
    uint32_t alignment = 32;     // general.alignment or 32
    uint64_t data_offset = 0;    // start of the tensor data section in the file
    std::vector<KeyValue> metadata;     // in file order
    std::vector<TensorEntry> tensors;   // in file order

    // Maps and validates the file (every check a model load makes on the container). Throws FileError naming the
    // file, the byte offset and the field.
    static GgufInfo read(const std::string & path);
};

}  // namespace offgrid::gguf
