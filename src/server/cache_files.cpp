#include "server/cache_files.h"

#include "offgrid/crc32c.h"
#include "offgrid/error.h"
#include "offgrid/files.h"
#include "offgrid/prompt_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace offgrid::server {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'O', 'G', 'P', 'C', 'A', 'C', 'H', 'E'};
constexpr uint32_t kVersion = 3;  // 2: whole-file CRC-32C, one folder per model; 3: tails (the first position)
constexpr const char * kSuffix = ".ogpc";
constexpr const char * kPrefix = "prefix-";
// magic, version, fingerprint, n_tokens, from, n_state, n_logits, crc
constexpr size_t kFixedBytes = 8 + 4 + 8 + 4 + 4 + 8 + 4 + 4;

template <typename T>
void put(std::string & out, const T & v) {
    out.append(reinterpret_cast<const char *>(&v), sizeof(T));
}

class Reader {
public:
    explicit Reader(const std::string & data, size_t end) : d_(data), end_(end) {}
    template <typename T>
    bool get(T & v) {
        return bytes(&v, sizeof(T));
    }
    bool bytes(void * p, size_t n) {
        if (end_ - off_ < n) return false;
        if (n > 0) std::memcpy(p, d_.data() + off_, n);
        off_ += n;
        return true;
    }
    size_t left() const { return end_ - off_; }

private:
    const std::string & d_;
    size_t end_;
    size_t off_ = 0;
};

// File names come from the folder: control bytes in them must not reach the terminal.
std::string shown(const fs::path & p) { return printable(p.string(), 4096); }

bool is_cache_name(const std::string & name) {
    return name.size() > std::strlen(kPrefix) + std::strlen(kSuffix) && name.rfind(kPrefix, 0) == 0 &&
           name.compare(name.size() - std::strlen(kSuffix), std::string::npos, kSuffix) == 0;
}

// Reads exactly `size` bytes of a regular file, never following a link and never blocking on a FIFO (the file
// may have been swapped since it was listed). Returns why not, or empty on success.
std::string read_bounded(const fs::path & path, uint64_t size, std::string & out) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return errno == ELOOP ? "a symbolic link" : std::string("cannot open: ") + std::strerror(errno);
    std::string why;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) why = "not a regular file";
    else if (static_cast<uint64_t>(st.st_size) != size) why = "changed while loading";
    if (why.empty()) {
        out.resize(size);
        size_t got = 0;
        while (got < size) {
            const ssize_t r = ::read(fd, out.data() + got, size - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += static_cast<size_t>(r);
        }
        if (got != size) why = "shorter than its size";
    }
    ::close(fd);
    return why;
}

// Parses a whole file; empty on success.
std::string parse(const std::string & data, uint64_t fingerprint, size_t n_vocab, std::vector<int32_t> & tokens,
                  Snapshot & snap) {
    if (data.size() < kFixedBytes) return "too short";
    uint32_t stored = 0;
    std::memcpy(&stored, data.data() + data.size() - 4, 4);
    char magic[8];
    uint32_t version = 0, n_tokens = 0, n_logits = 0;
    uint64_t fp = 0, n_state = 0;
    Reader r(data, data.size() - 4);
    if (!r.bytes(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return "not a prefix cache file";
    if (!r.get(version) || version != kVersion)
        return "version " + std::to_string(version) + ", this build reads " + std::to_string(kVersion);
    if (crc32c(data.data(), data.size() - 4) != stored) return "checksum mismatch: the file is damaged";
    if (!r.get(fp) || fp != fingerprint) return "written with another model";
    if (!r.get(n_tokens) || n_tokens == 0 || static_cast<uint64_t>(n_tokens) * 4 > r.left()) return "bad token count";
    tokens.resize(n_tokens);
    r.bytes(tokens.data(), tokens.size() * 4);
    for (const int32_t t : tokens) {
        if (t < 0 || static_cast<size_t>(t) >= n_vocab) return "token id " + std::to_string(t) + " out of the vocabulary";
    }
    uint32_t from = 0;
    if (!r.get(from) || from >= n_tokens) return "bad first position";
    snap.from = from;
    if (!r.get(n_state) || n_state > r.left()) return "bad state size";
    snap.state.resize(n_state);
    r.bytes(snap.state.data(), n_state);
    if (!r.get(n_logits) || (n_logits != 0 && n_logits != n_vocab) || static_cast<uint64_t>(n_logits) * 4 != r.left()) {
        return "bad logits";
    }
    snap.logits.resize(n_logits);
    r.bytes(snap.logits.data(), snap.logits.size() * 4);
    return {};
}

}  // namespace

std::string prefix_cache_folder(const std::string & dir, uint64_t fingerprint) {
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(fingerprint));
    return (fs::path(dir) / hex).string();
}

