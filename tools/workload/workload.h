// Workload scripts (the golden set's format, /work/shared/golden/README.md): one command per line that drives a
// context through decodes, sequence edits and state saves. This file only parses; runtime/replay executes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace offgrid::tools {

// One item of a token list: an id, rand(N,SEED), range(A,B) or rep(N,TOK).
struct TokenItem {
    enum class Kind { Id, Rand, Range, Rep } kind = Kind::Id;
    int64_t a = 0;   // Id: the id; Rand: N; Range: A; Rep: N
    uint64_t b = 0;  // Rand: SEED; Range: B; Rep: TOK
};

// The most tokens one token list (so one command) may produce: rep, rand and range counts, and their sum, are
// refused above it with the line named, so no script line can allocate without bound.
inline constexpr int64_t kMaxListTokens = int64_t{1} << 24;

// A token list with an optional explicit start position (@POS). Tokens are resolved once n_vocab is known.
struct TokenList {
    std::vector<TokenItem> items;
    std::optional<int32_t> start_pos;
    int64_t n_tokens = 0;  // what resolve() will produce (at most kMaxListTokens)

    std::vector<int32_t> resolve(int32_t n_vocab) const;
};

// The script's pseudo-random token generator (64-bit LCG), exposed for tests.
std::vector<int32_t> rand_tokens(int64_t n, uint64_t seed, int32_t n_vocab);

struct BatchEntry {
    int32_t token = 0;
    int32_t pos = 0;
    std::vector<int32_t> seqs;
    bool output = true;
};

struct Command {
    enum class Kind {
        Set, Recreate, Echo,
        Decode, DecodeEach, DecodeChunks, MDecode, Batch, Gen,
        Rm, Cp, Keep, Clear, Pos, Add, Div,
        SaveState, LoadState, SaveAll, LoadAll, Snap, Restore,
        Unknown,
    };

    Kind kind = Kind::Unknown;
    int line = 0;                 // 1-based line in the script
    std::string text;             // Set: key; Echo: text; Unknown: the whole line
    std::string value;            // Set: value
    int32_t seq = 0;              // the sequence most commands act on (Cp: source)
    int32_t seq2 = 0;             // Cp: destination
    int32_t n = 0;                // DecodeChunks: chunk size; Gen: count
    int32_t p0 = -1, p1 = -1;     // Rm, Cp, Add, Div ranges
    int32_t delta = 0;            // Add: shift; Div: divisor
    int32_t flags = 0;            // Snap, Restore
    std::string name;             // state file or snapshot name
    std::vector<std::pair<int32_t, TokenList>> groups;  // Decode*: one group; MDecode: several
    std::vector<BatchEntry> entries;                    // Batch
};

struct Workload {
    std::string name;
    std::vector<Command> commands;

    // Throws offgrid::Error naming the script and line for malformed input (also bytes that are not text, and
    // counts beyond kMaxListTokens). load() refuses anything but a regular file by name.
    static Workload parse(const std::string & text, const std::string & name);
    static Workload load(const std::string & path);
};

}  // namespace offgrid::tools
