#include "runtime/prompt_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

namespace offgrid::runtime {

namespace {

bool ascii_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool ascii_printable(char c) { return c > ' ' && c < 0x7f; }

// Feeds text in blocks; tokenises up to the last position where no word can span (see the header).
class PieceTokenizer {
public:
    PieceTokenizer(const Tokenizer & tok, size_t limit) : tok_(tok), limit_(limit) {}

    // Returns false once the limit is passed (the caller stops reading).
    bool feed(std::string_view data) {
        pending_.append(data.data(), data.size());
        size_t cut = 0;
        // Only the new bytes can hold a new cut (one byte back: the cut's left neighbour; one more: its lookahead).
        const size_t from = std::max<size_t>(scanned_, 1);
        for (size_t p = pending_.size(); p-- > from;) {
            if ((pending_[p - 1] == '\n' && ascii_printable(pending_[p])) ||
                (pending_[p] == ' ' && p + 1 < pending_.size() && ascii_letter(pending_[p - 1]) && ascii_letter(pending_[p + 1]))) {
                cut = p;
                break;
            }
        }
        scanned_ = pending_.size() > 0 ? pending_.size() - 1 : 0;  // the last byte may become a cut's left side
        if (cut > 0) {
            tok_.tokenize(std::string_view(pending_).substr(0, cut), false, out_.tokens);
            pending_.erase(0, cut);
            scanned_ = pending_.empty() ? 0 : pending_.size() - 1;
            if (out_.tokens.size() > limit_) return stop();
        } else if (!pending_.empty()) {
            // No cut yet: the bytes alone may already prove the input too long.
            if (longest_ == 0) {
                for (size_t id = 0; id < tok_.n_vocab(); ++id) {
                    longest_ = std::max(longest_, tok_.token_to_piece(static_cast<TokenId>(id)).size());
                }
                longest_ = std::max<size_t>(longest_, 1);
            }
            if (out_.tokens.size() + pending_.size() / longest_ > limit_) return stop();
        }
        return true;
    }

    BoundedTokens finish() {
        if (!out_.over && !pending_.empty()) {
            tok_.tokenize(pending_, false, out_.tokens);
            pending_.clear();
            if (out_.tokens.size() > limit_) out_.over = true;
        }
        return std::move(out_);
    }

private:
    bool stop() {
        out_.over = true;
        pending_.clear();
        return false;
    }
    const Tokenizer & tok_;
    size_t limit_;
    std::string pending_;
    size_t scanned_ = 0;
    size_t longest_ = 0;
    BoundedTokens out_;
};

// A regular file, opened without blocking (a FIFO would hang the open).
int open_input(const std::string & path, const std::string & what) {
    if (path.empty()) throw Error(what + ": empty file name");
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw Error(what + " " + path + ": " + std::strerror(errno));
    if (S_ISDIR(st.st_mode)) throw Error(what + " " + path + ": is a directory");
    if (!S_ISREG(st.st_mode)) throw Error(what + " " + path + ": not a regular file");
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw Error(what + " " + path + ": cannot open: " + std::strerror(errno));
    return fd;
}

// Reads the file block by block into `sink` until it returns false or the file ends.
template <typename Sink>
void read_blocks(const std::string & path, const std::string & what, size_t block, Sink && sink) {
    const int fd = open_input(path, what);
    std::string buf(std::max<size_t>(block, 1), '\0');
    for (;;) {
        const ssize_t n = ::read(fd, buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int e = errno;
            ::close(fd);
            throw Error(what + " " + path + ": read error: " + std::strerror(e));
        }
        if (n == 0 || !sink(std::string_view(buf.data(), static_cast<size_t>(n)))) break;
    }
    ::close(fd);
}

}  // namespace

BoundedTokens tokenize_text(const Tokenizer & tok, std::string_view text, size_t limit, size_t block) {
    PieceTokenizer pt(tok, limit);
    block = std::max<size_t>(block, 1);
    for (size_t at = 0; at < text.size(); at += block) {
        if (!pt.feed(text.substr(at, block))) break;
    }
    return pt.finish();
}

BoundedTokens tokenize_file(const Tokenizer & tok, const std::string & path, size_t limit, const std::string & what,
                            size_t block) {
    PieceTokenizer pt(tok, limit);
    read_blocks(path, what, block, [&](std::string_view data) { return pt.feed(data); });
    return pt.finish();
}

}  // namespace offgrid::runtime

namespace offgrid {

void check_input_file(const std::string & path, const std::string & what) { ::close(runtime::open_input(path, what)); }

BoundedTokens tokenize_file(const Tokenizer & tok, const std::string & path, size_t limit, const std::string & what,
                            size_t block) {
    return runtime::tokenize_file(tok.impl(), path, limit, what, block);
}

BoundedTokens tokenize_text(const Tokenizer & tok, std::string_view text, size_t limit, size_t block) {
    return runtime::tokenize_text(tok.impl(), text, limit, block);
}

BoundedTokens read_token_ids(const std::string & path, int32_t n_vocab, size_t limit, const std::string & what) {
    BoundedTokens out;
    std::string word;
    constexpr size_t kLongestId = 20;  // more characters than any int64: no id, stop collecting
    auto finish_word = [&] {
        if (word.empty()) return;
        const std::string where = path + ": token " + std::to_string(out.tokens.size());
        int64_t v = 0;
        bool digits = word.size() <= 18;
        for (const char c : word) digits = digits && c >= '0' && c <= '9';
        if (!digits) throw Error(where + ": expected a token id, got '" + printable(word) + (word.size() > kLongestId ? "...'" : "'"));
        for (const char c : word) v = v * 10 + (c - '0');
        if (v >= n_vocab) throw Error(where + ": " + word + " is outside 0.." + std::to_string(n_vocab - 1));
        out.tokens.push_back(static_cast<int32_t>(v));
        word.clear();
    };
    runtime::read_blocks(path, what, 1u << 20, [&](std::string_view data) {
        for (const char c : data) {
            if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f') {
                finish_word();
                if (out.tokens.size() > limit) {
                    out.over = true;
                    return false;
                }
            } else if (word.size() <= kLongestId) {
                word.push_back(c);
            }
        }
        return true;
    });
    if (!out.over) finish_word();
    if (out.tokens.size() > limit) out.over = true;
    return out;
}

std::string printable(std::string_view text, size_t max) {
    std::string out;
    for (size_t i = 0; i < text.size() && i < max; ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            out.push_back(static_cast<char>(c));
        } else {
            char buf[5];
            std::snprintf(buf, sizeof(buf), "\\x%02x", c);
            out += buf;
        }
    }
    if (text.size() > max) out += "...";
    return out;
}

}  // namespace offgrid
