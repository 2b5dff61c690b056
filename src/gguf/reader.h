// GGUF v3 reader: the file is memory-mapped and validated once at open; afterwards every access is in bounds.
// A malformed file throws offgrid::FileError naming the field and the byte offset; it never crashes, hangs or
// allocates more than the file's size justifies.
//
// Accepted: little-endian version 3 (and 2, which has the same layout). Rejected, besides truncation: unknown
// value or element type ids, empty or duplicate keys, empty or duplicate tensor names, bools other than 0/1,
// arrays nested more than 8 levels, general.alignment that is not a u32 power of two, n_dims outside 1..4,
// dimensions < 1, element counts past int64 or byte sizes past uint64, ne[0] not a whole number of blocks,
// tensor offsets not a multiple of the alignment, data outside the file and tensors whose data overlap (in any
// order; gaps between tensors are allowed). Tensor names are not limited to ggml's 64 bytes.
// Tensor data pointers are aligned to the file's alignment when the buffer is (a mapping is page-aligned).
// All const members may be used from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "gguf/value.h"
#include "tensor/types.h"

namespace offgrid::gguf {

struct TensorInfo {
    std::string name;
    std::vector<int64_t> ne;        // ggml order: ne[0] is the contiguous axis; 1..4 dims
    tensor::ElemType type;
    uint64_t offset = 0;            // relative to the start of the data section
    uint64_t n_bytes = 0;
    const uint8_t * data = nullptr; // inside the mapping; null for a tensor a table-only reader has not mapped

    int64_t n_elements() const;
};

// Map: the file is memory-mapped (the default: pages load on demand and are shared with the page cache; a file
// truncated while mapped ends the process with SIGBUS). Read: the whole file is read into memory at open (costs
// its size in RAM and the read time up front; later changes to the file cannot affect the process).
enum class LoadMode { Map, Read };

class Reader {
public:
    // Maps (or reads) and validates a file. Refuses non-regular files (FIFOs, directories) before opening them.
    // While the Reader lives, the file is protected from this process's own writes (common/files.h).
    // Throws FileError (also for running out of memory).
    static Reader open(const std::string & path, LoadMode mode = LoadMode::Map);
    // Validates a buffer that the caller keeps alive (tests, fuzzing). `name` is used in error messages.
    // Arrays of numbers and bools are kept packed (gguf/value.h): memory stays proportional to the file.
    static Reader from_memory(const uint8_t * data, size_t size, std::string name = "<memory>");
    // Reads and validates the header and the tensor table only (pread, no mapping): every TensorInfo::data is
    // null until map_tensors maps it. A process that holds part of a model (a pipeline rank) maps only that part,
    // so its address space grows by its share, not by the file. Keeps the file open for map_tensors.
    static Reader open_table(const std::string & path);
    // For a reader from open_table: maps the tensors whose flag is set (one flag per tensor, in table order;
    // tensors mapped already stay as they are). Each run of wanted tensors that are neighbours in the file (no
    // other tensor's data between them) becomes one mapping, from the page below its first byte to the end of
    // its last tensor. Throws FileError when a mapping fails (naming ulimit -v when that is the cause).
    // LoadMode::Read: each window is read into memory of its own instead (huge pages where the system gives
    // them), as Reader::open's Read mode.
    void map_tensors(const std::vector<bool> & wanted, LoadMode mode = LoadMode::Map);

    Reader(Reader &&) noexcept;
    Reader & operator=(Reader &&) noexcept;
    ~Reader();

    const std::string & path() const;
    uint32_t version() const;
    uint32_t alignment() const;            // general.alignment or 32
    uint64_t data_offset() const;          // start of the tensor data section in the file

    // Metadata, in file order.
    const std::vector<KeyValue> & metadata() const;
    const Value * find(std::string_view key) const;   // nullptr when absent
    // File offset of a key's value (its type field), 0 when absent: lets callers name the place in errors.
    uint64_t value_offset(std::string_view key) const;

    // Typed look-ups. Throw FileError (naming the key) when the key is absent or has another type.
    // get_u32 accepts any integer type whose value fits; get_f32 accepts f32 and f64.
    uint32_t get_u32(std::string_view key) const;
    std::optional<uint32_t> get_u32_opt(std::string_view key) const;
    float get_f32(std::string_view key) const;
    std::optional<float> get_f32_opt(std::string_view key) const;
    bool get_bool(std::string_view key) const;
    const std::string & get_string(std::string_view key) const;

    // Tensors, in file order.
    const std::vector<TensorInfo> & tensors() const;
    const TensorInfo * find_tensor(std::string_view name) const;   // nullptr when absent

    // The whole mapped file (empty for a reader from open_table).
    std::span<const uint8_t> bytes() const;
    uint64_t file_size() const;
    // Bytes of the file this reader maps or holds: the file's size, or (open_table) the sum of map_tensors'
    // mappings, in n_windows() of them.
    uint64_t mapped_bytes() const;
    size_t n_windows() const;

private:
    struct Impl;
    explicit Reader(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace offgrid::gguf
