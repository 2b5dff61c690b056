// GGUF v3 parsing and validation (little endian; v2 has the same layout and is accepted too).
#include "gguf/reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <new>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <utility>

#include "common/files.h"
#include "gguf/format.h"

namespace offgrid::gguf {

namespace {

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using NameIndex = std::unordered_map<std::string, size_t, StringHash, std::equal_to<>>;

// Owns a read-only mapping of a whole file or of a window of it.
struct Mapping {
    void * addr = nullptr;
    size_t size = 0;
    bool heap = false;  // memory of our own (posix_memalign) holding a copy, not a mapping of the file
    Mapping() = default;
    Mapping(void * a, size_t n, bool h = false) : addr(a), size(n), heap(h) {}
    Mapping(Mapping && o) noexcept
        : addr(std::exchange(o.addr, nullptr)), size(std::exchange(o.size, 0)), heap(o.heap) {}
    Mapping & operator=(Mapping &&) = delete;
    ~Mapping() {
        if (addr == nullptr) return;
        if (heap) {
            std::free(addr);
        } else {
            munmap(addr, size);
        }
    }
};

// Owns a file descriptor (a table-only reader keeps its file open to map windows later).
struct Fd {
    int fd = -1;
    Fd() = default;
    explicit Fd(int f) : fd(f) {}
    Fd(Fd && o) noexcept : fd(std::exchange(o.fd, -1)) {}
    Fd & operator=(Fd && o) noexcept {
        std::swap(fd, o.fd);
        return *this;
    }
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
};

}  // namespace

struct Reader::Impl {
    std::string path;
    Mapping mapping;
    const uint8_t * base = nullptr;
    size_t size = 0;          // bytes at base: the whole file, or its header and tensor table (table_only)
    uint64_t file_size = 0;
    bool table_only = false;  // open_table: no tensor data until map_tensors
    Fd fd;                    // table_only: the file, for map_tensors
    std::vector<Mapping> windows;  // map_tensors' mappings
    uint64_t mapped = 0;           // bytes of the file mapped (or read)
    uint32_t version = 0;
    uint32_t alignment = kDefaultAlignment;
    uint64_t data_offset = 0;
    std::vector<KeyValue> metadata;
    std::vector<uint64_t> value_offsets;  // file offset of each metadata value (its type field)
    NameIndex key_index;
    std::vector<TensorInfo> tensors;
    NameIndex tensor_index;

    ProtectedFile protect;  // a file this process reads is never the target of one of its writes
    struct FreeDeleter {
        void operator()(uint8_t * p) const { std::free(p); }
    };
    std::unique_ptr<uint8_t, FreeDeleter> owned;  // LoadMode::Read: the file's bytes

    void parse();
    // parse(), with running out of memory reported as a FileError naming the file.
    void parse_checked();
    const Value & require(std::string_view key, size_t & index) const;
    [[noreturn]] void type_error(size_t index, const char * expected) const;
};

namespace {

// Sequential reader over the buffer. Every read checks the remaining size first; `field` is a callable that
// builds the field name only when an error is reported, so the hot paths do not allocate.
// Thrown by a Parser over the first bytes of a file (Reader::open_table) when it needs bytes past them.
struct NeedMore {
    uint64_t bytes;  // the prefix must hold at least this many
};

class Parser {
public:
    // `size` bytes at `base`: the whole file, or (file_size > size) only its first bytes.
    Parser(const uint8_t * base, size_t size, const std::string & name, uint64_t file_size)
        : base_(base), size_(size), file_size_(file_size), name_(name) {}

    size_t pos() const { return pos_; }
    // Bytes left in the file (what the validation compares counts and lengths with).
    size_t remaining() const { return static_cast<size_t>(file_size_ - pos_); }

    template <class Field>
    [[noreturn]] void fail(uint64_t offset, const Field & field, const std::string & what) const {
        throw FileError(name_, offset, field(), what);
    }

    template <class Field>
    void need(size_t n, const Field & field) const {
        if (remaining() >= n && size_ - pos_ < n) throw NeedMore{pos_ + n};
        if (remaining() < n) {
            fail(pos_, field, "needs " + std::to_string(n) + " bytes but only " + std::to_string(remaining()) +
                                  " remain (truncated file)");
        }
    }

