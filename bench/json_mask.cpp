// The cost of holding a reply to JSON (server/json_constraint.h): one mask() over a vocabulary, per state of the
// reply (its start, inside a string, after a colon, inside an array), and the token-text table built once.
// Run by hand: bench_json_mask [VOCAB.gguf] (default: the byte vocabulary; the Qwen one is
// ../shared/data/ggml-vocab-qwen35.gguf).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "runtime/byte_vocab.h"
#include "server/json_constraint.h"

int main(int argc, char ** argv) {
    using namespace offgrid;
    using Clock = std::chrono::steady_clock;
    const Tokenizer tok = argc > 1 ? Tokenizer::from_file(argv[1])
                                   : Tokenizer(std::make_shared<const runtime::Tokenizer>(runtime::byte_vocab_tokenizer()));
    const auto t0 = Clock::now();
    const auto texts = std::make_shared<const server::TokenTexts>(tok);
    const auto t1 = Clock::now();
    std::printf("vocabulary %d tokens, token texts %.1f ms\n", tok.n_vocab(), std::chrono::duration<double, std::milli>(t1 - t0).count());
    struct State {
        const char * what;
        const char * prefix;
    };
    for (const State & st : {State{"start of an object reply", ""}, State{"inside a key", "{\"key"},
                             State{"after a colon", "{\"a\": "}, State{"inside an array", "{\"a\": [1, 2"}}) {
        server::JsonConstraint c(texts, nullptr, st.prefix[0] == '\0', st.prefix, "");
        std::vector<float> logits(static_cast<size_t>(tok.n_vocab()), 0.0f);
        constexpr int kReps = 20;
        const auto a = Clock::now();
        for (int r = 0; r < kReps; ++r) c.mask(logits.data(), logits.size());
        const auto b = Clock::now();
        size_t allowed = 0;
        for (const float v : logits) allowed += v == 0.0f;
        std::printf("%-26s %7.2f ms per mask, %zu tokens allowed\n", st.what,
                    std::chrono::duration<double, std::milli>(b - a).count() / kReps, allowed);
    }
    return 0;
}
