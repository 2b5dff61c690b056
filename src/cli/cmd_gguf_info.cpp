// `offgrid gguf-info FILE [--json] [--full]`: the metadata and tensor table of a GGUF file, for people (text,
// long values abbreviated) or for scripts (one JSON document).
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "command.h"
#include "offgrid/gguf.h"

namespace offgrid::cli {

namespace {

using gguf::Value;
using gguf::ValueType;

constexpr size_t kTextArrayItems = 8;     // array elements shown in text mode
constexpr size_t kTextStringBytes = 80;   // string bytes shown in text mode
constexpr size_t kJsonArrayItems = 16;    // array elements in JSON unless --full

// Length of the valid UTF-8 sequence at s[i], or 0 if the bytes there are not one.
size_t utf8_sequence(const std::string & s, size_t i) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (i + len > s.size()) return 0;
    for (size_t k = 1; k < len; ++k) {
        const auto cc = static_cast<unsigned char>(s[i + k]);
        if ((cc & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (cc & 0x3f);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not valid UTF-8.
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff))) return 0;
    if (cp >= 0xd800 && cp <= 0xdfff) return 0;
    return len;
}

// A JSON string literal. Bytes that are not valid UTF-8 become U+FFFD, so the document always parses.
std::string json_string(const std::string & s) {
    std::string out = "\"";
    for (size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        const size_t len = utf8_sequence(s, i);
        if (len == 0) {
            out += "\\ufffd";
            ++i;
            continue;
        }
        if (len > 1) {
            out.append(s, i, len);
        } else if (c == '"') {
            out += "\\\"";
        } else if (c == '\\') {
            out += "\\\\";
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
        i += len;
    }
    return out + "\"";
}

// A string for the terminal: quoted, control bytes escaped, cut after kTextStringBytes.
std::string text_string(const std::string & s) {
    std::string out = "\"";
    const size_t n = std::min(s.size(), kTextStringBytes);
    for (size_t i = 0; i < n; ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    out += "\"";
    if (s.size() > n) out += "... (" + std::to_string(s.size()) + " bytes)";
    return out;
}

std::string number(const Value & v, bool json) {
    char buf[40];
    switch (v.type) {
    case ValueType::U8:
    case ValueType::U16:
    case ValueType::U32:
    case ValueType::U64: return std::to_string(v.u);
    case ValueType::I8:
    case ValueType::I16:
    case ValueType::I32:
    case ValueType::I64: return std::to_string(v.i);
    case ValueType::BOOL: return v.u != 0 ? "true" : "false";
    case ValueType::F32:
    case ValueType::F64:
        if (!std::isfinite(v.f)) {
            // JSON has no NaN or infinity: give them as strings.
            const char * word = std::isnan(v.f) ? "nan" : (v.f > 0 ? "inf" : "-inf");
            return json ? std::string("\"") + word + "\"" : word;
        }
        std::snprintf(buf, sizeof buf, v.type == ValueType::F32 ? "%.9g" : "%.17g", v.f);
        return buf;
    default: return "";
    }
}

std::string type_label(const Value & v) {
    if (v.type != ValueType::ARRAY) return gguf::value_type_name(v.type);
    return std::string("array<") + gguf::value_type_name(v.elem_type) + ">";
}

std::string text_value(const Value & v) {
    if (v.type == ValueType::STRING) return text_string(v.s);
    if (v.type != ValueType::ARRAY) return number(v, false);
    const size_t shown = std::min(v.array.size(), kTextArrayItems);
    std::string out = "[";
    if (v.array.size() > shown) out += std::to_string(v.array.size()) + " items: ";
    for (size_t k = 0; k < shown; ++k) {
        if (k > 0) out += ", ";
        out += text_value(v.array[k]);
    }
    if (v.array.size() > shown) out += ", ...";
    return out + "]";
}

std::string json_value(const Value & v, bool full) {
    if (v.type == ValueType::STRING) return json_string(v.s);
    if (v.type != ValueType::ARRAY) return number(v, true);
    const size_t shown = full ? v.array.size() : std::min(v.array.size(), kJsonArrayItems);
    std::string out = "[";
    for (size_t k = 0; k < shown; ++k) {
        if (k > 0) out += ", ";
        out += json_value(v.array[k], full);
    }
    return out + "]";
}

std::string shape(const gguf::TensorEntry & t, const char * sep) {
    std::string out;
    for (size_t d = 0; d < t.shape.size(); ++d) {
        if (d > 0) out += sep;
        out += std::to_string(t.shape[d]);
    }
    return out;
}

// Keys and names as they are, except control bytes, which are escaped so they cannot garble the terminal.
std::string plain(const std::string & s) {
    std::string out;
    for (unsigned char c : s) {
        if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    return out;
}

void print_text(const gguf::GgufInfo & r) {
    std::printf("%s: GGUF v%u, %zu bytes, alignment %u", plain(r.path).c_str(), r.version, r.file_size,
                r.alignment);
    if (r.tensors.empty()) {
        std::printf(", no tensor data\n");
    } else {
        std::printf(", tensor data from byte %" PRIu64 "\n", r.data_offset);
    }
    std::printf("\nmetadata (%zu keys):\n", r.metadata.size());
    for (const auto & kv : r.metadata) {
        std::printf("  %-50s %-14s %s\n", plain(kv.key).c_str(), type_label(kv.value).c_str(),
                    text_value(kv.value).c_str());
    }
    uint64_t total = 0;
    for (const auto & t : r.tensors) total += t.n_bytes;
    std::printf("\ntensors (%zu, %" PRIu64 " bytes):\n", r.tensors.size(), total);
    if (r.tensors.empty()) return;
    std::printf("  %5s  %-44s %-8s %-22s %12s %12s\n", "#", "name", "type", "shape", "offset", "bytes");
    for (size_t k = 0; k < r.tensors.size(); ++k) {
        const auto & t = r.tensors[k];
        std::printf("  %5zu  %-44s %-8s %-22s %12" PRIu64 " %12" PRIu64 "\n", k, plain(t.name).c_str(),
                    t.type.c_str(), shape(t, " x ").c_str(), t.offset, t.n_bytes);
    }
}

void print_json(const gguf::GgufInfo & r, bool full) {
    std::string out = "{\n";
    out += "  \"file\": " + json_string(r.path) + ",\n";
    out += "  \"version\": " + std::to_string(r.version) + ",\n";
    out += "  \"file_size\": " + std::to_string(r.file_size) + ",\n";
    out += "  \"alignment\": " + std::to_string(r.alignment) + ",\n";
    out += "  \"data_offset\": " + std::to_string(r.data_offset) + ",\n";
    out += "  \"metadata\": [";
    for (size_t k = 0; k < r.metadata.size(); ++k) {
        const auto & kv = r.metadata[k];
        out += k == 0 ? "\n" : ",\n";
        out += "    {\"key\": " + json_string(kv.key) + ", \"type\": " + json_string(gguf::value_type_name(kv.value.type));
        if (kv.value.type == ValueType::ARRAY) {
            out += ", \"elem_type\": " + json_string(gguf::value_type_name(kv.value.elem_type));
            out += ", \"count\": " + std::to_string(kv.value.array.size());
            out += std::string(", \"truncated\": ") +
                   (!full && kv.value.array.size() > kJsonArrayItems ? "true" : "false");
        }
        out += ", \"value\": " + json_value(kv.value, full) + "}";
    }
    out += r.metadata.empty() ? "],\n" : "\n  ],\n";
    out += "  \"tensors\": [";
    for (size_t k = 0; k < r.tensors.size(); ++k) {
        const auto & t = r.tensors[k];
        out += k == 0 ? "\n" : ",\n";
        out += "    {\"name\": " + json_string(t.name) + ", \"type\": " +
               json_string(t.type) + ", \"shape\": [" + shape(t, ", ") +
               "], \"offset\": " + std::to_string(t.offset) +
               ", \"file_offset\": " + std::to_string(r.data_offset + t.offset) +
               ", \"bytes\": " + std::to_string(t.n_bytes) + "}";
    }
    out += r.tensors.empty() ? "]\n" : "\n  ]\n";
    out += "}\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
}

int gguf_info(const std::vector<std::string> & args) {
    static const char * usage =
        "usage: offgrid gguf-info FILE [--json] [--full]\n"
        "  prints the metadata and the tensor table of a GGUF file\n"
        "  --json  one JSON document (arrays cut to their first 16 items unless --full)\n";
    std::string path;
    bool json = false;
    bool full = false;
    for (const auto & a : args) {
        if (a == "-h" || a == "--help") {
            std::fputs(usage, stdout);
            return 0;
        }
        if (a == "--json") {
            json = true;
        } else if (a == "--full") {
            full = true;
        } else if (!a.empty() && a[0] == '-') {
            std::fprintf(stderr, "offgrid gguf-info: unknown option '%s'\n", a.c_str());
            return 2;
        } else if (path.empty()) {
            path = a;
        } else {
            std::fprintf(stderr, "offgrid gguf-info: more than one FILE given\n");
            return 2;
        }
    }
    if (path.empty()) {
        std::fputs(usage, stderr);
        return 2;
    }
    const gguf::GgufInfo r = gguf::GgufInfo::read(path);  // errors reach main, which prints one line
    if (json) {
        print_json(r, full);
    } else {
        print_text(r);
    }
    return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

OFFGRID_COMMAND("gguf-info", "metadata and tensor table of a GGUF file (--json for scripts)", gguf_info);

}  // namespace offgrid::cli
