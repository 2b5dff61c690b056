// libFuzzer target: bytes as one prefix-cache file (`serve --slot-save-path`) of a model's folder, loaded by
// load_prefix_cache. The first byte picks a mode: 'R' appends the CRC-32C the format ends with to the rest, so
// the parser behind the checksum is reached; anything else is written as it is. The contract: no crash and no
// exception; at most one snapshot loads, only with every token inside the vocabulary and logits of the
// vocabulary's size or none; a loaded snapshot saves back to exactly the bytes it was read from.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <unistd.h>

#include "common/crc32c.h"
#include "server/cache_files.h"
#include "server/prefix_cache.h"

namespace {

namespace fs = std::filesystem;
using namespace offgrid::server;

constexpr uint64_t kFingerprint = 0x0123456789abcdefull;
constexpr size_t kVocab = 16;
constexpr size_t kBudget = 1 << 20;

// A folder of this process's own, in memory when /dev/shm exists (every input is one file written and read).
// It exists only while an input runs (Scratch), so no exit path leaves it behind.
const fs::path & work_dir() {
    static const fs::path dir = [] {
        std::error_code ec;
        const fs::path base = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
        return base / ("offgrid_fuzz_cache_file_" + std::to_string(::getpid()));
    }();
    return dir;
}

struct Scratch {
    Scratch() { fs::create_directories(work_dir()); }
    ~Scratch() {
        std::error_code ec;
        fs::remove_all(work_dir(), ec);
    }
};

void write_all(const fs::path & p, const std::string & data) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

std::string read_all(const fs::path & p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// OFFGRID_FUZZ_WRITE_SEEDS=DIR: write the seed corpus (files save_prefix_cache wrote, as they are and in 'R'
// mode without their checksum) into DIR and exit.
void write_seeds(const fs::path & dir) {
    const Scratch scratch;
    PrefixCache cache(kBudget);
    Snapshot with_logits, without;
    for (int i = 0; i < 24; ++i) with_logits.state.push_back(static_cast<uint8_t>(3 * i + 1));
    for (size_t i = 0; i < kVocab; ++i) with_logits.logits.push_back(0.5f * static_cast<float>(i) - 2.0f);
    without.state = {9, 8, 7};
    cache.insert(std::vector<int32_t>{1, 2, 3}, with_logits);
    cache.insert(std::vector<int32_t>{1, 2, 15, 0}, without);
    const fs::path saved = work_dir() / "seeds";
    save_prefix_cache(cache, saved.string(), kFingerprint);
    int n = 0;
    for (const auto & e : fs::directory_iterator(prefix_cache_folder(saved.string(), kFingerprint))) {
        const std::string bytes = read_all(e.path());
        const std::string name = "saved" + std::to_string(n++);
        write_all(dir / (name + ".ogpc"), bytes);
        std::string resealed = "R";
        resealed.append(bytes, 0, bytes.size() - 4);
        write_all(dir / ("resealed_" + name + ".ogpc"), resealed);
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    if (const char * dir = std::getenv("OFFGRID_FUZZ_WRITE_SEEDS")) {
        write_seeds(dir);
        std::exit(0);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    std::string file(reinterpret_cast<const char *>(data), size);
    if (size > 0 && data[0] == 'R') {
        file.erase(0, 1);
        const uint32_t crc = offgrid::crc32c(file.data(), file.size());
        file.append(reinterpret_cast<const char *>(&crc), sizeof(crc));
    }
    const Scratch scratch;
    const fs::path in_dir = work_dir() / "in", out_dir = work_dir() / "out";
    const fs::path folder = prefix_cache_folder(in_dir.string(), kFingerprint);
    fs::create_directories(folder);
    write_all(folder / "prefix-000000.ogpc", file);

    PrefixCache cache(kBudget);
    // Nearly every input is refused with a "skipped (...)" line on stderr: run with -close_fd_mask=2.
    const size_t n = load_prefix_cache(cache, in_dir.string(), kFingerprint, kVocab);
    if (n > 1 || cache.entries() != n) std::abort();
    if (n == 0) return 0;
    cache.for_each([&](const std::vector<int32_t> & tokens, const Snapshot & snap) {
        if (tokens.empty()) std::abort();
        for (const int32_t t : tokens) {
            if (t < 0 || static_cast<size_t>(t) >= kVocab) std::abort();
        }
        if (!snap.logits.empty() && snap.logits.size() != kVocab) std::abort();
    });
    if (save_prefix_cache(cache, out_dir.string(), kFingerprint) != 1) std::abort();
    const fs::path saved = fs::path(prefix_cache_folder(out_dir.string(), kFingerprint)) / "prefix-000000.ogpc";
    if (read_all(saved) != file) std::abort();
    return 0;
}
