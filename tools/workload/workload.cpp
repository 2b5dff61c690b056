#include "workload/workload.h"

#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "offgrid/error.h"
#include "offgrid/files.h"

namespace offgrid::tools {

std::vector<int32_t> rand_tokens(int64_t n, uint64_t seed, int32_t n_vocab) {
    constexpr uint64_t kMul = 6364136223846793005ull;
    constexpr uint64_t kAdd = 1442695040888963407ull;
    std::vector<int32_t> out;
    if (n_vocab < 2) {
        throw Error("rand(): the vocabulary needs at least 2 tokens");
    }
    out.reserve(n > 0 ? static_cast<size_t>(n) : 0);
    uint64_t x = seed * kMul + kAdd;
    for (int64_t i = 0; i < n; ++i) {
        x = x * kMul + kAdd;
        out.push_back(static_cast<int32_t>(1 + (x >> 33) % static_cast<uint64_t>(n_vocab - 1)));
    }
    return out;
}

std::vector<int32_t> TokenList::resolve(int32_t n_vocab) const {
    std::vector<int32_t> out;
    for (const auto & it : items) {
        switch (it.kind) {
        case TokenItem::Kind::Id:
            out.push_back(static_cast<int32_t>(it.a));
            break;
        case TokenItem::Kind::Rand: {
            auto r = rand_tokens(it.a, it.b, n_vocab);
            out.insert(out.end(), r.begin(), r.end());
            break;
        }
        case TokenItem::Kind::Range:
            for (int64_t t = it.a; t < static_cast<int64_t>(it.b); ++t) {
                out.push_back(static_cast<int32_t>(((t % n_vocab) + n_vocab) % n_vocab));
            }
            break;
        case TokenItem::Kind::Rep:
            // The parser refused tokens outside int32; the cast gives back the signed value it checked.
            out.insert(out.end(), static_cast<size_t>(it.a), static_cast<int32_t>(static_cast<int64_t>(it.b)));
            break;
        }
    }
    return out;
}

namespace {

// Parse state for one line, so every error names the script and the line.
struct LineParser {
    const std::string & script;
    int line;

    [[noreturn]] void fail(const std::string & what) const {
        throw Error(script + ":" + std::to_string(line) + ": " + what);
    }

    int64_t integer(const std::string & s, const char * what) const {
        int64_t v = 0;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || p != s.data() + s.size()) {
            fail(std::string("expected an integer for ") + what + ", got '" + s + "'");
        }
        return v;
    }

    int32_t int32(const std::string & s, const char * what) const {
        const int64_t v = integer(s, what);
        if (v < INT32_MIN || v > INT32_MAX) {
            fail(std::string(what) + " out of range: " + s);
        }
        return static_cast<int32_t>(v);
    }

    // "name(a,b)" -> {a, b}
    std::pair<int64_t, int64_t> call_args(const std::string & item, size_t open) const {
        if (item.back() != ')') {
            fail("unclosed '(' in '" + item + "'");
        }
        const std::string inner = item.substr(open + 1, item.size() - open - 2);
        const size_t comma = inner.find(',');
        if (comma == std::string::npos) {
            fail("expected two arguments in '" + item + "'");
        }
        return {integer(inner.substr(0, comma), "first argument"), integer(inner.substr(comma + 1), "second argument")};
    }

    void add_item(TokenList & list, const std::string & item) const {
        if (item.empty()) {
            fail("empty token item");
        }
        if (item[0] == '@') {
            if (!list.items.empty() || list.start_pos) {
                fail("@POS must come first in a token list");
            }
            list.start_pos = int32(item.substr(1), "@POS");
            return;
        }
        const size_t open = item.find('(');
        if (open == std::string::npos) {
            if (list.n_tokens + 1 > kMaxListTokens) fail("the list is longer than " + std::to_string(kMaxListTokens) + " tokens");
            list.items.push_back({TokenItem::Kind::Id, int32(item, "token id"), 0});
            ++list.n_tokens;
            return;
        }
        const std::string fn = item.substr(0, open);
        auto [a, b] = call_args(item, open);
        int64_t count = 0;
        if (fn == "rand") {
            if (a < 0) fail("rand(): negative count");
            count = a;
            list.items.push_back({TokenItem::Kind::Rand, a, static_cast<uint64_t>(b)});
        } else if (fn == "range") {
            if (b < a) fail("range(): end before start");
            // b - a in unsigned arithmetic: exact for b >= a, where the signed difference could overflow.
            const uint64_t span = static_cast<uint64_t>(b) - static_cast<uint64_t>(a);
            count = span > static_cast<uint64_t>(kMaxListTokens) ? kMaxListTokens + 1 : static_cast<int64_t>(span);
            list.items.push_back({TokenItem::Kind::Range, a, static_cast<uint64_t>(b)});
        } else if (fn == "rep") {
            if (a < 0) fail("rep(): negative count");
            if (b < INT32_MIN || b > INT32_MAX) fail("rep(): token " + std::to_string(b) + " does not fit in 32 bits");
            count = a;
            list.items.push_back({TokenItem::Kind::Rep, a, static_cast<uint64_t>(b)});
        } else {
            fail("unknown token function '" + fn + "'");
        }
        if (count > kMaxListTokens || list.n_tokens + count > kMaxListTokens) {
            fail(fn + "(): " + item + " makes the list longer than " + std::to_string(kMaxListTokens) + " tokens");
        }
        list.n_tokens += count;
    }

