// GGUF serialisation: header, metadata, tensor infos, aligned tensor data.
#include "gguf/writer.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "common/files.h"
#include "gguf/format.h"
#include "gguf/reader.h"
#include "tensor/quantize.h"

namespace offgrid::gguf {

namespace {

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

uint64_t value_size(const Value & v) {
    if (v.type == ValueType::STRING) return 8 + v.s.size();
    if (v.type == ValueType::ARRAY) {
        uint64_t n = 4 + 8;
        if (v.array.is_packed()) return n + v.array.packed_bytes().size();
        for (const Value & e : v.array) n += value_size(e);
        return n;
    }
    return fixed_value_bytes(v.type);
}

// Checks that a value can be written: a known type, array elements all of the declared type, nesting
// within the reader's limit.
void check_value(const std::string & key, const Value & v, int depth) {
    if (static_cast<uint32_t>(v.type) > static_cast<uint32_t>(ValueType::F64)) {
        throw Error("gguf writer: key '" + key + "': unknown value type id " +
                    std::to_string(static_cast<uint32_t>(v.type)));
    }
    if (v.type == ValueType::BOOL && v.u > 1) {
        throw Error("gguf writer: key '" + key + "': bool value " + std::to_string(v.u) + " is neither 0 nor 1");
    }
    if (v.type != ValueType::ARRAY) return;
    if (depth + 1 > kMaxArrayDepth) {
        throw Error("gguf writer: key '" + key + "': arrays nested deeper than " + std::to_string(kMaxArrayDepth));
    }
    if (static_cast<uint32_t>(v.elem_type) > static_cast<uint32_t>(ValueType::F64)) {
        throw Error("gguf writer: key '" + key + "': unknown array element type id " +
                    std::to_string(static_cast<uint32_t>(v.elem_type)));
    }
    if (v.array.is_packed()) {
        if (v.elem_type == ValueType::BOOL) {
            for (const uint8_t b : v.array.packed_bytes()) {
                if (b > 1) throw Error("gguf writer: key '" + key + "': bool value " + std::to_string(b) + " is neither 0 nor 1");
            }
        }
        return;  // packed arrays hold elements of their own type only
    }
    for (const Value & e : v.array) {
        if (e.type != v.elem_type) {
            throw Error("gguf writer: key '" + key + "': array of " + value_type_name(v.elem_type) +
                        " holds a " + value_type_name(e.type));
        }
        check_value(key, e, depth + 1);
    }
}

class Encoder {
public:
    explicit Encoder(Writer::Sink & out) : out_(out) {}