    template <class T, class Field>
    T scalar(const Field & field) {
        need(sizeof(T), field);
        T v;
        std::memcpy(&v, base_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    template <class Field>
    const uint8_t * take(size_t n, const Field & field) {
        need(n, field);
        const uint8_t * p = base_ + pos_;
        pos_ += n;
        return p;
    }

    template <class Field>
    std::string string(const Field & field) {
        const size_t at = pos_;
        const uint64_t len = scalar<uint64_t>(field);
        if (len > remaining()) {
            fail(at, field, "string length " + std::to_string(len) + " runs past the end of the file (" +
                                std::to_string(remaining()) + " bytes remain)");
        }
        need(static_cast<size_t>(len), field);
        std::string s(reinterpret_cast<const char *>(base_ + pos_), static_cast<size_t>(len));
        pos_ += static_cast<size_t>(len);
        return s;
    }

private:
    const uint8_t * base_;
    size_t size_;
    uint64_t file_size_;
    size_t pos_ = 0;
    const std::string & name_;
};

// Keys and names come from the file: show them printable and short in messages.
std::string quoted(std::string_view s) {
    std::string out = "'";
    size_t n = 0;
    for (unsigned char c : s) {
        if (++n > 64) {
            out += "...";
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
            out += static_cast<char>(c);
        } else {
            static const char * hex = "0123456789abcdef";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out + "'";
}

bool known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::F64); }

// Smallest encoding of one value of a type: bounds an array's count by the bytes left before allocating.
size_t min_value_bytes(ValueType t) {
    if (t == ValueType::STRING) return 8;      // the length
    if (t == ValueType::ARRAY) return 12;      // element type + count
    const size_t n = fixed_value_bytes(t);
    return n > 0 ? n : 1;
}

// A non-owning reference to a field-name builder. Values recurse into arrays, so the builder's type must not
// grow with the depth (a template parameter would instantiate without end).
class FieldRef {
public:
    template <class F>
    FieldRef(const F & f) : ctx_(&f), call_([](const void * c) { return (*static_cast<const F *>(c))(); }) {}
    std::string operator()() const { return call_(ctx_); }

private:
    const void * ctx_;
    std::string (*call_)(const void *);
};

class MetadataParser {
public:
    explicit MetadataParser(Parser & p) : p_(p) {}

    // Reads a value of known type t; `field` names it in errors. depth counts enclosing arrays.
    void read(Value & v, ValueType t, FieldRef field, int depth) {
        v.type = t;
        switch (t) {
        case ValueType::U8: v.u = p_.scalar<uint8_t>(field); break;
        case ValueType::I8: v.i = p_.scalar<int8_t>(field); break;
        case ValueType::U16: v.u = p_.scalar<uint16_t>(field); break;
        case ValueType::I16: v.i = p_.scalar<int16_t>(field); break;
        case ValueType::U32: v.u = p_.scalar<uint32_t>(field); break;
        case ValueType::I32: v.i = p_.scalar<int32_t>(field); break;
        case ValueType::U64: v.u = p_.scalar<uint64_t>(field); break;
        case ValueType::I64: v.i = p_.scalar<int64_t>(field); break;
        case ValueType::F32: v.f = p_.scalar<float>(field); break;
        case ValueType::F64: v.f = p_.scalar<double>(field); break;
        case ValueType::BOOL: {
            const size_t at = p_.pos();
            v.u = p_.scalar<uint8_t>(field);
            if (v.u > 1) p_.fail(at, field, "bool value " + std::to_string(v.u) + " is neither 0 nor 1");
            break;
        }
        case ValueType::STRING: v.s = p_.string(field); break;
        case ValueType::ARRAY: read_array(v, field, depth); break;
        }
    }

private:
    void read_array(Value & v, FieldRef field, int depth) {
        const size_t type_at = p_.pos();
        const uint32_t elem = p_.scalar<uint32_t>(field);
        if (!known_value_type(elem)) {
            p_.fail(type_at, field, "unknown array element type id " + std::to_string(elem));
        }
        v.elem_type = static_cast<ValueType>(elem);
        if (v.elem_type == ValueType::ARRAY && depth + 1 >= kMaxArrayDepth) {
            p_.fail(type_at, field, "arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
        }
        const size_t count_at = p_.pos();
        const uint64_t count = p_.scalar<uint64_t>(field);
        const size_t min_bytes = min_value_bytes(v.elem_type);
        if (count > p_.remaining() / min_bytes) {
            p_.fail(count_at, field, "array count " + std::to_string(count) + " needs at least " +
                                         std::to_string(min_bytes) + " bytes per element but only " +
                                         std::to_string(p_.remaining()) + " bytes remain");
        }
        const size_t width = fixed_value_bytes(v.elem_type);
        if (width > 0) {
            // Numbers and bools stay packed: the file's bytes, not one Value per element.
            const size_t at = p_.pos();
            const uint8_t * bytes = p_.take(static_cast<size_t>(count) * width, field);
            if (v.elem_type == ValueType::BOOL) {
                for (size_t k = 0; k < count; ++k) {
                    if (bytes[k] > 1) {
                        p_.fail(at + k, [&] { return field() + "[" + std::to_string(k) + "]"; },
                                "bool value " + std::to_string(bytes[k]) + " is neither 0 nor 1");
                    }
                }
            }
            v.array = ValueArray::packed(v.elem_type, std::vector<uint8_t>(bytes, bytes + count * width));
            return;
        }
        std::vector<Value> elems(static_cast<size_t>(count));
        for (size_t k = 0; k < elems.size(); ++k) {
            auto elem_field = [&] { return field() + "[" + std::to_string(k) + "]"; };
            read(elems[k], v.elem_type, elem_field, depth + 1);
        }
        v.array = std::move(elems);
    }

    Parser & p_;
};

}  // namespace

// Parses the buffer (base, size and path set). Throws FileError on the first problem found.
void Reader::Impl::parse() {
    Impl & impl = *this;
    Parser p(impl.base, impl.size, impl.path, impl.file_size);
    const auto field_magic = [] { return std::string("header.magic"); };
    const auto field_version = [] { return std::string("header.version"); };
    const auto field_tensor_count = [] { return std::string("header.tensor_count"); };
    const auto field_kv_count = [] { return std::string("header.metadata_kv_count"); };

    const uint32_t magic = p.scalar<uint32_t>(field_magic);
    if (magic != kMagic) {
        char shown[4];
        std::memcpy(shown, &magic, 4);
        p.fail(0, field_magic, "bad magic " + quoted(std::string_view(shown, 4)) + ", not a GGUF file");
    }
    impl.version = p.scalar<uint32_t>(field_version);
    if (impl.version != 2 && impl.version != 3) {
        std::string what = "unsupported version " + std::to_string(impl.version) + " (supported: 2, 3)";
        if (impl.version != 0 && (impl.version & 0xffffu) == 0) what += "; big-endian files are not supported";
        p.fail(4, field_version, what);
    }
    const uint64_t tensor_count = p.scalar<uint64_t>(field_tensor_count);
    const uint64_t kv_count = p.scalar<uint64_t>(field_kv_count);
    // A tensor info takes at least 32 bytes, a key-value pair at least 13 (see format.h).
    if (tensor_count > p.remaining() / kMinTensorInfoBytes) {
        p.fail(8, field_tensor_count, "count " + std::to_string(tensor_count) + " is larger than the " +
                                          std::to_string(p.remaining()) + " remaining bytes can hold");
    }
    if (kv_count > p.remaining() / kMinKeyValueBytes) {
        p.fail(16, field_kv_count, "count " + std::to_string(kv_count) + " is larger than the " +
                                       std::to_string(p.remaining()) + " remaining bytes can hold");
    }

    MetadataParser values(p);
    impl.metadata.resize(static_cast<size_t>(kv_count));
    impl.value_offsets.resize(static_cast<size_t>(kv_count));
    impl.key_index.reserve(static_cast<size_t>(kv_count));
    for (size_t k = 0; k < impl.metadata.size(); ++k) {
        KeyValue & kv = impl.metadata[k];
        const size_t key_at = p.pos();
        const auto field_key = [k] { return "metadata[" + std::to_string(k) + "].key"; };
        kv.key = p.string(field_key);
        if (kv.key.empty()) p.fail(key_at, field_key, "empty key");
        const auto field_value = [&kv] { return "metadata " + quoted(kv.key); };
        const size_t type_at = p.pos();
        impl.value_offsets[k] = type_at;
        const uint32_t type = p.scalar<uint32_t>(field_value);
        if (!known_value_type(type)) p.fail(type_at, field_value, "unknown value type id " + std::to_string(type));
        values.read(kv.value, static_cast<ValueType>(type), field_value, 0);
        const auto [it, inserted] = impl.key_index.emplace(kv.key, k);
        if (!inserted) {
            p.fail(key_at, field_key, "duplicate key " + quoted(kv.key) + " (first defined at byte " +
                                          std::to_string(impl.value_offsets[it->second]) + ")");
        }
    }

    if (const auto it = impl.key_index.find(std::string_view(kKeyAlignment)); it != impl.key_index.end()) {
        const Value & v = impl.metadata[it->second].value;
        const uint64_t at = impl.value_offsets[it->second];
        const auto field = [] { return std::string(kKeyAlignment); };
        if (v.type != ValueType::U32) {
            p.fail(at, field, std::string("has type ") + value_type_name(v.type) + ", expected u32");
        }
        if (v.u == 0 || !std::has_single_bit(v.u)) {
            p.fail(at, field, "alignment " + std::to_string(v.u) + " is not a power of two");
        }
        impl.alignment = static_cast<uint32_t>(v.u);
    }

    // Tensor infos. Positions of each info's offset field are kept for the data checks below.
    if (tensor_count > p.remaining() / kMinTensorInfoBytes) {
        p.fail(8, field_tensor_count, "count " + std::to_string(tensor_count) + " is larger than the " +
                                          std::to_string(p.remaining()) +
                                          " bytes left after the metadata can hold");
    }
    impl.tensors.resize(static_cast<size_t>(tensor_count));
    std::vector<uint64_t> offset_field_at(impl.tensors.size());
    impl.tensor_index.reserve(impl.tensors.size());
    for (size_t k = 0; k < impl.tensors.size(); ++k) {
        TensorInfo & t = impl.tensors[k];
        const size_t name_at = p.pos();
        const auto field_name = [k] { return "tensor[" + std::to_string(k) + "].name"; };
        t.name = p.string(field_name);
        if (t.name.empty()) p.fail(name_at, field_name, "empty tensor name");
        const auto prefix = [&t] { return "tensor " + quoted(t.name); };

        const size_t dims_at = p.pos();
        const auto field_dims = [&] { return prefix() + ".n_dims"; };
        const uint32_t n_dims = p.scalar<uint32_t>(field_dims);
        if (n_dims < 1 || n_dims > kMaxDims) {
            p.fail(dims_at, field_dims, "n_dims " + std::to_string(n_dims) + " is outside 1.." +
                                            std::to_string(kMaxDims));
        }
        t.ne.resize(n_dims);
        std::vector<size_t> dim_at(n_dims);
        for (uint32_t d = 0; d < n_dims; ++d) {
            dim_at[d] = p.pos();
            const auto field_dim = [&] { return prefix() + ".ne[" + std::to_string(d) + "]"; };
            const uint64_t ne = p.scalar<uint64_t>(field_dim);
            if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
                p.fail(dim_at[d], field_dim, "dimension " + std::to_string(static_cast<int64_t>(ne)) +
                                                 " is not positive");
            }
            t.ne[d] = static_cast<int64_t>(ne);
        }

        const size_t type_at = p.pos();
        const auto field_type = [&] { return prefix() + ".type"; };
        const uint32_t type_id = p.scalar<uint32_t>(field_type);
        const auto traits = tensor::type_traits(type_id);
        if (!traits) p.fail(type_at, field_type, "unknown element type id " + std::to_string(type_id));
        t.type = static_cast<tensor::ElemType>(type_id);

        offset_field_at[k] = p.pos();
        t.offset = p.scalar<uint64_t>([&] { return prefix() + ".offset"; });

        // Element count and byte size, checked for int64 overflow dimension by dimension.
        if (static_cast<uint64_t>(t.ne[0]) % traits->block_size != 0) {
            p.fail(dim_at[0], [&] { return prefix() + ".ne[0]"; },
                   "row of " + std::to_string(t.ne[0]) + " elements is not a multiple of the " +
                       std::string(traits->name) + " block size " + std::to_string(traits->block_size));
        }
        int64_t n_elements = t.ne[0];
        const uint64_t n_blocks = static_cast<uint64_t>(t.ne[0]) / traits->block_size;
        if (n_blocks > std::numeric_limits<uint64_t>::max() / traits->block_bytes) {
            p.fail(dim_at[0], [&] { return prefix() + ".ne[0]"; }, "byte size overflows uint64");
        }
        uint64_t n_bytes = n_blocks * traits->block_bytes;
        for (uint32_t d = 1; d < n_dims; ++d) {
            const auto field_dim = [&] { return prefix() + ".ne[" + std::to_string(d) + "]"; };
            if (n_elements > std::numeric_limits<int64_t>::max() / t.ne[d]) {
                p.fail(dim_at[d], field_dim, "element count overflows int64");
            }
            n_elements *= t.ne[d];
            if (n_bytes > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(t.ne[d])) {
                p.fail(dim_at[d], field_dim, "byte size overflows uint64");
            }
            n_bytes *= static_cast<uint64_t>(t.ne[d]);
        }
        t.n_bytes = n_bytes;

        const auto [it, inserted] = impl.tensor_index.emplace(t.name, k);
        if (!inserted) {
            p.fail(name_at, field_name, "duplicate tensor name " + quoted(t.name) + " (first is tensor " +
                                            std::to_string(it->second) + ")");
        }
    }

    // The data section starts at the next multiple of the alignment after the infos.
    const uint64_t infos_end = p.pos();
    impl.data_offset = (infos_end + impl.alignment - 1) / impl.alignment * impl.alignment;
    const uint64_t data_size = impl.data_offset <= impl.file_size ? impl.file_size - impl.data_offset : 0;

    for (size_t k = 0; k < impl.tensors.size(); ++k) {
        TensorInfo & t = impl.tensors[k];
        const auto field = [&t] { return "tensor " + quoted(t.name) + ".offset"; };
        if (t.offset % impl.alignment != 0) {
            p.fail(offset_field_at[k], field, "data offset " + std::to_string(t.offset) +
                                                  " is not a multiple of the alignment " +
                                                  std::to_string(impl.alignment));
        }
        if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
            p.fail(offset_field_at[k], field,
                   "data [" + std::to_string(t.offset) + ", +" + std::to_string(t.n_bytes) +
                       ") runs past the end of the data section (" + std::to_string(data_size) +
                       " bytes from byte " + std::to_string(impl.data_offset) + ")");
        }
        t.data = impl.table_only ? nullptr : impl.base + impl.data_offset + t.offset;
    }