    // Items separated by `sep` (white space was already split off; mdecode groups use commas).
    TokenList list_from(const std::vector<std::string> & items) const {
        TokenList list;
        for (const auto & it : items) {
            add_item(list, it);
        }
        return list;
    }
};

std::vector<std::string> split(const std::string & s, char sep) {
    std::vector<std::string> out;
    std::string cur;
    for (char c : s) {
        if (c == sep) {
            out.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    out.push_back(cur);
    return out;
}

std::vector<std::string> words(const std::string & line) {
    std::istringstream in(line);
    std::vector<std::string> out;
    for (std::string w; in >> w;) {
        out.push_back(w);
    }
    return out;
}

struct KindName {
    const char * name;
    Command::Kind kind;
};

constexpr KindName kKinds[] = {
    {"set", Command::Kind::Set},           {"recreate", Command::Kind::Recreate},
    {"echo", Command::Kind::Echo},         {"decode", Command::Kind::Decode},
    {"decode-each", Command::Kind::DecodeEach}, {"decode-chunks", Command::Kind::DecodeChunks},
    {"mdecode", Command::Kind::MDecode},   {"batch", Command::Kind::Batch},
    {"gen", Command::Kind::Gen},           {"rm", Command::Kind::Rm},
    {"cp", Command::Kind::Cp},             {"keep", Command::Kind::Keep},
    {"clear", Command::Kind::Clear},       {"pos", Command::Kind::Pos},
    {"add", Command::Kind::Add},           {"div", Command::Kind::Div},
    {"save-state", Command::Kind::SaveState}, {"load-state", Command::Kind::LoadState},
    {"save-all", Command::Kind::SaveAll},  {"load-all", Command::Kind::LoadAll},
    {"snap", Command::Kind::Snap},         {"restore", Command::Kind::Restore},
};

}  // namespace

Workload Workload::parse(const std::string & text, const std::string & name) {
    Workload wl;
    wl.name = name;

    std::istringstream in(text);
    std::string raw;
    int line_no = 0;
    Command * open_batch = nullptr;

    while (std::getline(in, raw)) {
        ++line_no;
        for (const char ch : raw) {
            const auto u = static_cast<unsigned char>(ch);
            if ((u < 0x20 && ch != '\t' && ch != '\r') || u == 0x7f) {
                char hex[8];
                std::snprintf(hex, sizeof hex, "0x%02x", u);
                throw Error(name + ":" + std::to_string(line_no) + ": byte " + hex + " is not text (not a workload script?)");
            }
        }
        const std::string line = raw.substr(0, raw.find('#'));
        const auto w = words(line);
        if (w.empty()) {
            continue;
        }
        LineParser lp{name, line_no};

        if (open_batch != nullptr) {
            if (w[0] == "end") {
                if (w.size() != 1) lp.fail("'end' takes no arguments");
                open_batch = nullptr;
                continue;
            }
            if (w.size() < 3 || w.size() > 4) {
                lp.fail("batch entry must be 'TOK POS SEQS [OUT]'");
            }
            BatchEntry e;
            e.token = lp.int32(w[0], "token");
            e.pos = lp.int32(w[1], "position");
            for (const auto & s : split(w[2], ',')) {
                e.seqs.push_back(lp.int32(s, "sequence id"));
            }
            if (w.size() == 4) {
                e.output = lp.int32(w[3], "output flag") != 0;
            }
            open_batch->entries.push_back(std::move(e));
            continue;
        }

        Command c;
        c.line = line_no;
        c.kind = Command::Kind::Unknown;
        for (const auto & k : kKinds) {
            if (w[0] == k.name) {
                c.kind = k.kind;
            }
        }
        auto need = [&](size_t lo, size_t hi) {
            if (w.size() < lo || w.size() > hi) {
                lp.fail("'" + w[0] + "' takes " + std::to_string(lo - 1) +
                        (hi != lo ? " to " + std::to_string(hi - 1) : std::string()) + " arguments");
            }
        };
        const std::vector<std::string> rest(w.begin() + 1, w.end());

        switch (c.kind) {
        case Command::Kind::Set:
            need(3, 3);
            c.text = w[1];
            c.value = w[2];
            break;
        case Command::Kind::Recreate:
        case Command::Kind::Clear:
            need(1, 1);
            break;
        case Command::Kind::Echo: {
            const size_t at = line.find("echo");
            c.text = line.substr(at + 4);
            const size_t b = c.text.find_first_not_of(" \t");
            c.text = b == std::string::npos ? std::string() : c.text.substr(b);
            while (!c.text.empty() && (c.text.back() == ' ' || c.text.back() == '\t' || c.text.back() == '\r')) {
                c.text.pop_back();
            }
            break;
        }
        case Command::Kind::Decode:
        case Command::Kind::DecodeEach:
            need(3, SIZE_MAX);
            c.seq = lp.int32(w[1], "sequence id");
            c.groups.emplace_back(c.seq, lp.list_from({w.begin() + 2, w.end()}));
            break;
        case Command::Kind::DecodeChunks:
            need(4, SIZE_MAX);
            c.n = lp.int32(w[1], "chunk size");
            if (c.n <= 0) lp.fail("chunk size must be positive");
            c.seq = lp.int32(w[2], "sequence id");
            c.groups.emplace_back(c.seq, lp.list_from({w.begin() + 3, w.end()}));
            break;
        case Command::Kind::MDecode:
            need(2, SIZE_MAX);
            for (const auto & g : rest) {
                const size_t colon = g.find(':');
                if (colon == std::string::npos) lp.fail("mdecode group must be SEQ:TOKS, got '" + g + "'");
                // commas separate items, but not the commas inside rand(...) and friends
                std::vector<std::string> items;
                std::string cur;
                int depth = 0;
                for (char ch : g.substr(colon + 1)) {
                    if (ch == '(') ++depth;
                    if (ch == ')') --depth;
                    if (ch == ',' && depth == 0) {
                        items.push_back(cur);
                        cur.clear();
                    } else {
                        cur += ch;
                    }
                }
                items.push_back(cur);
                c.groups.emplace_back(lp.int32(g.substr(0, colon), "sequence id"), lp.list_from(items));
            }
            break;
        case Command::Kind::Batch:
            need(1, 1);
            break;
        case Command::Kind::Gen:
            need(3, 3);
            c.seq = lp.int32(w[1], "sequence id");
            c.n = lp.int32(w[2], "count");
            if (c.n < 0 || c.n > kMaxListTokens) lp.fail("count must be in 0.." + std::to_string(kMaxListTokens));
            break;
        case Command::Kind::Rm:
            need(4, 4);
            c.seq = lp.int32(w[1], "sequence id");
            c.p0 = lp.int32(w[2], "p0");
            c.p1 = lp.int32(w[3], "p1");
            break;
        case Command::Kind::Cp:
            if (w.size() != 3 && w.size() != 5) lp.fail("'cp' takes SRC DST [P0 P1]");
            c.seq = lp.int32(w[1], "source sequence");
            c.seq2 = lp.int32(w[2], "destination sequence");
            if (w.size() == 5) {
                c.p0 = lp.int32(w[3], "p0");
                c.p1 = lp.int32(w[4], "p1");
            }
            break;
        case Command::Kind::Keep:
        case Command::Kind::Pos:
            need(2, 2);
            c.seq = lp.int32(w[1], "sequence id");
            break;
        case Command::Kind::Add:
        case Command::Kind::Div:
            need(5, 5);
            c.seq = lp.int32(w[1], "sequence id");
            c.p0 = lp.int32(w[2], "p0");
            c.p1 = lp.int32(w[3], "p1");
            c.delta = lp.int32(w[4], c.kind == Command::Kind::Add ? "shift" : "divisor");
            break;
        case Command::Kind::SaveState:
        case Command::Kind::LoadState:
            need(3, 3);
            c.seq = lp.int32(w[1], "sequence id");
            c.name = w[2];
            break;
        case Command::Kind::SaveAll:
        case Command::Kind::LoadAll:
            need(2, 2);
            c.name = w[1];
            break;
        case Command::Kind::Snap:
        case Command::Kind::Restore:
            need(3, 4);
            c.name = w[1];
            c.seq = lp.int32(w[2], "sequence id");
            if (w.size() == 4) c.flags = lp.int32(w[3], "flags");
            break;
        case Command::Kind::Unknown:
            c.text = line;
            break;
        }

        wl.commands.push_back(std::move(c));
        if (wl.commands.back().kind == Command::Kind::Batch) {
            open_batch = &wl.commands.back();
        }
    }
    if (open_batch != nullptr) {
        throw Error(name + ":" + std::to_string(open_batch->line) + ": 'batch' without 'end'");
    }
    return wl;
}

Workload Workload::load(const std::string & path) {
    return parse(read_file_text(path, "workload script"), path);
}

}  // namespace offgrid::tools
