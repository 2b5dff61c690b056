// Byte-level BPE: vocabulary tables, special-token partition, merging and detokenisation.
#include "runtime/tokenizer.h"

#include <algorithm>
#include <array>
#include <unordered_map>

#include "common/error.h"
#include "runtime/unicode.h"

namespace offgrid::runtime {

namespace {

std::string byte_text(uint8_t b) {
    std::string s;
    unicode::append_utf8(s, unicode::byte_to_codepoint(b));
    return s;
}

uint64_t pair_key(TokenId left, TokenId right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct Merge {
    uint32_t rank;
    TokenId result;
};

// A candidate merge of two neighbouring symbols. It is stale when either side changed after it was queued.
struct Candidate {
    uint32_t rank;
    int32_t left;      // symbol index
    TokenId left_id;
    TokenId right_id;
    TokenId result;
};

struct LaterCandidate {
    bool operator()(const Candidate & a, const Candidate & b) const {
        return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
};

struct Symbol {
    TokenId id;  // kDead once merged into its left neighbour
    int32_t prev;
    int32_t next;
};

constexpr TokenId kDead = -1;

}  // namespace

struct Tokenizer::Impl {
    PreTokenizer pre = PreTokenizer::Qwen2;
    std::vector<std::string> tokens;
    std::vector<TokenType> types;
    std::unordered_map<std::string_view, TokenId> ids;   // views into `tokens`
    std::unordered_map<uint64_t, Merge> merges;          // (left, right) -> rank and merged token
    std::array<TokenId, 256> byte_tokens{};              // -1 when the vocabulary lacks that byte
    std::vector<TokenId> specials;                       // longest text first
    std::optional<TokenId> bos, eos, pad;
    bool add_bos = false;
    std::vector<TokenId> end_of_generation;  // sorted

    void check_id(TokenId id) const {
        if (id < 0 || static_cast<size_t>(id) >= tokens.size()) {
            throw Error("token id " + std::to_string(id) + " is out of range (vocabulary of " +
                        std::to_string(tokens.size()) + " tokens)");
        }
    }

    void encode_word(std::string_view word, std::vector<Symbol> & symbols, std::vector<Candidate> & heap,
                     std::vector<TokenId> & out) const;
    void encode_text(std::string_view text, std::vector<TokenId> & out) const;
};

Tokenizer::Tokenizer(const TokenizerSpec & spec) {
    auto impl = std::make_shared<Impl>();
    if (spec.model != "gpt2") {
        throw Error("tokenizer.ggml.model: unsupported tokenizer model '" + spec.model + "' (only gpt2 is supported)");
    }
    const auto pre = pre_tokenizer_from_name(spec.pre);
    if (!pre) {
        throw Error("tokenizer.ggml.pre: unsupported pre-tokenizer '" + spec.pre + "' (supported: qwen2, qwen35)");
    }
    impl->pre = *pre;
    if (spec.tokens.empty()) throw Error("tokenizer.ggml.tokens: the vocabulary is empty");
    if (spec.tokens.size() > static_cast<size_t>(INT32_MAX)) throw Error("tokenizer.ggml.tokens: too many tokens");
    if (!spec.token_types.empty() && spec.token_types.size() != spec.tokens.size()) {
        throw Error("tokenizer.ggml.token_type: " + std::to_string(spec.token_types.size()) + " types for " +
                    std::to_string(spec.tokens.size()) + " tokens");
    }
    impl->tokens = spec.tokens;
    const TokenId n = static_cast<TokenId>(impl->tokens.size());
    impl->types.resize(n, TokenType::Normal);
    for (TokenId id = 0; id < static_cast<TokenId>(spec.token_types.size()); ++id) {
        const int32_t t = spec.token_types[id];
        if (t < 1 || t > 6) {
            throw Error("tokenizer.ggml.token_type[" + std::to_string(id) + "]: invalid token type " +
                        std::to_string(t));
        }
        impl->types[id] = static_cast<TokenType>(t);
    }
    // A repeated text resolves to its last id, as in llama.cpp.
    impl->ids.reserve(n);
    for (TokenId id = 0; id < n; ++id) impl->ids[impl->tokens[id]] = id;

    for (int b = 0; b < 256; ++b) {
        const auto it = impl->ids.find(byte_text(static_cast<uint8_t>(b)));
        impl->byte_tokens[b] = it == impl->ids.end() ? -1 : it->second;
    }

    impl->merges.reserve(spec.merges.size());
    for (size_t r = 0; r < spec.merges.size(); ++r) {
        const std::string & m = spec.merges[r];
        const auto where = [&] { return "tokenizer.ggml.merges[" + std::to_string(r) + "] '" + m + "'"; };
        // Split at the first space after the first character, so a left part may itself be a space.
        const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
        if (space == std::string::npos || space + 1 >= m.size()) throw Error(where() + ": not 'left right'");
        const std::string_view left(m.data(), space);
        const std::string_view right(m.data() + space + 1, m.size() - space - 1);
        const auto l = impl->ids.find(left);
        const auto rr = impl->ids.find(right);
        const auto joined = impl->ids.find(std::string(left) + std::string(right));
        if (l == impl->ids.end() || rr == impl->ids.end() || joined == impl->ids.end()) {
            throw Error(where() + ": a part or the merged text is not in the vocabulary");
        }
        // The first (best) rank of a repeated merge wins.
        impl->merges.emplace(pair_key(l->second, rr->second), Merge{static_cast<uint32_t>(r), joined->second});
    }

    for (TokenId id = 0; id < n; ++id) {
        const TokenType t = impl->types[id];
        const bool special = t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown;
        if (special && !impl->tokens[id].empty()) impl->specials.push_back(id);
    }
    std::stable_sort(impl->specials.begin(), impl->specials.end(), [&](TokenId a, TokenId b) {
        return impl->tokens[a].size() > impl->tokens[b].size();
    });

    const auto special_id = [&](std::optional<TokenId> id, const char * key) {
        if (id && (*id < 0 || *id >= n)) {
            throw Error(std::string(key) + ": token id " + std::to_string(*id) + " is out of range (vocabulary of " +
                        std::to_string(n) + " tokens)");
        }
        return id;
    };
    impl->bos = special_id(spec.bos, "tokenizer.ggml.bos_token_id");
    impl->eos = special_id(spec.eos, "tokenizer.ggml.eos_token_id");
    impl->pad = special_id(spec.pad, "tokenizer.ggml.padding_token_id");
    impl->add_bos = spec.add_bos.value_or(false) && impl->bos.has_value();

    // End-of-generation tokens, found by their text the way llama.cpp finds them when the file does not list
    // them: GGUF only stores eos, but chat models end a turn with another control token.
    static const char * const kEndTexts[] = {
        "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "</s>", "<EOT>",
        "_<EOT>", "<|return|>", "<|call|>",
        "<｜end▁of▁sentence｜>",  // DeepSeek's, with full-width bars and U+2581 word marks (UTF-8 source)
    };
    if (impl->eos) impl->end_of_generation.push_back(*impl->eos);
    for (const char * text : kEndTexts) {
        const auto it = impl->ids.find(text);
        if (it != impl->ids.end() && (impl->types[it->second] == TokenType::Control ||
                                      impl->types[it->second] == TokenType::UserDefined)) {
            impl->end_of_generation.push_back(it->second);
        }
    }
    std::sort(impl->end_of_generation.begin(), impl->end_of_generation.end());
    impl->end_of_generation.erase(std::unique(impl->end_of_generation.begin(), impl->end_of_generation.end()),
                                  impl->end_of_generation.end());
    impl_ = std::move(impl);
}

void Tokenizer::Impl::encode_word(std::string_view word, std::vector<Symbol> & symbols,
                                  std::vector<Candidate> & heap, std::vector<TokenId> & out) const {
    symbols.clear();
    heap.clear();
    const int32_t n = static_cast<int32_t>(word.size());
    for (int32_t i = 0; i < n; ++i) {
        const uint8_t b = static_cast<uint8_t>(word[i]);
        const TokenId id = byte_tokens[b];
        if (id < 0) {
            throw Error("tokenize: byte 0x" + std::string(1, "0123456789abcdef"[b >> 4]) +
                        std::string(1, "0123456789abcdef"[b & 15]) + " has no token in the vocabulary");
        }
        symbols.push_back({id, i - 1, i + 1 < n ? i + 1 : -1});
    }
    const LaterCandidate later;
    const auto offer = [&](int32_t left) {
        if (left < 0) return;
        const int32_t right = symbols[left].next;
        if (right < 0) return;
        const auto it = merges.find(pair_key(symbols[left].id, symbols[right].id));
        if (it == merges.end()) return;
        heap.push_back({it->second.rank, left, symbols[left].id, symbols[right].id, it->second.result});
        std::push_heap(heap.begin(), heap.end(), later);
    };
    for (int32_t i = 0; i + 1 < n; ++i) offer(i);

    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), later);
        const Candidate c = heap.back();
        heap.pop_back();
        Symbol & left = symbols[c.left];
        if (left.id != c.left_id || left.next < 0) continue;
        Symbol & right = symbols[left.next];
        if (right.id != c.right_id) continue;
        // Merged ids always have longer text than their parts, so an unchanged id means an unchanged symbol.
        left.id = c.result;
        left.next = right.next;
        if (right.next >= 0) symbols[right.next].prev = c.left;
        right.id = kDead;
        offer(left.prev);
        offer(c.left);
    }
    for (int32_t i = 0; i >= 0 && i < n; i = symbols[i].next) out.push_back(symbols[i].id);
}

