// GGUF v3 writer: metadata of every value type and tensors laid out in order, each starting at a multiple of
// the alignment (zero padding), as the ecosystem's writers do. Reading a file and writing it back with the
// same metadata and tensors in the same order gives back the same bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/value.h"
#include "tensor/types.h"

namespace offgrid::gguf {

class Reader;

class Writer {
public:
    Writer() = default;

    // A writer holding a read file's metadata (in order) and views of its tensors (the Reader must outlive
    // the writer).
    static Writer from_reader(const Reader & reader);

    // Metadata. Setting an existing key replaces its value in place; new keys are appended. Setting
    // general.alignment (u32, a power of two) also sets the data alignment. Throws offgrid::Error.
    void set(std::string key, Value value);
    void set_u32(std::string key, uint32_t v) { set(std::move(key), Value::make_u32(v)); }
    void set_i32(std::string key, int32_t v) { set(std::move(key), Value::make_i32(v)); }
    void set_u64(std::string key, uint64_t v) { set(std::move(key), Value::make_u64(v)); }
    void set_f32(std::string key, float v) { set(std::move(key), Value::make_f32(v)); }
    void set_bool(std::string key, bool v) { set(std::move(key), Value::make_bool(v)); }
    void set_string(std::string key, std::string v) { set(std::move(key), Value::make_string(std::move(v))); }
    void set_strings(std::string key, const std::vector<std::string> & v);
    void set_u32s(std::string key, const std::vector<uint32_t> & v);
    void set_i32s(std::string key, const std::vector<int32_t> & v);
    void set_u64s(std::string key, const std::vector<uint64_t> & v);
    void set_f32s(std::string key, const std::vector<float> & v);
    void set_bools(std::string key, const std::vector<bool> & v);
    bool erase(std::string_view key);
    const std::vector<KeyValue> & metadata() const { return metadata_; }

    uint32_t alignment() const { return alignment_; }

    // Tensors, written in the order added. `ne` is in ggml order (ne[0] contiguous), 1..4 dimensions, each
    // positive, ne[0] a multiple of the type's block size. Throws offgrid::Error on a bad shape, a size
    // mismatch or a duplicate name.
    // Takes ownership of already encoded bytes (size must be the tensor's byte size).
    void add_tensor(std::string name, std::vector<int64_t> ne, tensor::ElemType type, std::vector<uint8_t> data);
    // Refers to encoded bytes that the caller keeps alive until the file is written.
    void add_tensor_view(std::string name, std::vector<int64_t> ne, tensor::ElemType type,
                         std::span<const uint8_t> data);
    // Encodes floats (n_elements of them) to F32, F16, BF16 or Q8_0.
    void add_tensor_f32(std::string name, std::vector<int64_t> ne, tensor::ElemType type,
                        std::span<const float> values);
    // A tensor whose floats `make` produces while the file is written (once per write), so a writer of a
    // file larger than memory holds one tensor at a time. `make` must return the same values every call.
    void add_tensor_f32_lazy(std::string name, std::vector<int64_t> ne, tensor::ElemType type,
                             std::function<std::vector<float>()> make);
    size_t tensor_count() const { return tensors_.size(); }

    // The whole file.
    std::vector<uint8_t> to_bytes() const;
    // Writes the file (via a temporary beside it, renamed at the end). Throws offgrid::Error.
    void write_file(const std::string & path) const;

    // Byte size of the file to_bytes() would produce.
    uint64_t file_size() const;

    struct Sink {
        virtual void write(const void * data, size_t n) = 0;
        virtual ~Sink() = default;
    };

private:
    struct PendingTensor {
        std::string name;
        std::vector<int64_t> ne;
        tensor::ElemType type;
        std::vector<uint8_t> owned;
        std::span<const uint8_t> data;  // into `owned` or the caller's buffer
        uint64_t n_bytes = 0;
        std::function<std::vector<float>()> make;  // a lazy tensor's floats (data is then empty)
    };

    uint64_t check_shape(const std::string & name, const std::vector<int64_t> & ne, tensor::ElemType type) const;
    void serialize(Sink & out) const;
    uint64_t header_size() const;

    std::vector<KeyValue> metadata_;
    std::vector<PendingTensor> tensors_;
    uint32_t alignment_ = 32;
};

}  // namespace offgrid::gguf