    std::vector<size_t> order(impl.tensors.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return impl.tensors[a].offset < impl.tensors[b].offset; });
    for (size_t k = 1; k < order.size(); ++k) {
        const TensorInfo & prev = impl.tensors[order[k - 1]];
        const TensorInfo & cur = impl.tensors[order[k]];
        if (prev.offset + prev.n_bytes > cur.offset) {
            p.fail(offset_field_at[order[k]], [&cur] { return "tensor " + quoted(cur.name) + ".offset"; },
                   "data at " + std::to_string(cur.offset) + " overlaps tensor " + quoted(prev.name) + " [" +
                       std::to_string(prev.offset) + ", " + std::to_string(prev.offset + prev.n_bytes) + ")");
        }
    }
}

void Reader::Impl::parse_checked() {
    try {
        parse();
    } catch (const std::bad_alloc &) {
        throw FileError(path, 0, "file", "out of memory while reading the header and metadata of a " +
                                             std::to_string(size) + "-byte file");
    }
}

int64_t TensorInfo::n_elements() const {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    return n;
}

Reader::Reader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Reader::Reader(Reader &&) noexcept = default;
Reader & Reader::operator=(Reader &&) noexcept = default;
Reader::~Reader() = default;

namespace {

// Opens a regular file for reading; st receives its status. Refuses directories, FIFOs and the like before
// opening them (opening a FIFO for reading would block until a writer appears).
Fd open_regular(const std::string & path, struct stat & st) {
    if (path.empty()) throw FileError(path, 0, "file", "empty file name");
    if (::stat(path.c_str(), &st) != 0) {
        throw FileError(path, 0, "file", std::string("cannot open: ") + std::strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) throw FileError(path, 0, "file", "is a directory, not a regular file");
    if (!S_ISREG(st.st_mode)) throw FileError(path, 0, "file", "not a regular file");
    // O_NONBLOCK in case the path was swapped for a FIFO since the stat; the fstat below refuses it then.
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (fd.fd < 0) throw FileError(path, 0, "file", std::string("cannot open: ") + std::strerror(errno));
    if (fstat(fd.fd, &st) != 0) throw FileError(path, 0, "file", std::string("cannot stat: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throw FileError(path, 0, "file", "not a regular file");
    return fd;
}

// Why a mapping of `bytes` bytes failed, naming the address-space limit when there is one (ulimit -v counts
// every mapping whole, touched or not).
std::string map_failure(int err, uint64_t bytes) {
    std::string why = std::string("cannot map ") + std::to_string(bytes) + " bytes: " + std::strerror(err);
    rlimit lim{};
    if (err == ENOMEM && ::getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
        why += " (the address-space limit, ulimit -v, is " + std::to_string(lim.rlim_cur / 1024) +
               " KiB for the whole process: raise it, or split the model over several processes, docs/distributed.md)";
    }
    return why;
}

// Reads bytes [at, at + n) of the file into `to`.
void read_exactly(int fd, const std::string & path, uint8_t * to, size_t n, uint64_t at) {
    size_t done = 0;
    while (done < n) {
        const ssize_t got = ::pread(fd, to + done, n - done, static_cast<off_t>(at + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            throw FileError(path, at + done, "file", got == 0 ? std::string("the file shrank while it was read")
                                                              : std::string("read error: ") + std::strerror(errno));
        }
        done += static_cast<size_t>(got);
    }
}

#ifdef MADV_HUGEPAGE
// Advice only, given before anything touches the mapping: the parts of the file the page cache does not hold yet
// are then read in 2 MiB folios, each mapped by one TLB entry. Decode streams every weight byte once a token;
// with 4 KiB pages that is ~87k page walks a token on the F32 bench file (docs/kernels.md). Pages already cached
// keep their size. Failure leaves ordinary pages.
void advise_huge(void * addr, size_t size) { ::madvise(addr, size, MADV_HUGEPAGE); }
#else
void advise_huge(void *, size_t) {}
#endif

}  // namespace

Reader Reader::open(const std::string & path, LoadMode mode) {
    auto impl = std::make_unique<Impl>();
    impl->path = path;
    struct stat st {};
    Fd fd = open_regular(path, st);
    const auto size = static_cast<size_t>(st.st_size);
    if (size > 0 && mode == LoadMode::Map) {
        void * addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
        if (addr == MAP_FAILED) throw FileError(path, 0, "file", map_failure(errno, size));
        advise_huge(addr, size);
        impl->mapping.addr = addr;
        impl->mapping.size = size;
        impl->base = static_cast<const uint8_t *>(addr);
        impl->size = size;
    } else if (size > 0) {
        // Read into page-aligned memory of our own: the file may then change or shrink without harm. A large
        // file gets 2 MiB alignment and transparent huge pages (advised before the first write), for the same
        // reason as the mapping above.
        constexpr size_t kHuge = size_t{2} << 20;
        const size_t align = size >= kHuge ? kHuge : 4096;
        void * buf = nullptr;
        if (posix_memalign(&buf, align, size) != 0) {
            throw FileError(path, 0, "file", "out of memory reading " + std::to_string(size) + " bytes (--no-mmap)");
        }
        if (align == kHuge) advise_huge(buf, size / kHuge * kHuge);
        impl->owned.reset(static_cast<uint8_t *>(buf));
        read_exactly(fd.fd, path, impl->owned.get(), size, 0);
        impl->base = impl->owned.get();
        impl->size = size;
    }
    // The descriptor closes here; the mapping stays valid.
    impl->protect = ProtectedFile(st.st_dev, st.st_ino);
    impl->file_size = size;
    impl->mapped = size;
    static const uint8_t empty = 0;
    if (impl->base == nullptr) impl->base = &empty;
    impl->parse_checked();
    return Reader(std::move(impl));
}

Reader Reader::open_table(const std::string & path) {
    struct stat st {};
    Fd fd = open_regular(path, st);
    const auto file_size = static_cast<uint64_t>(st.st_size);
    // The header and the tensor table, read in growing prefixes of the file until they parse: a prefix that ends
    // inside them stops the parser (NeedMore) with the length it needs, and the parse starts again.
    uint64_t want = std::min<uint64_t>(file_size, uint64_t{1} << 20);
    while (true) {
        auto impl = std::make_unique<Impl>();
        impl->path = path;
        impl->file_size = file_size;
        impl->table_only = true;
        struct FreeDeleter {
            void operator()(uint8_t * p) const { std::free(p); }
        };
        uint8_t * buf = want > 0 ? static_cast<uint8_t *>(std::malloc(static_cast<size_t>(want))) : nullptr;
        if (want > 0 && buf == nullptr) {
            throw FileError(path, 0, "file", "out of memory reading the " + std::to_string(want) + "-byte header");
        }
        impl->owned.reset(buf);
        if (want > 0) read_exactly(fd.fd, path, buf, static_cast<size_t>(want), 0);
        static const uint8_t empty = 0;
        impl->base = buf != nullptr ? buf : &empty;
        impl->size = static_cast<size_t>(want);
        try {
            impl->parse_checked();
        } catch (const NeedMore & more) {
            // Doubling bounds the number of reads; `more.bytes` never passes the file's size (Parser::need).
            want = std::min(file_size, std::max(more.bytes, want * 2));
            continue;
        }
        // The header's bytes are no longer needed: the metadata and the table are parsed into their own storage.
        impl->owned.reset();
        impl->base = &empty;
        impl->size = 0;
        impl->protect = ProtectedFile(st.st_dev, st.st_ino);
        impl->fd = std::move(fd);
        return Reader(std::move(impl));
    }
}

void Reader::map_tensors(const std::vector<bool> & wanted, LoadMode mode) {
    Impl & impl = *impl_;
    if (!impl.table_only) throw Error(impl.path + ": map_tensors needs a reader from open_table");
    if (wanted.size() != impl.tensors.size()) throw Error(impl.path + ": map_tensors: one flag per tensor expected");
    // Windows: runs of wanted tensors in file order with no other tensor's data between them, each mapped from
    // the page below its first byte to the page above its last.
    std::vector<size_t> order;
    for (size_t k = 0; k < impl.tensors.size(); ++k)
        if (wanted[k] && impl.tensors[k].data == nullptr && impl.tensors[k].n_bytes > 0) order.push_back(k);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return impl.tensors[a].offset < impl.tensors[b].offset; });
    std::vector<size_t> by_offset(impl.tensors.size());
    std::iota(by_offset.begin(), by_offset.end(), size_t{0});
    std::sort(by_offset.begin(), by_offset.end(),
              [&](size_t a, size_t b) { return impl.tensors[a].offset < impl.tensors[b].offset; });
    std::vector<size_t> rank(impl.tensors.size());  // a tensor's place in file order
    for (size_t i = 0; i < by_offset.size(); ++i) rank[by_offset[i]] = i;
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGE_SIZE));
    for (size_t i = 0; i < order.size();) {
        size_t j = i + 1;
        while (j < order.size() && rank[order[j]] == rank[order[j - 1]] + 1) ++j;
        const uint64_t first = impl.data_offset + impl.tensors[order[i]].offset;
        const TensorInfo & last_t = impl.tensors[order[j - 1]];
        const uint64_t last = impl.data_offset + last_t.offset + last_t.n_bytes;
        const uint64_t from = first / page * page;
        const auto n = static_cast<size_t>(last - from);
        void * addr = nullptr;
        if (mode == LoadMode::Read) {
            // A copy in memory of our own, 2 MiB aligned with transparent huge pages advised before the first
            // write (as Reader::open's Read mode): the weights stream through fewer TLB entries than from the
            // page cache's 4 KiB pages.
            constexpr size_t kHuge = size_t{2} << 20;
            const size_t align = n >= kHuge ? kHuge : 4096;
            if (posix_memalign(&addr, align, n) != 0) {
                throw FileError(impl.path, first, "file", "out of memory reading " + std::to_string(n) + " bytes");
            }
            impl.windows.emplace_back(addr, n, true);
            if (align == kHuge) advise_huge(addr, n / kHuge * kHuge);
            read_exactly(impl.fd.fd, impl.path, static_cast<uint8_t *>(addr), n, from);
        } else {
            addr = mmap(nullptr, n, PROT_READ, MAP_PRIVATE, impl.fd.fd, static_cast<off_t>(from));
            if (addr == MAP_FAILED) throw FileError(impl.path, first, "file", map_failure(errno, n));
            advise_huge(addr, n);
            impl.windows.emplace_back(addr, n);
        }
        impl.mapped += n;
        for (size_t k = i; k < j; ++k) {
            TensorInfo & t = impl.tensors[order[k]];
            t.data = static_cast<const uint8_t *>(addr) + (impl.data_offset + t.offset - from);
        }
        i = j;
    }
}

uint64_t Reader::file_size() const { return impl_->file_size; }
uint64_t Reader::mapped_bytes() const { return impl_->mapped; }
size_t Reader::n_windows() const { return impl_->windows.size(); }

Reader Reader::from_memory(const uint8_t * data, size_t size, std::string name) {
    auto impl = std::make_unique<Impl>();
    impl->path = std::move(name);
    static const uint8_t empty = 0;
    impl->base = data != nullptr ? data : &empty;
    impl->size = data != nullptr ? size : 0;
    impl->file_size = impl->size;
    impl->mapped = impl->size;
    impl->parse_checked();
    return Reader(std::move(impl));
}

const std::string & Reader::path() const { return impl_->path; }
uint32_t Reader::version() const { return impl_->version; }
uint32_t Reader::alignment() const { return impl_->alignment; }
uint64_t Reader::data_offset() const { return impl_->data_offset; }
const std::vector<KeyValue> & Reader::metadata() const { return impl_->metadata; }
const std::vector<TensorInfo> & Reader::tensors() const { return impl_->tensors; }
std::span<const uint8_t> Reader::bytes() const { return {impl_->base, impl_->size}; }

const Value * Reader::find(std::string_view key) const {
    const auto it = impl_->key_index.find(key);
    return it == impl_->key_index.end() ? nullptr : &impl_->metadata[it->second].value;
}

const TensorInfo * Reader::find_tensor(std::string_view name) const {
    const auto it = impl_->tensor_index.find(name);
    return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

uint64_t Reader::value_offset(std::string_view key) const {
    const auto it = impl_->key_index.find(key);
    return it == impl_->key_index.end() ? 0 : impl_->value_offsets[it->second];
}

const Value & Reader::Impl::require(std::string_view key, size_t & index) const {
    const auto it = key_index.find(key);
    if (it == key_index.end()) throw FileError(path, 0, std::string(key), "required key is missing");
    index = it->second;
    return metadata[index].value;
}

void Reader::Impl::type_error(size_t index, const char * expected) const {
    const Value & v = metadata[index].value;
    throw FileError(path, value_offsets[index], metadata[index].key,
                    std::string("has type ") + value_type_name(v.type) + ", expected " + expected);
}

uint32_t Reader::get_u32(std::string_view key) const {
    size_t index = 0;
    const Value & v = impl_->require(key, index);
    if (!v.is_integer()) impl_->type_error(index, "an integer");
    const bool is_signed =
        v.type == ValueType::I8 || v.type == ValueType::I16 || v.type == ValueType::I32 || v.type == ValueType::I64;
    const bool fits = is_signed ? (v.i >= 0 && v.i <= static_cast<int64_t>(UINT32_MAX)) : v.u <= UINT32_MAX;
    if (!fits) {
        throw FileError(impl_->path, impl_->value_offsets[index], impl_->metadata[index].key,
                        "value " + (is_signed ? std::to_string(v.i) : std::to_string(v.u)) +
                            " does not fit in u32");
    }
    return static_cast<uint32_t>(is_signed ? static_cast<uint64_t>(v.i) : v.u);
}

std::optional<uint32_t> Reader::get_u32_opt(std::string_view key) const {
    if (find(key) == nullptr) return std::nullopt;
    return get_u32(key);
}

float Reader::get_f32(std::string_view key) const {
    size_t index = 0;
    const Value & v = impl_->require(key, index);
    if (v.type != ValueType::F32 && v.type != ValueType::F64) impl_->type_error(index, "f32 or f64");
    return static_cast<float>(v.f);
}

std::optional<float> Reader::get_f32_opt(std::string_view key) const {
    if (find(key) == nullptr) return std::nullopt;
    return get_f32(key);
}

bool Reader::get_bool(std::string_view key) const {
    size_t index = 0;
    const Value & v = impl_->require(key, index);
    if (v.type != ValueType::BOOL) impl_->type_error(index, "bool");
    return v.u != 0;
}

const std::string & Reader::get_string(std::string_view key) const {
    size_t index = 0;
    const Value & v = impl_->require(key, index);
    if (v.type != ValueType::STRING) impl_->type_error(index, "string");
    return v.s;
}

}  // namespace offgrid::gguf
