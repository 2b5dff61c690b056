// Replies held to JSON: `response_format: {"type": "json_object"}`, and the body of a tool call the request forced
// (tool_choice required or a named function). Before each draw the tokens that cannot continue the reply get
// -inf logits, so the sampler (penalties, top-k, top-p, ... as usual) draws among the others.
//
// JsonPrefix: a pushdown automaton over bytes that accepts exactly the prefixes of one JSON value (RFC 8259:
// objects, arrays, strings with escapes, numbers, true / false / null; not a bare number, which nothing after it
// could end), optionally required to be an object,
// with at most kMaxSpaces whitespace bytes in a row and kMaxDepth nested containers (so a reply cannot idle in
// whitespace or nest without end), and numbers of at most kMaxDigits digits before and after the point and
// kMaxExpDigits in the exponent (every parser reads them as finite doubles). String bytes are taken as they are (UTF-8 is the tokenizer's); a \u escape
// of a surrogate must be a high one followed by its low one (strict parsers refuse lone surrogates), decided at
// the digit that settles it, so every prefix taken still has a continuation.
//
// JsonConstraint: the automaton, a text the reply already holds (fed first: the opened tool call), and a literal
// that must follow the value (the tool call's closing tag). A token is allowed when its whole text keeps the reply
// a prefix of value + literal; tokens without text (control tokens, end of generation) never are. complete():
// the value and the literal are written, the reply ends (the scheduler finishes it with "stop").
//
// Invariants: mask() changes only the logits of tokens it disallows, and at least one token stays allowed while
// the reply is not complete (a JSON prefix always has a one-byte continuation, and the byte tokens of a byte-level
// vocabulary give it); accept() of an allowed token keeps the reply a prefix.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "offgrid/tokenizer.h"

namespace offgrid::server {

class JsonPrefix {
public:
    static constexpr int kMaxDepth = 32;
    static constexpr int kMaxSpaces = 16;
    static constexpr int kMaxDigits = 24;    // of a number's integer and of its fraction part
    static constexpr int kMaxExpDigits = 2;  // of its exponent (so every number is a finite double)

    explicit JsonPrefix(bool object_only = false) : object_only_(object_only) {}
    // Feeds one byte; false (and the state unchanged in meaning: do not feed further) when it cannot continue.
    bool feed(unsigned char c);
    bool feed(std::string_view s) {
        for (const char c : s)
            if (!feed(static_cast<unsigned char>(c))) return false;
        return true;
    }
    bool done() const { return mode_ == Mode::Done; }
    // The next value to start must be an object.
    void require_object() { object_only_ = true; }

private:
    enum class Mode : uint8_t {
        Value,          // a value may start (leading whitespace allowed)
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
        Done,           // the value is complete
    };
    enum class Num : uint8_t { Sign, Zero, Int, Dot, Frac, E, ESign, Exp };
    bool value_start(unsigned char c);
    bool after_value(unsigned char c);  // the value just ended: c goes to the container's next state
    bool space(unsigned char c);
    void close_value();

    std::array<char, kMaxDepth> stack_{};  // '{' or '['
    int depth_ = 0;
    Mode mode_ = Mode::Value;
    Num number_ = Num::Int;
    bool key_ = false;          // the string is an object's key
    uint8_t hex_ = 0;           // \u digits still due
    bool low_ = false;          // the \u escape must be a low surrogate (DC00-DFFF)
    bool high_ = false;         // the \u escape under way is a high surrogate (D800-DBFF)
    uint8_t spaces_ = 0;        // whitespace bytes in a row
    uint8_t digits_ = 0;        // digits of the number part under way
    const char * literal_ = nullptr;  // the rest of the literal
    bool object_only_;
};

// The text of every token of a vocabulary (token_to_piece), built once per tokenizer.
struct TokenTexts {
    explicit TokenTexts(const Tokenizer & tok);
    std::vector<std::string> text;  // empty: a control token
};

class JsonConstraint {
public:
    // `prefix`: text the reply already holds (a JSON prefix); object_only: the next value to start after it must be
    // an object; `suffix`: literal text due after the value.
    JsonConstraint(std::shared_ptr<const TokenTexts> texts, std::string_view prefix, bool object_only, std::string suffix);
    // -inf for the tokens that cannot come next (n: the row's length).
    void mask(float * logits, size_t n) const;
    // The drawn token (one mask() allowed).
    void accept(int32_t token);
    bool allowed(int32_t token) const;
    bool complete() const { return json_.done() && matched_ == suffix_.size(); }

private:
    bool continues(std::string_view text) const;
    std::shared_ptr<const TokenTexts> texts_;
    JsonPrefix json_;
    std::string suffix_;
    size_t matched_ = 0;  // bytes of the suffix written
};

}  // namespace offgrid::server