    template <class T>
    void put(T v) {
        out_.write(&v, sizeof v);  // the host is little endian, like GGUF
    }
    void put_string(const std::string & s) {
        put<uint64_t>(s.size());
        out_.write(s.data(), s.size());
    }
    void zeros(uint64_t n) {
        static const uint8_t zero[64] = {};
        while (n > 0) {
            const size_t k = n < sizeof zero ? static_cast<size_t>(n) : sizeof zero;
            out_.write(zero, k);
            n -= k;
        }
    }
    void put_value(const Value & v) {
        switch (v.type) {
        case ValueType::U8: put<uint8_t>(static_cast<uint8_t>(v.u)); break;
        case ValueType::I8: put<int8_t>(static_cast<int8_t>(v.i)); break;
        case ValueType::U16: put<uint16_t>(static_cast<uint16_t>(v.u)); break;
        case ValueType::I16: put<int16_t>(static_cast<int16_t>(v.i)); break;
        case ValueType::U32: put<uint32_t>(static_cast<uint32_t>(v.u)); break;
        case ValueType::I32: put<int32_t>(static_cast<int32_t>(v.i)); break;
        case ValueType::U64: put<uint64_t>(v.u); break;
        case ValueType::I64: put<int64_t>(v.i); break;
        case ValueType::F32: put<float>(static_cast<float>(v.f)); break;
        case ValueType::F64: put<double>(v.f); break;
        case ValueType::BOOL: put<uint8_t>(v.u != 0 ? 1 : 0); break;
        case ValueType::STRING: put_string(v.s); break;
        case ValueType::ARRAY:
            put<uint32_t>(static_cast<uint32_t>(v.elem_type));
            put<uint64_t>(v.array.size());
            if (v.array.is_packed()) {
                out_.write(v.array.packed_bytes().data(), v.array.packed_bytes().size());
                break;
            }
            for (const Value & e : v.array) put_value(e);
            break;
        }
    }

private:
    Writer::Sink & out_;
};

struct VectorSink : Writer::Sink {
    std::vector<uint8_t> bytes;
    void write(const void * data, size_t n) override {
        const auto * p = static_cast<const uint8_t *>(data);
        bytes.insert(bytes.end(), p, p + n);
    }
};

struct FileSink : Writer::Sink {
    std::FILE * f = nullptr;
    bool failed = false;
    void write(const void * data, size_t n) override {
        if (!failed && n > 0 && std::fwrite(data, 1, n, f) != n) failed = true;
    }
};

template <class T>
Value array_of(ValueType elem, const std::vector<T> & v, Value (*make)(T)) {
    std::vector<Value> elems;
    elems.reserve(v.size());
    for (const T & x : v) elems.push_back(make(x));
    return Value::make_array(elem, std::move(elems));
}

}  // namespace

Writer Writer::from_reader(const Reader & reader) {
    Writer w;
    for (const KeyValue & kv : reader.metadata()) w.set(kv.key, kv.value);
    for (const TensorInfo & t : reader.tensors()) {
        w.add_tensor_view(t.name, t.ne, t.type, std::span<const uint8_t>(t.data, t.n_bytes));
    }
    return w;
}

void Writer::set(std::string key, Value value) {
    if (key.empty()) throw Error("gguf writer: empty metadata key");
    check_value(key, value, 0);
    if (key == kKeyAlignment) {
        if (value.type != ValueType::U32 || value.u == 0 || !std::has_single_bit(value.u)) {
            throw Error("gguf writer: general.alignment must be a u32 power of two");
        }
        alignment_ = static_cast<uint32_t>(value.u);
    }
    for (KeyValue & kv : metadata_) {
        if (kv.key == key) {
            kv.value = std::move(value);
            return;
        }
    }
    metadata_.push_back({std::move(key), std::move(value)});
}

void Writer::set_strings(std::string key, const std::vector<std::string> & v) {
    std::vector<Value> elems;
    elems.reserve(v.size());
    for (const auto & s : v) elems.push_back(Value::make_string(s));
    set(std::move(key), Value::make_array(ValueType::STRING, std::move(elems)));
}

void Writer::set_u32s(std::string key, const std::vector<uint32_t> & v) {
    set(std::move(key), array_of<uint32_t>(ValueType::U32, v, &Value::make_u32));
}

void Writer::set_i32s(std::string key, const std::vector<int32_t> & v) {
    set(std::move(key), array_of<int32_t>(ValueType::I32, v, &Value::make_i32));
}

void Writer::set_u64s(std::string key, const std::vector<uint64_t> & v) {
    set(std::move(key), array_of<uint64_t>(ValueType::U64, v, &Value::make_u64));
}

void Writer::set_f32s(std::string key, const std::vector<float> & v) {
    set(std::move(key), array_of<float>(ValueType::F32, v, &Value::make_f32));
}

void Writer::set_bools(std::string key, const std::vector<bool> & v) {
    std::vector<Value> elems;
    elems.reserve(v.size());
    for (bool b : v) elems.push_back(Value::make_bool(b));
    set(std::move(key), Value::make_array(ValueType::BOOL, std::move(elems)));
}

bool Writer::erase(std::string_view key) {
    for (auto it = metadata_.begin(); it != metadata_.end(); ++it) {
        if (it->key == key) {
            if (key == kKeyAlignment) alignment_ = kDefaultAlignment;
            metadata_.erase(it);
            return true;
        }
    }
    return false;
}

uint64_t Writer::check_shape(const std::string & name, const std::vector<int64_t> & ne,
                             tensor::ElemType type) const {
    const std::string what = "gguf writer: tensor '" + name + "': ";
    if (name.empty()) throw Error("gguf writer: empty tensor name");
    for (const PendingTensor & t : tensors_) {
        if (t.name == name) throw Error(what + "duplicate tensor name");
    }
    const auto traits = tensor::type_traits(static_cast<uint32_t>(type));
    if (!traits) throw Error(what + "unknown element type id " + std::to_string(static_cast<uint32_t>(type)));
    if (ne.empty() || ne.size() > kMaxDims) {
        throw Error(what + std::to_string(ne.size()) + " dimensions (1.." + std::to_string(kMaxDims) + " allowed)");
    }
    for (int64_t d : ne) {
        if (d <= 0) throw Error(what + "dimension " + std::to_string(d) + " is not positive");
    }
    if (ne[0] % traits->block_size != 0) {
        throw Error(what + "ne[0] = " + std::to_string(ne[0]) + " is not a multiple of the " +
                    std::string(traits->name) + " block size " + std::to_string(traits->block_size));
    }
    const uint64_t n_blocks = static_cast<uint64_t>(ne[0]) / traits->block_size;
    constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
    if (n_blocks > kMax / traits->block_bytes) throw Error(what + "byte size overflows uint64");
    uint64_t n_bytes = n_blocks * traits->block_bytes;
    int64_t n = ne[0];
    for (size_t d = 1; d < ne.size(); ++d) {
        if (n > std::numeric_limits<int64_t>::max() / ne[d]) throw Error(what + "element count overflows int64");
        if (n_bytes > kMax / static_cast<uint64_t>(ne[d])) throw Error(what + "byte size overflows uint64");
        n *= ne[d];
        n_bytes *= static_cast<uint64_t>(ne[d]);
    }
    return n_bytes;
}

void Writer::add_tensor(std::string name, std::vector<int64_t> ne, tensor::ElemType type,
                        std::vector<uint8_t> data) {
    const uint64_t n_bytes = check_shape(name, ne, type);
    if (data.size() != n_bytes) {
        throw Error("gguf writer: tensor '" + name + "': " + std::to_string(data.size()) + " bytes given, " +
                    std::to_string(n_bytes) + " expected");
    }
    PendingTensor t{std::move(name), std::move(ne), type, std::move(data), {}, n_bytes, {}};
    tensors_.push_back(std::move(t));
    tensors_.back().data = tensors_.back().owned;
}

void Writer::add_tensor_view(std::string name, std::vector<int64_t> ne, tensor::ElemType type,
                             std::span<const uint8_t> data) {
    const uint64_t n_bytes = check_shape(name, ne, type);
    if (data.size() != n_bytes) {
        throw Error("gguf writer: tensor '" + name + "': " + std::to_string(data.size()) + " bytes given, " +
                    std::to_string(n_bytes) + " expected");
    }
    tensors_.push_back(PendingTensor{std::move(name), std::move(ne), type, {}, data, n_bytes, {}});
}

void Writer::add_tensor_f32_lazy(std::string name, std::vector<int64_t> ne, tensor::ElemType type,
                                 std::function<std::vector<float>()> make) {
    const uint64_t n_bytes = check_shape(name, ne, type);
    if (!tensor::can_quantize(type)) {
        throw Error("gguf writer: tensor '" + name + "': no encoder for " + std::string(tensor::traits(type).name));
    }
    tensors_.push_back(PendingTensor{std::move(name), std::move(ne), type, {}, {}, n_bytes, std::move(make)});
}

void Writer::add_tensor_f32(std::string name, std::vector<int64_t> ne, tensor::ElemType type,
                            std::span<const float> values) {
    check_shape(name, ne, type);
    if (!tensor::can_quantize(type)) {
        throw Error("gguf writer: tensor '" + name + "': no encoder for " +
                    std::string(tensor::traits(type).name));
    }
    uint64_t n = 1;
    for (int64_t d : ne) n *= static_cast<uint64_t>(d);
    if (values.size() != n) {
        throw Error("gguf writer: tensor '" + name + "': " + std::to_string(values.size()) + " values given, " +
                    std::to_string(n) + " expected");
    }
    add_tensor(std::move(name), std::move(ne), type, tensor::quantize(type, values));
}

uint64_t Writer::header_size() const {
    uint64_t n = 4 + 4 + 8 + 8;
    for (const KeyValue & kv : metadata_) n += 8 + kv.key.size() + 4 + value_size(kv.value);
    for (const PendingTensor & t : tensors_) n += 8 + t.name.size() + 4 + 8 * t.ne.size() + 4 + 8;
    return n;
}

// Without tensors the file ends right after the infos (as the ecosystem's writers do): no data section.
uint64_t Writer::file_size() const {
    if (tensors_.empty()) return header_size();
    uint64_t n = align_up(header_size(), alignment_);
    for (const PendingTensor & t : tensors_) n += align_up(t.n_bytes, alignment_);
    return n;
}

void Writer::serialize(Sink & out) const {
    Encoder e(out);
    e.put<uint32_t>(kMagic);
    e.put<uint32_t>(kVersion);
    e.put<uint64_t>(tensors_.size());
    e.put<uint64_t>(metadata_.size());
    for (const KeyValue & kv : metadata_) {
        e.put_string(kv.key);
        e.put<uint32_t>(static_cast<uint32_t>(kv.value.type));
        e.put_value(kv.value);
    }
    uint64_t offset = 0;
    for (const PendingTensor & t : tensors_) {
        e.put_string(t.name);
        e.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
        for (int64_t d : t.ne) e.put<uint64_t>(static_cast<uint64_t>(d));
        e.put<uint32_t>(static_cast<uint32_t>(t.type));
        e.put<uint64_t>(offset);
        offset += align_up(t.n_bytes, alignment_);
    }
    if (tensors_.empty()) return;
    const uint64_t header = header_size();
    e.zeros(align_up(header, alignment_) - header);
    for (const PendingTensor & t : tensors_) {
        if (t.make) {
            const std::vector<float> values = t.make();
            if (values.size() != t.n_bytes / tensor::traits(t.type).block_bytes * tensor::traits(t.type).block_size) {
                throw Error("gguf writer: tensor '" + t.name + "': the lazy tensor gave " +
                            std::to_string(values.size()) + " values");
            }
            const std::vector<uint8_t> bytes = tensor::quantize(t.type, values);
            out.write(bytes.data(), bytes.size());
        } else {
            out.write(t.data.data(), t.data.size());
        }
        e.zeros(align_up(t.n_bytes, alignment_) - t.n_bytes);
    }
}

std::vector<uint8_t> Writer::to_bytes() const {
    VectorSink sink;
    sink.bytes.reserve(static_cast<size_t>(file_size()));
    serialize(sink);
    return std::move(sink.bytes);
}

void Writer::write_file(const std::string & path) const {
    AtomicFile file(path, "gguf writer");
    FileSink sink;
    sink.f = file.stream();
    serialize(sink);
    if (sink.failed) throw Error("gguf writer: writing " + path + " failed");  // the temporary file is removed
    file.commit();
}

}  // namespace offgrid::gguf
