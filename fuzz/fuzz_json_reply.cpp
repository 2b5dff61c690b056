// libFuzzer target: bytes through JsonPrefix (server/json_constraint.h), the automaton that holds replies to JSON
// (response_format json_object, forced tool calls), against nlohmann's parser.
//
// The contract, for ASCII inputs without NUL (the automaton takes a string's bytes as they are; the parser checks
// UTF-8 and ends its input at a NUL): an input the automaton takes whole and calls done() is JSON to the parser;
// JSON the parser accepts, with no whitespace before or after it, within the automaton's limits (whitespace runs,
// nesting, digits) and not a bare number, the automaton takes whole and calls done(). For any input: a byte the
// automaton refuses ends every longer input too (it is a prefix automaton); a prefix taken that is not done has a
// byte that continues it; no crash, no sanitizer report. Inputs that start with a byte 1-3 are the rest under a
// schema (an object with typed and enum properties, a recursive tree, a tool call): no dead end, prefixes, and
// JSON when done.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/json_constraint.h"

namespace {

[[noreturn]] void violated(const char * what, std::string_view input) {
    std::fprintf(stderr, "contract violated: %s: %s\n", what, nlohmann::json(std::string(input)).dump(-1, ' ', true,
                 nlohmann::json::error_handler_t::replace).c_str());
    std::abort();
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// Whether the input is inside the automaton's limits: spaces in a row, nesting, digits in a row and after an
// exponent's mark (outside strings).
bool within_limits(std::string_view s) {
    using offgrid::server::JsonPrefix;
    int run = 0, depth = 0, digits = 0;
    bool in_string = false, escape = false, exponent = false;
    for (const char c : s) {
        if (in_string) {
            if (escape) escape = false;
            else if (c == '\\') escape = true;
            else if (c == '"') in_string = false;
            continue;
        }
        if (c >= '0' && c <= '9') {
            if (++digits > (exponent ? JsonPrefix::kMaxExpDigits : JsonPrefix::kMaxDigits)) return false;
        } else if (c != '+' && c != '-') {
            digits = 0;
            exponent = c == 'e' || c == 'E';
        }
        run = is_space(c) ? run + 1 : 0;
        if (run > JsonPrefix::kMaxSpaces) return false;
        if (c == '"') in_string = true;
        if (c == '{' || c == '[') depth = std::max(depth, 0) + 1;
        if (depth > offgrid::server::JsonPrefix::kMaxDepth) return false;
        if (c == '}' || c == ']') --depth;
    }
    return true;
}

// Schemas for the inputs that start with '\x01'..'\x03' (the rest of those inputs is the text): the contract then
// asks for no dead end, prefixes, and JSON when done.
const offgrid::server::JsonSchema & schema(int which) {
    using offgrid::server::JsonSchema;
    static const auto person = JsonSchema::compile(nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"enum": ["a", "bc", 1, 12]},
        "minItems": 1, "maxItems": 3}, "opt": {"anyOf": [{"type": "string"}, {"type": "null"}, {"type": "number"}]},
        "pet": {"$ref": "#/$defs/Pet"}}, "required": ["name", "age"], "additionalProperties": false,
        "$defs": {"Pet": {"type": "object", "properties": {"legs": {"type": "number"}}, "additionalProperties": {"type": "boolean"}}}})"));
    static const auto tree = JsonSchema::compile(nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}}, "required": ["v"],
        "additionalProperties": false})"));
    static const nlohmann::ordered_json get = nlohmann::ordered_json::parse(
        R"({"type": "object", "properties": {"q": {"type": "string"}, "n": {"enum": [1, 2]}}, "required": ["q"],
            "additionalProperties": false})");
    static const auto call = JsonSchema::tool_call({"f", "get"}, {nullptr, &get});
    return which == 1 ? *person : which == 2 ? *tree : *call;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    if (size > 0 && data[0] >= 1 && data[0] <= 3) {
        const offgrid::server::JsonSchema & sc = schema(data[0]);
        const std::string_view s(reinterpret_cast<const char *>(data + 1), size - 1);
        offgrid::server::JsonPrefix j(sc);
        size_t taken = 0;
        while (taken < s.size() && j.feed(static_cast<unsigned char>(s[taken]))) ++taken;
        if (taken == s.size() && !j.done()) {
            bool continues = false;
            for (int b = 0; b < 256 && !continues; ++b) {
                offgrid::server::JsonPrefix k = j;
                continues = k.feed(static_cast<unsigned char>(b));
            }
            if (!continues) violated("a prefix with no continuation under a schema", s);
        }
        offgrid::server::JsonPrefix k(sc);
        if (!k.feed(s.substr(0, taken))) violated("a prefix taken once is refused again under a schema", s);
        bool plain = true;
        for (const char c : s) plain = plain && static_cast<unsigned char>(c) < 0x80 && c != '\0';
        if (plain && taken == s.size() && j.done() && !nlohmann::json::accept(s.begin(), s.end())) {
            violated("completed under a schema what the parser refuses", s);
        }
        return 0;
    }
    const std::string_view s(reinterpret_cast<const char *>(data), size);
    offgrid::server::JsonPrefix j;
    size_t taken = 0;
    while (taken < s.size() && j.feed(static_cast<unsigned char>(s[taken]))) ++taken;
    const bool whole = taken == s.size();
    // No dead end: an input taken whole and not done has a byte that continues it (so a token always stays allowed).
    if (whole && !j.done()) {
        bool continues = false;
        for (int b = 0; b < 256 && !continues; ++b) {
            offgrid::server::JsonPrefix k = j;
            continues = k.feed(static_cast<unsigned char>(b));
        }
        if (!continues) violated("a prefix with no continuation", s);
    }
    // Prefix automaton: refusing byte `taken` means every input that starts like this one fails there too.
    if (!whole) {
        offgrid::server::JsonPrefix k;
        if (!k.feed(s.substr(0, taken))) violated("a prefix taken once is refused again", s);
    }
    bool ascii = true;  // (nlohmann's lexer also ends its input at a NUL byte)
    for (const char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80 && c != '\0';
    if (!ascii) return 0;
    const bool parser = nlohmann::json::accept(s.begin(), s.end());
    if (whole && j.done() && !parser) violated("the automaton completed what the parser refuses", s);
    if (parser && !s.empty() && !is_space(s.front()) && !is_space(s.back()) && within_limits(s)) {
        const auto v = nlohmann::json::parse(s.begin(), s.end());
        if (!v.is_number() && !(whole && j.done())) violated("the parser accepts what the automaton does not complete", s);
    }
    return 0;
}
