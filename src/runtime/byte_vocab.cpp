// The embedded byte-level vocabulary: a sample text, a tiny deterministic BPE trainer and the cached result.
#include "runtime/byte_vocab.h"

#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/unicode.h"
#include "runtime/unicode_split.h"

namespace offgrid::runtime {

namespace {

// Written for this project. Plain, varied English so the merges cover common words, endings and punctuation.
constexpr std::string_view kSample =
    "The cabin stands at the end of a long gravel road, where the power lines stop and the forest begins. "
    "There is no grid here. A small array of solar panels on the roof charges a bank of batteries in the shed, "
    "and on a clear day there is more than enough energy to run the lights, the pump and an old laptop. "
    "On grey days in winter the numbers on the charge controller fall, and the people who live there learn "
    "to wait, to plan and to do the heavy work when the sun comes back.\n\n"
    "The laptop has no network connection either. Everything it needs must already be on its disk: the maps, "
    "the manuals, the recipes, the letters that were written last year and the notes about the garden. "
    "When a question comes up, nobody can ask a server on the other side of the world. The answer has to be "
    "found in the files, or worked out from what is known.\n\n"
    "That is why a small language model runs on the processor of that laptop. It is not fast and it is not "
    "large, but it is patient. It reads a question one token at a time, keeps what it has read in its memory, "
    "and writes an answer word by word. It does not need a graphics card. It only needs a few gigabytes of "
    "memory, a careful program, and the time to think.\n\n"
    "Running a model like this is mostly about memory. Every token that the model has seen leaves keys and "
    "values behind, and the next token looks back at them. If the text is long, the cache grows, and looking at "
    "every entry becomes slow. A sparse model keeps a short summary of each block of tokens, reads the "
    "summaries first, and then looks closely only at the blocks that matter. The rest of the cache stays on the "
    "shelf, untouched, until it is needed again.\n\n"
    "In the evening, when the batteries are full, the family asks the model to help with small things. "
    "How long should the bread rise when the kitchen is cold? Which seeds can be planted in the north bed "
    "before the last frost? What did the letter from the neighbour say about the bridge over the river? "
    "The model is often right, sometimes wrong, and always honest about the numbers it was given: "
    "12 volts, 4 panels, 180 watts each, 3 days of cloud.\n\n"
    "Numbers, names and punctuation all end up as bytes in the end. The tokenizer turns every byte into a "
    "symbol, then joins the pairs that occur most often into longer pieces: \"th\", \"the\", \"ing\", \" and\". "
    "Words that it has never seen still work, because every byte has a token of its own. Nothing is lost "
    "on the way in, and nothing is added on the way out.\n";

std::string byte_level(std::string_view raw) {
    std::string out;
    for (const char c : raw) unicode::append_utf8(out, unicode::byte_to_codepoint(static_cast<uint8_t>(c)));
    return out;
}

}  // namespace

std::string_view byte_vocab_sample_text() { return kSample; }

TokenizerSpec train_byte_vocab(std::string_view text, size_t max_merges) {
    TokenizerSpec spec;
    spec.model = "gpt2";
    spec.pre = "qwen2";
    std::unordered_map<std::string, TokenId> ids;
    for (int b = 0; b < 256; ++b) {
        spec.tokens.push_back(byte_level(std::string(1, static_cast<char>(b))));
        spec.token_types.push_back(static_cast<int32_t>(TokenType::Normal));
        ids.emplace(spec.tokens.back(), b);
    }

    // Distinct words with their counts, each as a sequence of token ids (bytes at first). std::map keeps the
    // order, and so the result, independent of hashing.
    std::vector<std::string_view> split;
    split_words(text, PreTokenizer::Qwen2, split);
    std::map<std::string_view, int64_t> word_counts;
    for (const auto w : split) ++word_counts[w];
    std::vector<std::pair<std::vector<TokenId>, int64_t>> words;
    for (const auto & [w, n] : word_counts) {
        std::vector<TokenId> seq;
        for (const char c : w) seq.push_back(static_cast<uint8_t>(c));
        words.emplace_back(std::move(seq), n);
    }

    while (spec.merges.size() < max_merges) {
        std::map<std::pair<TokenId, TokenId>, int64_t> pair_counts;
        for (const auto & [seq, n] : words) {
            for (size_t i = 0; i + 1 < seq.size(); ++i) pair_counts[{seq[i], seq[i + 1]}] += n;
        }
        std::pair<TokenId, TokenId> best{};
        int64_t best_count = 1;  // a merge must pay off at least twice
        for (const auto & [pair, n] : pair_counts) {
            if (n > best_count) {
                best = pair;
                best_count = n;
            }
        }
        if (best_count < 2) break;

        const std::string joined = spec.tokens[best.first] + spec.tokens[best.second];
        auto [it, added] = ids.emplace(joined, static_cast<TokenId>(spec.tokens.size()));
        if (added) {
            spec.tokens.push_back(joined);
            spec.token_types.push_back(static_cast<int32_t>(TokenType::Normal));
        }
        spec.merges.push_back(spec.tokens[best.first] + " " + spec.tokens[best.second]);

        for (auto & [seq, n] : words) {
            std::vector<TokenId> merged;
            merged.reserve(seq.size());
            for (size_t i = 0; i < seq.size(); ++i) {
                if (i + 1 < seq.size() && seq[i] == best.first && seq[i + 1] == best.second) {
                    merged.push_back(it->second);
                    ++i;
                } else {
                    merged.push_back(seq[i]);
                }
            }
            seq.swap(merged);
        }
    }

    spec.eos = static_cast<TokenId>(spec.tokens.size());
    spec.tokens.emplace_back(kByteVocabEos);
    spec.token_types.push_back(static_cast<int32_t>(TokenType::Control));
    return spec;
}

const TokenizerSpec & byte_vocab_spec() {
    static const TokenizerSpec spec = train_byte_vocab(kSample, kByteVocabMaxMerges);
    return spec;
}

Tokenizer byte_vocab_tokenizer() {
    static const Tokenizer tokenizer(byte_vocab_spec());
    return tokenizer;
}

std::vector<gguf::KeyValue> byte_vocab_metadata(uint32_t n_vocab) {
    const TokenizerSpec & base = byte_vocab_spec();
    if (n_vocab <= base.tokens.size()) return tokenizer_metadata(base);
    // A wider head than the vocabulary (the bench shape): the extra ids are Unused tokens, which tokenizing never
    // produces and detokenizing prints as nothing, so the embedding and output matrices have the asked rows.
    TokenizerSpec spec = base;
    if (spec.token_types.empty()) spec.token_types.assign(spec.tokens.size(), static_cast<int32_t>(TokenType::Normal));
    for (size_t id = base.tokens.size(); id < n_vocab; ++id) {
        spec.tokens.push_back("<|unused_" + std::to_string(id) + "|>");
        spec.token_types.push_back(static_cast<int32_t>(TokenType::Unused));
    }
    return tokenizer_metadata(spec);
}

}  // namespace offgrid::runtime