void Tokenizer::Impl::encode_text(std::string_view text, std::vector<TokenId> & out) const {
    std::vector<std::string_view> words;
    split_words(text, pre, words);
    std::vector<Symbol> symbols;
    std::vector<Candidate> heap;
    for (const auto word : words) encode_word(word, symbols, heap, out);
}

std::vector<TokenId> Tokenizer::tokenize(std::string_view text, bool parse_special) const {
    std::vector<TokenId> out;
    tokenize(text, parse_special, out);
    return out;
}

void Tokenizer::tokenize(std::string_view text, bool parse_special, std::vector<TokenId> & out) const {
    const Impl & im = *impl_;
    // Fragments of the text: either raw text or one special token. Each special token (longest first) is cut
    // out of the raw fragments that remain, leftmost occurrence first.
    struct Fragment {
        std::string_view raw;
        TokenId special = -1;
    };
    std::vector<Fragment> fragments{{text}};
    std::vector<Fragment> next;
    for (const TokenId id : im.specials) {
        if (!parse_special && im.types[id] != TokenType::UserDefined) continue;
        const std::string & needle = im.tokens[id];
        bool found = false;
        for (const auto & f : fragments) {
            if (f.special < 0 && f.raw.find(needle) != std::string_view::npos) found = true;
        }
        if (!found) continue;
        next.clear();
        for (const auto & f : fragments) {
            if (f.special >= 0) {
                next.push_back(f);
                continue;
            }
            std::string_view rest = f.raw;
            for (size_t at; (at = rest.find(needle)) != std::string_view::npos;) {
                if (at > 0) next.push_back({rest.substr(0, at)});
                next.push_back({{}, id});
                rest.remove_prefix(at + needle.size());
            }
            if (!rest.empty()) next.push_back({rest});
        }
        fragments.swap(next);
    }
    for (const auto & f : fragments) {
        if (f.special >= 0) {
            out.push_back(f.special);
        } else {
            im.encode_text(f.raw, out);
        }
    }
}

