// libFuzzer target: the replay script parser (runtime/workload). Any text must parse or fail with offgrid::Error
// naming the script line, never crash; every token list of a parsed script resolves to at most kMaxListTokens
// tokens, exactly as many as the parser counted, each inside the vocabulary when it is a rand() or range() token.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "workload/workload.h"

using namespace offgrid::tools;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    const std::string text(reinterpret_cast<const char *>(data), size);
    Workload wl;
    try {
        wl = Workload::parse(text, "fuzz.txt");
    } catch (const offgrid::Error & e) {
        if (std::string(e.what()).rfind("fuzz.txt:", 0) != 0) std::abort();  // every error names the line
        return 0;
    }
    const int32_t n_vocab = 2 + static_cast<int32_t>(size % 300);
    for (const Command & c : wl.commands) {
        if (c.line < 1) std::abort();
        for (const auto & [seq, list] : c.groups) {
            if (list.n_tokens < 0 || list.n_tokens > kMaxListTokens) std::abort();
            // The bound is checked above; long lists are resolved by the same code as short ones, so only short
            // ones are resolved here (a 2^24-token list per input would slow the fuzzer a hundredfold).
            if (list.n_tokens > (1 << 16)) continue;
            std::vector<int32_t> toks;
            try {
                toks = list.resolve(n_vocab);
            } catch (const offgrid::Error &) {
                continue;  // rand() with a vocabulary too small
            }
            if (static_cast<int64_t>(toks.size()) != list.n_tokens) std::abort();
            size_t k = 0;
            for (const TokenItem & it : list.items) {
                const int64_t n = it.kind == TokenItem::Kind::Id ? 1
                                  : it.kind == TokenItem::Kind::Range ? static_cast<int64_t>(it.b - static_cast<uint64_t>(it.a))
                                                                      : it.a;
                for (int64_t i = 0; i < n; ++i, ++k) {
                    const bool ranged = it.kind == TokenItem::Kind::Rand || it.kind == TokenItem::Kind::Range;
                    if (ranged && (toks[k] < 0 || toks[k] >= n_vocab)) std::abort();
                }
            }
        }
    }
    return 0;
}
