#include "server/cache_files.h"

#include "common/files.h"
#include "offgrid/error.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace offgrid::server {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'O', 'G', 'P', 'C', 'A', 'C', 'H', 'E'};
constexpr uint32_t kVersion = 1;
constexpr const char * kSuffix = ".ogpc";

template <typename T>
void put(std::string & out, const T & v) {
    out.append(reinterpret_cast<const char *>(&v), sizeof(T));
}

class Reader {
public:
    explicit Reader(const std::string & data) : d_(data) {}
    template <typename T>
    bool get(T & v) {
        return bytes(&v, sizeof(T));
    }
    bool bytes(void * p, size_t n) {
        if (d_.size() - off_ < n) return false;
        if (n > 0) std::memcpy(p, d_.data() + off_, n);
        off_ += n;
        return true;
    }
    size_t left() const { return d_.size() - off_; }

private:
    const std::string & d_;
    size_t off_ = 0;
};

}  // namespace

size_t save_prefix_cache(const PrefixCache & cache, const std::string & dir, uint64_t fingerprint) {
    std::error_code ec;
    for (const auto & e : fs::directory_iterator(dir, ec)) {
        if (e.path().extension() == kSuffix) fs::remove(e.path(), ec);
    }
    size_t n = 0;
    cache.for_each([&](const std::vector<int32_t> & tokens, const Snapshot & snap) {
        std::string out;
        out.append(kMagic, 8);
        put(out, kVersion);
        put(out, fingerprint);
        put(out, static_cast<uint32_t>(tokens.size()));
        out.append(reinterpret_cast<const char *>(tokens.data()), tokens.size() * sizeof(int32_t));
        put(out, static_cast<uint64_t>(snap.state.size()));
        out.append(reinterpret_cast<const char *>(snap.state.data()), snap.state.size());
        put(out, static_cast<uint32_t>(snap.logits.size()));
        out.append(reinterpret_cast<const char *>(snap.logits.data()), snap.logits.size() * sizeof(float));
        char name[32];
        std::snprintf(name, sizeof(name), "prefix-%06zu", n);  // in LRU order: loading keeps the order
        const fs::path path = fs::path(dir) / (std::string(name) + kSuffix);
        try {
            write_file_atomic(path.string(), out, "serve --slot-save-path");  // temporary file, fsync, rename
        } catch (const Error & e) {
            std::fprintf(stderr, "serve: %s\n", e.what());
            return;
        }
        ++n;
    });
    return n;
}

size_t load_prefix_cache(PrefixCache & cache, const std::string & dir, uint64_t fingerprint, size_t n_vocab) {
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto & e : fs::directory_iterator(dir, ec)) {
        if (e.path().extension() == kSuffix) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    size_t n = 0;
    for (const auto & path : files) {
        std::ifstream f(path, std::ios::binary);
        const std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        Reader r(data);
        char magic[8];
        uint32_t version = 0, n_tokens = 0, n_logits = 0;
        uint64_t fp = 0, n_state = 0;
        const char * why = nullptr;
        Snapshot snap;
        std::vector<int32_t> tokens;
        if (!r.bytes(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) why = "not a prefix cache file";
        else if (!r.get(version) || version != kVersion) why = "another version";
        else if (!r.get(fp) || fp != fingerprint) why = "written with another model";
        else if (!r.get(n_tokens) || n_tokens == 0 || static_cast<uint64_t>(n_tokens) * 4 > r.left()) why = "bad token count";
        else {
            tokens.resize(n_tokens);
            r.bytes(tokens.data(), tokens.size() * 4);
            if (!r.get(n_state) || n_state > r.left()) why = "bad state size";
            else {
                snap.state.resize(n_state);
                r.bytes(snap.state.data(), n_state);
                if (!r.get(n_logits) || (n_logits != 0 && n_logits != n_vocab) || static_cast<uint64_t>(n_logits) * 4 != r.left()) {
                    why = "bad logits";
                } else {
                    snap.logits.resize(n_logits);
                    r.bytes(snap.logits.data(), snap.logits.size() * 4);
                }
            }
        }
        if (why) {
            std::fprintf(stderr, "serve: %s: skipped (%s)\n", path.c_str(), why);
            continue;
        }
        cache.insert(tokens, std::move(snap));
        ++n;
    }
    return n;
}

}  // namespace offgrid::server