size_t save_prefix_cache(const PrefixCache & cache, const std::string & dir, uint64_t fingerprint) {
    const fs::path folder = prefix_cache_folder(dir, fingerprint);
    std::error_code ec;
    fs::create_directories(folder, ec);
    if (ec) {
        std::fprintf(stderr, "serve: %s: cannot create the prefix cache folder (%s)\n", folder.c_str(), ec.message().c_str());
        return 0;
    }
    size_t n = 0;
    bool failed = false;
    std::set<std::string> written;
    cache.for_each([&](const std::vector<int32_t> & tokens, const Snapshot & snap) {
        if (failed) return;
        std::string out;
        out.reserve(kFixedBytes + tokens.size() * 4 + snap.bytes());
        out.append(kMagic, 8);
        put(out, kVersion);
        put(out, fingerprint);
        put(out, static_cast<uint32_t>(tokens.size()));
        out.append(reinterpret_cast<const char *>(tokens.data()), tokens.size() * sizeof(int32_t));
        put(out, static_cast<uint32_t>(snap.from));
        put(out, static_cast<uint64_t>(snap.state.size()));
        out.append(reinterpret_cast<const char *>(snap.state.data()), snap.state.size());
        put(out, static_cast<uint32_t>(snap.logits.size()));
        out.append(reinterpret_cast<const char *>(snap.logits.data()), snap.logits.size() * sizeof(float));
        put(out, crc32c(out.data(), out.size()));
        char name[32];
        std::snprintf(name, sizeof(name), "%s%06zu%s", kPrefix, n, kSuffix);  // in LRU order: loading keeps the order
        // A FIFO, link or device under one of our names (skipped at load) would refuse the write: it goes first.
        struct stat st {};
        if (::lstat((folder / name).c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
            ::unlink((folder / name).c_str());
        }
        try {
            write_file_atomic((folder / name).string(), out, "serve --slot-save-path");
        } catch (const Error & e) {
            std::fprintf(stderr, "serve: %s; the older cache files stay\n", e.what());
            failed = true;
            return;
        }
        written.insert(name);
        ++n;
    });
    if (failed) return n;
    for (const auto & e : fs::directory_iterator(folder, ec)) {
        const std::string name = e.path().filename().string();
        if (is_cache_name(name) && !written.count(name)) fs::remove(e.path(), ec);
    }
    return n;
}

size_t load_prefix_cache(PrefixCache & cache, const std::string & dir, uint64_t fingerprint, size_t n_vocab,
                         const SnapshotCheck & check) {
    const fs::path folder = prefix_cache_folder(dir, fingerprint);
    std::vector<std::pair<fs::path, uint64_t>> files;
    std::error_code ec;
    for (const auto & e : fs::directory_iterator(folder, ec)) {
        if (!is_cache_name(e.path().filename().string())) continue;
        struct stat st {};
        if (::lstat(e.path().c_str(), &st) != 0) continue;
        if (!S_ISREG(st.st_mode)) {
            std::fprintf(stderr, "serve: %s: skipped (%s)\n", shown(e.path()).c_str(),
                         S_ISLNK(st.st_mode) ? "a symbolic link" : "not a regular file");
            continue;
        }
        if (static_cast<uint64_t>(st.st_size) > cache.budget()) {
            std::fprintf(stderr, "serve: %s: skipped (%lld bytes, more than the cache budget of %zu)\n", shown(e.path()).c_str(),
                         static_cast<long long>(st.st_size), cache.budget());
            continue;
        }
        files.emplace_back(e.path(), static_cast<uint64_t>(st.st_size));
    }
    // Saved least recently used first: keep the newest files that fit the budget, then insert in saved order.
    std::sort(files.begin(), files.end());
    uint64_t total = 0;
    size_t first = files.size();
    while (first > 0 && total + files[first - 1].second <= cache.budget()) total += files[--first].second;
    for (size_t i = 0; i < first; ++i) std::fprintf(stderr, "serve: %s: skipped (beyond the cache budget)\n", shown(files[i].first).c_str());
    struct Parsed {
        fs::path path;
        std::vector<int32_t> tokens;
        Snapshot snap;
    };
    std::vector<Parsed> parsed;
    for (size_t i = first; i < files.size(); ++i) {
        Parsed p{files[i].first, {}, {}};
        std::string data;
        std::string why = read_bounded(p.path, files[i].second, data);
        if (why.empty()) why = parse(data, fingerprint, n_vocab, p.tokens, p.snap);
        if (!why.empty()) {
            std::fprintf(stderr, "serve: %s: skipped (%s)\n", shown(p.path).c_str(), why.c_str());
            continue;
        }
        parsed.push_back(std::move(p));
    }
    // Shorter paths first: a tail's parent (the snapshot at its first `from` tokens) is in the cache before it.
    std::stable_sort(parsed.begin(), parsed.end(), [](const Parsed & a, const Parsed & b) { return a.tokens.size() < b.tokens.size(); });
    size_t n = 0;
    for (Parsed & p : parsed) {
        std::string why;
        if (p.snap.from > 0) {
            p.snap.parent = cache.find(std::span<const int32_t>(p.tokens.data(), p.snap.from));
            if (!p.snap.parent) why = "the snapshot below it, at " + std::to_string(p.snap.from) + " tokens, was not loaded";
        }
        if (why.empty() && check) why = check(p.tokens, p.snap);
        if (why.empty() && !cache.insert(p.tokens, std::move(p.snap))) why = "beyond the cache budget";
        if (!why.empty()) {
            std::fprintf(stderr, "serve: %s: skipped (%s)\n", shown(p.path).c_str(), why.c_str());
            continue;
        }
        ++n;
    }
    return n;
}

}  // namespace offgrid::server
