// Replies held to JSON: `response_format` json_object and json_schema, and the body of a tool call the request
// forced (tool_choice required or a named function). Before each draw the tokens that cannot continue the reply get
// -inf logits, so the sampler (penalties, top-k, top-p, ... as usual) draws among the others.
//
// JsonSchema: a JSON schema compiled into nodes the automaton follows: types, enum / const, an object's properties,
// required keys and additionalProperties, an array's items and minItems / maxItems, anyOf / oneOf whose
// alternatives start with different bytes, local $ref; and a tool call's object, whose name (written first)
// chooses its arguments' schema. Annotations and the value checks this does not enforce (format, pattern,
// lengths, bounds, ...) are ignored; the structural keywords it cannot follow are refused.
//
// JsonPrefix: a pushdown automaton over bytes that accepts exactly the prefixes of one JSON value (RFC 8259) that
// the schema allows (no schema: any value). Not a bare number at the top (nothing after it could end it); at most
// kMaxSpaces whitespace bytes in a row and kMaxDepth nested containers (a reply cannot idle in whitespace or nest
// without end); numbers of at most kMaxDigits digits before and after the point and kMaxExpDigits in the exponent
// (every parser reads them as finite doubles); a \u escape of a surrogate must be a high one followed by its low
// one (strict parsers refuse lone ones), decided at the digit that settles it. String bytes are taken as they are
// (UTF-8 is the tokenizer's). Enum values must be written as their compact JSON text.
//
// JsonConstraint: the automaton, a text the reply already holds (fed first: the opened tool call), and a literal
// that must follow the value (the tool call's closing tag). A token is allowed when its whole text keeps the reply
// a prefix of value + literal; tokens without text (control tokens, end of generation) never are. complete():
// the value and the literal are written, the reply ends (the scheduler finishes it with "stop").
//
// Invariants: a prefix the automaton takes and that is not done has a byte that continues it (the schema compiler
// refuses what would break this, e.g. minItems above maxItems), so mask() leaves a byte-level vocabulary at least
// one token while the reply is not complete; mask() changes only the logits of tokens it disallows; accept() of an
// allowed token keeps the reply a prefix.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "offgrid/tokenizer.h"

namespace offgrid::server {

class JsonSchema {
public:
    enum Type : uint8_t { kObject = 1, kArray = 2, kString = 4, kInteger = 8, kNumber = 16, kBoolean = 32, kNull = 64, kAll = 127 };
    static constexpr int kAny = 0;     // the node that takes any value
    static constexpr int kNone = -1;   // no node: additionalProperties false
    static constexpr size_t kMaxKeys = 64;
    static constexpr size_t kMaxLiterals = 64;
    static constexpr size_t kMaxNodes = 4096;

    struct Node {
        uint8_t types = kAll;
        std::vector<std::string> literals;  // enum / const: compact JSON texts (empty: any value of `types`)
        std::vector<std::string> keys;      // declared properties, as written between the quotes
        std::vector<int> key_nodes;
        uint64_t required = 0;              // bits of `keys`
        int additional = kAny;              // node of other keys' values, or kNone
        int items = kAny;
        uint32_t min_items = 0, max_items = UINT32_MAX;
        std::vector<int> alternatives;      // anyOf / oneOf, each starting with other bytes (no literals, no types)
        bool ordered = false;               // the keys come in their declared order
        // A tool call's object: the value of key switch_key is of switch_nodes[i], where i is the literal that the
        // value of key switch_on took (the function's name chooses the arguments' schema).
        int switch_on = -1, switch_key = -1;
        std::vector<int> switch_nodes;
    };

    // Throws std::invalid_argument naming what is not supported.
    static std::shared_ptr<const JsonSchema> compile(const nlohmann::ordered_json & schema);
    // A tool call's object: {"name": one of `names`, "arguments": a value of that function's parameters (each its
    // own document for $ref; null, or a schema compile() refuses: any object)}, in that order, no other keys.
    static std::shared_ptr<const JsonSchema> tool_call(const std::vector<std::string> & names,
                                                       const std::vector<const nlohmann::ordered_json *> & parameters);
    static const JsonSchema & any();         // any value
    static const JsonSchema & any_object();  // any object

    // Whether a value of node n may start with byte c (at the top: `top`, where no number may start).
    bool starts(int n, unsigned char c, bool top) const;

    std::vector<Node> nodes;  // [0]: any value
    int root = kAny;
};

class JsonPrefix {
public:
    static constexpr int kMaxDepth = 32;
    static constexpr int kMaxSpaces = 16;
    static constexpr int kMaxDigits = 24;    // of a number's integer and of its fraction part
    static constexpr int kMaxExpDigits = 2;  // of its exponent

    // Any value (object_only: an object).
    explicit JsonPrefix(bool object_only = false);
    // A value of `schema` (which must outlive the automaton).
    explicit JsonPrefix(const JsonSchema & schema);
    // Copies only the containers in use (an automaton is copied for every token a mask checks).
    JsonPrefix(const JsonPrefix & o) { *this = o; }
    JsonPrefix & operator=(const JsonPrefix & o);

