#include "server/json_constraint.h"

#include <cmath>
#include <limits>

namespace offgrid::server {

namespace {

bool is_space(unsigned char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

bool JsonPrefix::space(unsigned char c) {
    if (!is_space(c) || spaces_ >= kMaxSpaces) return false;
    ++spaces_;
    return true;
}

void JsonPrefix::close_value() {
    if (depth_ == 0) {
        mode_ = Mode::Done;
        return;
    }
    mode_ = stack_[static_cast<size_t>(depth_ - 1)] == '{' ? Mode::ObjectNext : Mode::ArrayNext;
}

bool JsonPrefix::value_start(unsigned char c) {
    if (is_space(c)) return space(c);
    if (object_only_ && c != '{') return false;
    object_only_ = false;  // only the first value
    spaces_ = 0;
    switch (c) {
        case '{':
        case '[':
            if (depth_ == kMaxDepth) return false;
            stack_[static_cast<size_t>(depth_++)] = static_cast<char>(c);
            mode_ = c == '{' ? Mode::ObjectFirst : Mode::ArrayFirst;
            return true;
        case '"':
            mode_ = Mode::String;
            key_ = false;
            return true;
        case '-':
            if (depth_ == 0) return false;  // a bare number: nothing after it could end it
            mode_ = Mode::Number;
            number_ = Num::Sign;
            digits_ = 0;
            return true;
        case 't': literal_ = "rue"; mode_ = Mode::Literal; return true;
        case 'f': literal_ = "alse"; mode_ = Mode::Literal; return true;
        case 'n': literal_ = "ull"; mode_ = Mode::Literal; return true;
        default:
            if (!is_digit(c) || depth_ == 0) return false;
            mode_ = Mode::Number;
            number_ = c == '0' ? Num::Zero : Num::Int;
            digits_ = 1;
            return true;
    }
}

bool JsonPrefix::after_value(unsigned char c) {
    close_value();
    return feed(c);
}

bool JsonPrefix::feed(unsigned char c) {
    switch (mode_) {
        case Mode::Value:
            return value_start(c);
        case Mode::ObjectFirst:
        case Mode::ObjectKey:
            if (is_space(c)) return space(c);
            spaces_ = 0;
            if (c == '"') {
                mode_ = Mode::String;
                key_ = true;
                return true;
            }
            if (c == '}' && mode_ == Mode::ObjectFirst) {
                --depth_;
                close_value();
                return true;
            }
            return false;
        case Mode::Colon:
            if (is_space(c)) return space(c);
            if (c != ':') return false;
            spaces_ = 0;
            mode_ = Mode::Value;
            return true;
        case Mode::ObjectNext:
        case Mode::ArrayNext: {
            if (is_space(c)) return space(c);
            spaces_ = 0;
            const bool object = mode_ == Mode::ObjectNext;
            if (c == ',') {
                mode_ = object ? Mode::ObjectKey : Mode::Value;
                return true;
            }
            if (c == (object ? '}' : ']')) {
                --depth_;
                close_value();
                return true;
            }
            return false;
        }
        case Mode::ArrayFirst:
            if (c == ']') {
                spaces_ = 0;
                --depth_;
                close_value();
                return true;
            }
            return value_start(c);
        case Mode::String:
            if (c == '"') {
                if (key_) mode_ = Mode::Colon;
                else close_value();
                return true;
            }
            if (c == '\\') {
                mode_ = Mode::Escape;
                return true;
            }
            return c >= 0x20;
        case Mode::Escape:
            if (c == 'u') {
                mode_ = Mode::Unicode;
                hex_ = 4;
                high_ = false;
                return true;
            }
            if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
                mode_ = Mode::String;
                return true;
            }
            return false;
        case Mode::Unicode: {
            if (!is_hex(c)) return false;
            const int digit = 4 - hex_;  // 0..3
            const unsigned char u = static_cast<unsigned char>(c | 0x20);  // lower case
            if (digit == 0) {
                if (low_ && u != 'd') return false;
                high_ = u == 'd';  // maybe a surrogate: the next digit says
            } else if (digit == 1 && high_) {
                const bool high = u == '8' || u == '9' || u == 'a' || u == 'b';
                if (low_ ? high : !high && u >= 'c') return false;  // a low one needs a high one before it
                if (low_ && !(u >= 'c' && u <= 'f')) return false;
                high_ = high;
            } else if (digit == 1) {
                high_ = false;
            }
            if (--hex_ > 0) return true;
            if (high_) {
                mode_ = Mode::LowBackslash;
            } else {
                mode_ = Mode::String;
                low_ = false;
            }
            return true;
        }
        case Mode::LowBackslash:
            if (c != '\\') return false;
            mode_ = Mode::LowU;
            return true;
        case Mode::LowU:
            if (c != 'u') return false;
            mode_ = Mode::Unicode;
            hex_ = 4;
            high_ = false;
            low_ = true;
            return true;
        case Mode::Literal:
            if (c != static_cast<unsigned char>(*literal_)) return false;
            if (*++literal_ == '\0') close_value();
            return true;
        case Mode::Number:
            switch (number_) {
                case Num::Sign:
                    if (!is_digit(c)) return false;
                    number_ = c == '0' ? Num::Zero : Num::Int;
                    digits_ = 1;
                    return true;
                case Num::Zero:
                case Num::Int:
                    if (is_digit(c) && number_ == Num::Int) return ++digits_ <= kMaxDigits;
                    if (c == '.') {
                        number_ = Num::Dot;
                        digits_ = 0;
                        return true;
                    }
                    if (c == 'e' || c == 'E') {
                        number_ = Num::E;
                        digits_ = 0;
                        return true;
                    }
                    return after_value(c);
                case Num::Dot:
                    if (!is_digit(c)) return false;
                    number_ = Num::Frac;
                    digits_ = 1;
                    return true;
                case Num::Frac:
                    if (is_digit(c)) return ++digits_ <= kMaxDigits;
                    if (c == 'e' || c == 'E') {
                        number_ = Num::E;
                        digits_ = 0;
                        return true;
                    }
                    return after_value(c);
                case Num::E:
                    if (c == '+' || c == '-') {
                        number_ = Num::ESign;
                        return true;
                    }
                    [[fallthrough]];
                case Num::ESign:
                    if (!is_digit(c)) return false;
                    number_ = Num::Exp;
                    digits_ = 1;
                    return true;
                case Num::Exp:
                    if (is_digit(c)) return ++digits_ <= kMaxExpDigits;
                    return after_value(c);
            }
            return false;
        case Mode::Done:
            return false;
    }
    return false;
}

TokenTexts::TokenTexts(const Tokenizer & tok) {
    const int32_t n = tok.n_vocab();
    text.resize(static_cast<size_t>(n));
    for (int32_t id = 0; id < n; ++id) {
        const TokenType type = tok.token_type(id);
        if (type == TokenType::Control || type == TokenType::Unused || tok.is_end_of_generation(id)) continue;
        text[static_cast<size_t>(id)] = tok.token_to_piece(id, false);
    }
}

JsonConstraint::JsonConstraint(std::shared_ptr<const TokenTexts> texts, std::string_view prefix, bool object_only,
                               std::string suffix)
    : texts_(std::move(texts)), suffix_(std::move(suffix)) {
    json_.feed(prefix);  // the caller's own text: a JSON prefix by construction
    if (object_only) json_.require_object();
}

bool JsonConstraint::continues(std::string_view text) const {
    JsonPrefix j = json_;
    size_t m = matched_;
    for (size_t i = 0; i < text.size(); ++i) {
        if (!j.done()) {
            if (!j.feed(static_cast<unsigned char>(text[i]))) return false;
            continue;
        }
        if (m == suffix_.size() || text[i] != suffix_[m]) return false;
        ++m;
    }
    return true;
}

bool JsonConstraint::allowed(int32_t token) const {
    if (token < 0 || static_cast<size_t>(token) >= texts_->text.size()) return false;
    const std::string & t = texts_->text[static_cast<size_t>(token)];
    return !t.empty() && !complete() && continues(t);
}

void JsonConstraint::mask(float * logits, size_t n) const {
    const float off = -std::numeric_limits<float>::infinity();
    for (size_t id = 0; id < n; ++id) {
        if (!allowed(static_cast<int32_t>(id))) logits[id] = off;
    }
}

void JsonConstraint::accept(int32_t token) {
    if (token < 0 || static_cast<size_t>(token) >= texts_->text.size()) return;
    for (const char c : texts_->text[static_cast<size_t>(token)]) {
        if (!json_.done()) {
            json_.feed(static_cast<unsigned char>(c));
        } else if (matched_ < suffix_.size()) {
            ++matched_;
        }
    }
}

}  // namespace offgrid::server
