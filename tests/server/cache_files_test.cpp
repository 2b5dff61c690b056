// The prefix cache on disk without a server: every byte of a file is checked, non-regular files and files over
// the budget are skipped without being read, a save touches only its own model's folder, and a snapshot that
// fails to restore is dropped.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <sys/stat.h>
#include <unistd.h>

#include "server/cache_files.h"
#include "server/prefix_cache.h"

namespace offgrid::server {
namespace {

namespace fs = std::filesystem;

constexpr size_t kVocab = 8;
constexpr uint64_t kModelA = 0x1111222233334444ull, kModelB = 0x5555666677778888ull;

const fs::path & test_root() {
    static const fs::path root = [] {
        fs::path r = fs::temp_directory_path() / ("offgrid_cache_files_" + std::to_string(::getpid()));
        std::atexit([] {
            std::error_code ec;
            fs::remove_all(fs::temp_directory_path() / ("offgrid_cache_files_" + std::to_string(::getpid())), ec);
        });
        return r;
    }();
    return root;
}

fs::path fresh_dir(const std::string & name) {
    const fs::path d = test_root() / name;
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

Snapshot snapshot(uint8_t seed, bool logits) {
    Snapshot s;
    for (int i = 0; i < 40; ++i) s.state.push_back(static_cast<uint8_t>(seed * 7 + i));
    if (logits) {
        for (size_t i = 0; i < kVocab; ++i) s.logits.push_back(static_cast<float>(seed) + 0.25f * static_cast<float>(i));
    }
    return s;
}

std::string read_all(const fs::path & p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_all(const fs::path & p, const std::string & data) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << data;
}

std::vector<fs::path> cache_files(const fs::path & folder) {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto & e : fs::directory_iterator(folder, ec)) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

const std::vector<int32_t> kPathA = {1, 2, 3}, kPathB = {1, 2, 5, 6};

size_t save_two(const fs::path & dir, uint64_t model) {
    PrefixCache c(1 << 20);
    c.insert(kPathA, snapshot(1, true));
    c.insert(kPathB, snapshot(2, false));
    return save_prefix_cache(c, dir.string(), model);
}

TEST(CacheFiles, SaveAndLoadRoundTrip) {
    const fs::path dir = fresh_dir("roundtrip");
    ASSERT_EQ(save_two(dir, kModelA), 2u);
    EXPECT_EQ(cache_files(prefix_cache_folder(dir.string(), kModelA)).size(), 2u);
    PrefixCache c(1 << 20);
    EXPECT_EQ(load_prefix_cache(c, dir.string(), kModelA, kVocab), 2u);
    const auto hit = c.lookup(kPathA, kPathA.size());
    ASSERT_EQ(hit.length, 3u);
    EXPECT_EQ(hit.snap->state, snapshot(1, true).state);
    EXPECT_EQ(hit.snap->logits, snapshot(1, true).logits);
    EXPECT_EQ(c.lookup(std::vector<int32_t>{1, 2, 5, 6, 0}, 5).length, 4u);
    // Another model has its own folder: nothing of model A is loaded.
    PrefixCache other(1 << 20);
    EXPECT_EQ(load_prefix_cache(other, dir.string(), kModelB, kVocab), 0u);
}

// Whichever byte is damaged (header, token ids, state, logits, the checksum itself), the file is refused.
TEST(CacheFiles, AnyFlippedByteRefusesTheFile) {
    const fs::path dir = fresh_dir("flip");
    ASSERT_EQ(save_two(dir, kModelA), 2u);
    const auto files = cache_files(prefix_cache_folder(dir.string(), kModelA));
    ASSERT_EQ(files.size(), 2u);
    for (const auto & file : files) {
        const std::string good = read_all(file);
        for (size_t i = 0; i < good.size(); ++i) {
            std::string bad = good;
            bad[i] = static_cast<char>(bad[i] ^ 0x01);
            write_all(file, bad);
            PrefixCache c(1 << 20);
            EXPECT_EQ(load_prefix_cache(c, dir.string(), kModelA, kVocab), 1u) << file << " byte " << i;
        }
        write_all(file, good);
    }
    // A cut file and a file with bytes appended are refused too.
    const std::string good = read_all(files[0]);
    write_all(files[0], good.substr(0, good.size() - 1));
    PrefixCache cut(1 << 20);
    EXPECT_EQ(load_prefix_cache(cut, dir.string(), kModelA, kVocab), 1u);
    write_all(files[0], good + "x");
    PrefixCache longer(1 << 20);
    EXPECT_EQ(load_prefix_cache(longer, dir.string(), kModelA, kVocab), 1u);
}

// A FIFO would block a reader forever, /dev/zero never ends, a device is no file: all are skipped unread.
TEST(CacheFiles, NonRegularFilesAreSkippedUnread) {
    const fs::path dir = fresh_dir("special");
    ASSERT_EQ(save_two(dir, kModelA), 2u);
    const fs::path folder = prefix_cache_folder(dir.string(), kModelA);
    ASSERT_EQ(::mkfifo((folder / "prefix-000007.ogpc").c_str(), 0600), 0);
    fs::create_symlink("/dev/zero", folder / "prefix-000008.ogpc");
    fs::create_symlink(cache_files(folder)[0], folder / "prefix-000009.ogpc");  // even to a good file
    fs::create_directory(folder / "prefix-000010.ogpc");
    PrefixCache c(1 << 20);
    EXPECT_EQ(load_prefix_cache(c, dir.string(), kModelA, kVocab), 2u);
}

// A FIFO or link under a name the save writes does not stop the save (write_file_atomic refuses such targets).
TEST(CacheFiles, ASaveGetsPastAFifoUnderItsOwnName) {
    const fs::path dir = fresh_dir("fifo_name");
    ASSERT_EQ(save_two(dir, kModelA), 2u);
    const fs::path folder = prefix_cache_folder(dir.string(), kModelA);
    fs::remove(folder / "prefix-000000.ogpc");
    ASSERT_EQ(::mkfifo((folder / "prefix-000000.ogpc").c_str(), 0600), 0);
    fs::remove(folder / "prefix-000001.ogpc");
    fs::create_symlink("/dev/zero", folder / "prefix-000001.ogpc");
    EXPECT_EQ(save_two(dir, kModelA), 2u);
    for (const auto & f : cache_files(folder)) EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(f))) << f;
    PrefixCache c(1 << 20);
    EXPECT_EQ(load_prefix_cache(c, dir.string(), kModelA, kVocab), 2u);
}

TEST(CacheFiles, FilesBeyondTheBudgetAreSkippedNewestKept) {
    const fs::path dir = fresh_dir("budget");
    ASSERT_EQ(save_two(dir, kModelA), 2u);  // A (older, with logits) then B (newer)
    const auto files = cache_files(prefix_cache_folder(dir.string(), kModelA));
    const size_t size_b = fs::file_size(files[1]);
    PrefixCache tiny(size_b);  // room for the newest file only
    EXPECT_EQ(load_prefix_cache(tiny, dir.string(), kModelA, kVocab), 1u);
    EXPECT_EQ(tiny.lookup(std::vector<int32_t>{1, 2, 5, 6, 0}, 5).length, 4u);
    PrefixCache none(size_b - 1);
    EXPECT_EQ(load_prefix_cache(none, dir.string(), kModelA, kVocab), 0u);
}

TEST(CacheFiles, ASaveLeavesOtherModelsAndOtherFilesAlone) {
    const fs::path dir = fresh_dir("owners");
    ASSERT_EQ(save_two(dir, kModelA), 2u);
    const fs::path folder_a = prefix_cache_folder(dir.string(), kModelA);
    const auto files_a = cache_files(folder_a);
    write_all(dir / "prefix-000000.ogpc", "a file of an older layout");
    write_all(folder_a / "notes.txt", "kept");
    // A server of model B with an empty cache saves: model A's files are untouched.
    PrefixCache empty(1 << 20);
    EXPECT_EQ(save_prefix_cache(empty, dir.string(), kModelB), 0u);
    EXPECT_EQ(cache_files(folder_a), (std::vector<fs::path>{folder_a / "notes.txt", files_a[0], files_a[1]}));
    EXPECT_TRUE(fs::exists(dir / "prefix-000000.ogpc"));
    PrefixCache c(1 << 20);
    EXPECT_EQ(load_prefix_cache(c, dir.string(), kModelA, kVocab), 2u);
    // Model A saving one snapshot replaces its own files: one left, the stale second removed, notes kept.
    PrefixCache one(1 << 20);
    one.insert(kPathA, snapshot(3, true));
    EXPECT_EQ(save_prefix_cache(one, dir.string(), kModelA), 1u);
    EXPECT_EQ(cache_files(folder_a), (std::vector<fs::path>{folder_a / "notes.txt", files_a[0]}));
}

TEST(CacheFiles, ASnapshotTheCheckRefusesIsNotLoaded) {
    const fs::path dir = fresh_dir("check");
    ASSERT_EQ(save_two(dir, kModelA), 2u);
    PrefixCache c(1 << 20);
    auto check = [](const std::vector<int32_t> & tokens, Snapshot &) -> std::string {
        return tokens.size() == 3 ? "another slot layout" : "";
    };
    EXPECT_EQ(load_prefix_cache(c, dir.string(), kModelA, kVocab, check), 1u);
    EXPECT_EQ(c.lookup(kPathA, kPathA.size()).length, 0u);
}

TEST(PrefixCache, EraseDropsOneSnapshotAndKeepsTheTreeARadixTree) {
    PrefixCache c(1 << 20);
    c.insert(kPathA, snapshot(1, true));
    c.insert(kPathB, snapshot(2, false));
    EXPECT_FALSE(c.erase(std::vector<int32_t>{1, 2}));  // a branch point without a snapshot
    EXPECT_TRUE(c.erase(kPathA));
    EXPECT_FALSE(c.erase(kPathA));
    EXPECT_EQ(c.entries(), 1u);
    EXPECT_EQ(c.bytes(), snapshot(2, false).bytes());
    EXPECT_EQ(c.lookup(kPathA, kPathA.size()).length, 0u);
    EXPECT_EQ(c.lookup(std::vector<int32_t>{1, 2, 5, 6, 0}, 5).length, 4u);
    EXPECT_EQ(c.match_length(std::vector<int32_t>{1, 2, 3}), 2u);
}

}  // namespace
}  // namespace offgrid::server
