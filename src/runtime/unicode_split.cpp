// The hand-written Qwen pre-tokenizer scans (see unicode_split.h for the regular expressions they implement).
#include "runtime/unicode_split.h"

#include <cstdint>

#include "runtime/unicode.h"

namespace offgrid::runtime {

namespace {

using namespace unicode;

struct Unit {
    uint32_t cp;
    uint32_t offset;  // byte offset in the text
    uint16_t bits;
};

constexpr uint32_t kNone = 0xFFFFFFFF;  // code point "past the end"

uint32_t ascii_lower(uint32_t cp) { return (cp >= 'A' && cp <= 'Z') ? cp + ('a' - 'A') : cp; }

class Scanner {
public:
    Scanner(std::string_view text, PreTokenizer pre) : text_(text) {
        // qwen35 treats combining marks as part of words; qwen2 leaves them to the punctuation runs.
        word_bits_ = pre == PreTokenizer::Qwen35 ? (kLetter | kMark) : kLetter;
        units_.reserve(text.size());
        for (size_t pos = 0; pos < text.size();) {
            const Decoded d = decode_utf8(text, pos);
            units_.push_back({d.cp, static_cast<uint32_t>(pos), category_bits(d.cp)});
            pos += d.len;
        }
    }

    void run(std::vector<std::string_view> & words) {
        const size_t n = units_.size();
        size_t begin = 0;
        const auto emit = [&](size_t end) {
            const size_t from = units_[begin].offset;
            const size_t to = end < n ? units_[end].offset : text_.size();
            words.push_back(text_.substr(from, to - from));
            begin = end;
        };
        while (begin < n) emit(next_end(begin));
    }

private:
    uint32_t cp(size_t i) const { return i < units_.size() ? units_[i].cp : kNone; }
    // Past the end there is no code point at all: every class test fails there.
    uint16_t bits(size_t i) const { return i < units_.size() ? units_[i].bits : 0; }
    bool is_word(size_t i) const { return bits(i) & word_bits_; }
    bool is_newline(size_t i) const { return cp(i) == '\r' || cp(i) == '\n'; }
    // [^\s\p{L}\p{N}] (qwen35 also excludes \p{M}); false past the end.
    bool is_punct_run(size_t i) const {
        return i < units_.size() && !(bits(i) & (kWhitespace | kNumber | word_bits_));
    }

    // End (exclusive) of the word that starts at unit i.
    size_t next_end(size_t i) const {
        const size_t n = units_.size();
        const uint32_t c = cp(i);

        // '(?i:s|t|re|ve|m|ll|d)
        if (c == '\'' && i + 1 < n) {
            const uint32_t a = ascii_lower(cp(i + 1));
            if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
            if (i + 2 < n) {
                const uint32_t b = ascii_lower(cp(i + 2));
                if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
            }
        }

        // [^\r\n\p{L}\p{N}]?\p{L}+ : an optional leading non-letter, then letters.
        if (!is_newline(i) && !(bits(i) & kNumber) && (is_word(i) || is_word(i + 1))) {
            size_t end = i + 1;
            while (is_word(end)) ++end;
            return end;
        }

        // \p{N}: digits one at a time.
        if (bits(i) & kNumber) return i + 1;

        // ' '?[^\s\p{L}\p{N}]+[\r\n]* ; a lone space at the very end is taken here too, as \s+ would take it.
        const size_t first = c == ' ' ? i + 1 : i;
        if (is_punct_run(first) || (c == ' ' && first == n)) {
            size_t end = first;
            while (is_punct_run(end)) ++end;
            while (is_newline(end)) ++end;
            return end;
        }

        // Whitespace: \s*[\r\n]+ up to the last line break of the run, else \s+(?!\S) (leave the last blank to
        // the next word), else \s+.
        size_t end = i;
        size_t after_last_newline = 0;
        while (bits(end) & kWhitespace) {
            if (is_newline(end)) after_last_newline = end + 1;
            ++end;
        }
        if (after_last_newline > 0) return after_last_newline;
        if (end - i > 1 && end < n) return end - 1;
        if (end > i) return end;

        return i + 1;  // nothing matched: the unit alone
    }

    std::string_view text_;
    uint16_t word_bits_;
    std::vector<Unit> units_;
};

}  // namespace

std::optional<PreTokenizer> pre_tokenizer_from_name(std::string_view name) {
    if (name == "qwen2") return PreTokenizer::Qwen2;
    if (name == "qwen35") return PreTokenizer::Qwen35;
    return std::nullopt;
}

std::string_view pre_tokenizer_name(PreTokenizer pre) {
    return pre == PreTokenizer::Qwen35 ? "qwen35" : "qwen2";
}

void split_words(std::string_view text, PreTokenizer pre, std::vector<std::string_view> & words) {
    if (text.empty()) return;
    Scanner(text, pre).run(words);
}

}  // namespace offgrid::runtime