    // Feeds one byte; false when it cannot continue the value (then do not feed further).
    bool feed(unsigned char c);
    bool feed(std::string_view s) {
        for (const char c : s)
            if (!feed(static_cast<unsigned char>(c))) return false;
        return true;
    }
    bool done() const { return mode_ == Mode::Done; }
    // Inside a string that takes any bytes but '"', '\\' and control bytes (a value, or a key nothing constrains).
    bool free_string() const;

private:
    enum class Mode : uint8_t {
        Value,          // a value of node pending_ may start (leading whitespace allowed)
        ObjectFirst,    // after '{': a key or '}'
        ObjectKey,      // after ',' in an object: a key
        Colon,          // after a key
        ObjectNext,     // after a member's value: ',' or '}'
        ArrayFirst,     // after '[': a value or ']'
        ArrayNext,      // after an element: ',' or ']'
        String,         // inside a string (key or value)
        Escape,         // after '\' in a string
        Unicode,        // inside \uXXXX
        LowBackslash,   // after a high surrogate's \uXXXX: its low surrogate's '\' is due
        LowU,           // ... and its 'u'
        Number,         // inside a number (number_ says where)
        Literal,        // inside true / false / null
        Enum,           // inside a value that must be one of node value_'s literals
        Done,           // the value is complete
    };
    enum class Num : uint8_t { Sign, Zero, Int, Dot, Frac, E, ESign, Exp };
    struct Frame {
        uint64_t seen;   // keys written (objects)
        uint32_t count;  // elements started (arrays)
        int32_t node;
        int32_t choice;  // the literal the switch_on key's value took (-1: none yet)
        bool object;
    };
    const JsonSchema::Node & node(int n) const { return schema_->nodes[static_cast<size_t>(n)]; }
    bool value_start(unsigned char c);
    bool after_value(unsigned char c);  // the value just ended: c goes to the container's next state
    bool space(unsigned char c);
    bool string_byte(unsigned char c);  // a byte of a key, matched against the object's keys
    bool key_start();
    bool key_end();
    bool more_keys(const Frame & f) const;
    void close_value();
    void enum_closes();  // an enum value ends: a tool call's name chooses its arguments' schema
    bool number_allows_fraction() const;

    const JsonSchema * schema_;
    std::array<Frame, kMaxDepth> stack_;
    int depth_ = 0;
    Mode mode_ = Mode::Value;
    Num number_ = Num::Int;
    int32_t pending_ = JsonSchema::kAny;  // the node of the next value
    int32_t value_ = JsonSchema::kAny;    // the node of the scalar under way
    int32_t prop_ = -1;                   // the key just written: its index, -1 an undeclared one
    uint64_t candidates_ = 0;             // keys (or literals) the bytes so far still match
    uint16_t pos_ = 0;                    // bytes of the key (or literal) so far
    bool key_ = false;                    // the string is an object's key
    uint8_t hex_ = 0;                     // \u digits still due
    bool low_ = false;                    // the \u escape must be a low surrogate (DC00-DFFF)
    bool high_ = false;                   // the \u escape under way is a high surrogate (D800-DBFF)
    uint8_t spaces_ = 0;                  // whitespace bytes in a row
    uint8_t digits_ = 0;                  // digits of the number part under way
    const char * literal_ = nullptr;      // the rest of true / false / null
};

// The text of every token of a vocabulary (token_to_piece), built once per tokenizer.
struct TokenTexts {
    explicit TokenTexts(const Tokenizer & tok);
    std::vector<std::string> text;  // empty: a control token
    std::vector<uint8_t> plain;     // the text has no '"', '\\' or control byte: it continues any free string
    std::vector<uint8_t> first;     // the text's first byte (0 for an empty text), read without touching the text
};

class JsonConstraint {
public:
    // schema: null for any value (object_only: any object); `prefix`: text the reply already holds (a prefix of
    // such a value); `suffix`: literal text due after the value.
    JsonConstraint(std::shared_ptr<const TokenTexts> texts, std::shared_ptr<const JsonSchema> schema, bool object_only,
                   std::string_view prefix, std::string suffix);
    // -inf for the tokens that cannot come next (n: the row's length); returns how many are left.
    size_t mask(float * logits, size_t n) const;
    // The drawn token (one mask() allowed).
    void accept(int32_t token);
    bool allowed(int32_t token) const;
    bool complete() const { return json_.done() && matched_ == suffix_.size(); }

private:
    bool continues(std::string_view text) const;
    std::shared_ptr<const TokenTexts> texts_;
    std::shared_ptr<const JsonSchema> schema_;
    JsonPrefix json_;
    std::string suffix_;
    size_t matched_ = 0;  // bytes of the suffix written
};

}  // namespace offgrid::server