std::string Tokenizer::token_to_piece(TokenId id, bool render_special) const {
    const Impl & im = *impl_;
    im.check_id(id);
    const std::string & text = im.tokens[id];
    switch (im.types[id]) {
        case TokenType::Normal: {
            std::string bytes;
            bytes.reserve(text.size());
            for (size_t pos = 0; pos < text.size();) {
                const auto d = unicode::decode_utf8(text, pos);
                const int b = d.valid ? unicode::codepoint_to_byte(d.cp) : -1;
                if (b >= 0) {
                    bytes.push_back(static_cast<char>(b));
                } else {
                    bytes.append(text, pos, d.len);  // not byte-level text: keep it as written
                }
                pos += d.len;
            }
            return bytes;
        }
        case TokenType::UserDefined:
            return text;
        case TokenType::Control:
        case TokenType::Unknown:
            return render_special ? text : std::string();
        case TokenType::Unused:
        case TokenType::Byte:
            return {};
    }
    return {};
}

std::string Tokenizer::detokenize(std::span<const TokenId> ids, bool render_special) const {
    std::string out;
    for (const TokenId id : ids) out += token_to_piece(id, render_special);
    return out;
}

size_t Tokenizer::n_vocab() const { return impl_->tokens.size(); }

const std::string & Tokenizer::token_text(TokenId id) const {
    impl_->check_id(id);
    return impl_->tokens[id];
}

TokenType Tokenizer::token_type(TokenId id) const {
    impl_->check_id(id);
    return impl_->types[id];
}

std::optional<TokenId> Tokenizer::find_token(std::string_view text) const {
    const auto it = impl_->ids.find(text);
    if (it == impl_->ids.end()) return std::nullopt;
    return it->second;
}

std::optional<TokenId> Tokenizer::bos() const { return impl_->bos; }
std::optional<TokenId> Tokenizer::eos() const { return impl_->eos; }
std::optional<TokenId> Tokenizer::pad() const { return impl_->pad; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }

bool Tokenizer::is_end_of_generation(TokenId id) const {
    return std::binary_search(impl_->end_of_generation.begin(), impl_->end_of_generation.end(), id);
}

const std::vector<TokenId> & Tokenizer::end_of_generation_tokens() const { return impl_->end_of_generation; }
PreTokenizer Tokenizer::pre_tokenizer() const { return impl_->pre; }
size_t Tokenizer::n_merges() const { return impl_->merges.size(); }

}  // namespace offgrid::runtime
