// The prefix cache across restarts (--slot-save-path) when its files are damaged, odd or another model's: a
// damaged file gives the cold answer, a FIFO or an endless file does not stop the start, another model's server
// leaves the files alone.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include "server_helpers.h"

namespace offgrid::test {
namespace {

json request(int max_tokens) {
    return {{"model", "tiny"}, {"prompt", "the same prompt after every restart"}, {"max_tokens", max_tokens},
            {"temperature", 0}, {"logprobs", 3}};
}

const std::vector<std::string> kArgs = {"-np", "1", "-t", "1", "--quiet"};

std::vector<std::string> with_dir(const fs::path & dir) {
    std::vector<std::string> a = kArgs;
    a.insert(a.end(), {"--slot-save-path", dir.string()});
    return a;
}

// The model's own folder under DIR (the only subfolder a single model creates).
fs::path model_folder(const fs::path & dir) {
    for (const auto & e : fs::directory_iterator(dir)) {
        if (e.is_directory()) return e.path();
    }
    return {};
}

std::vector<fs::path> ogpc_files(const fs::path & folder) {
    std::vector<fs::path> out;
    for (const auto & e : fs::directory_iterator(folder)) {
        if (e.path().extension() == ".ogpc") out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

Reply ask(const ServerProcess & s) { return post(s, "/v1/completions", request(4)); }

// Fills DIR with the cache of one request and returns the answer of a server without a cache.
json prime(const fs::path & dir) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    json cold;
    {
        ServerProcess s(kArgs, "cold");
        Reply r = ask(s);
        EXPECT_EQ(r.status, 200);
        cold = r.j;
    }
    ServerProcess s(with_dir(dir), "prime");
    Reply r = ask(s);
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.j["choices"], cold["choices"]);
    EXPECT_EQ(s.stop(), 0);
    return cold;
}

// One flipped byte in the token list, the state or the stored logits of every file: the restarted server answers
// as a cold one (same tokens, same logprobs, nothing cached) and drops the damaged files at its next save.
TEST(CacheRestart, AFlippedByteGivesTheColdAnswer) {
    const fs::path dir = work_dir() / "cache_flip";
    for (const char * where : {"tokens", "state", "logits"}) {
        const json cold = prime(dir);
        const fs::path folder = model_folder(dir);
        ASSERT_FALSE(folder.empty()) << "no model folder in " << dir;
        const auto files = ogpc_files(folder);
        ASSERT_FALSE(files.empty());
        for (const auto & f : files) {
            std::string data = slurp(f);
            ASSERT_GT(data.size(), 100u);
            // tokens start after magic, version, fingerprint and count; the logits end 4 bytes before the end.
            const size_t at = std::string(where) == "tokens" ? 24 : std::string(where) == "state" ? data.size() / 2 : data.size() - 5;
            data[at] = static_cast<char>(data[at] ^ 0x40);
            std::ofstream(f, std::ios::binary | std::ios::trunc) << data;
        }
        ServerProcess s(with_dir(dir), "flipped");
        Reply r = ask(s);
        ASSERT_EQ(r.status, 200);
        EXPECT_EQ(r.j["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << where;
        EXPECT_EQ(r.j["choices"], cold["choices"]) << where;
        EXPECT_NE(s.log().find("checksum mismatch"), std::string::npos) << s.log();
        EXPECT_EQ(s.stop(), 0);
        // The damaged files were not written back: the next server finds only good ones, and hits.
        ServerProcess next(with_dir(dir), "after_flip");
        Reply again = ask(next);  // served after the files were loaded
        EXPECT_EQ(next.log().find("skipped"), std::string::npos) << next.log();
        EXPECT_EQ(again.j["usage"]["prompt_tokens_details"]["cached_tokens"], again.j["usage"]["prompt_tokens"]);
        EXPECT_EQ(again.j["choices"], cold["choices"]);
    }
}

// A FIFO (a reader would block), a symlink to /dev/zero (a reader would never finish) and a file larger than the
// budget are skipped by name; the server starts and the good files still serve.
TEST(CacheRestart, AFifoOrDevZeroInTheFolderIsSkipped) {
    const fs::path dir = work_dir() / "cache_special";
    prime(dir);
    const fs::path folder = model_folder(dir);
    ASSERT_FALSE(folder.empty()) << "no model folder in " << dir;
    ASSERT_EQ(::mkfifo((folder / "prefix-000100.ogpc").c_str(), 0600), 0);
    fs::create_symlink("/dev/zero", folder / "prefix-000101.ogpc");
    {
        std::ofstream big(folder / "prefix-000102.ogpc", std::ios::binary);
        big << std::string(2u << 20, 'x');
    }
    ServerProcess s([&] {
        auto a = with_dir(dir);
        a.insert(a.end(), {"--cache-ram", "1"});  // 1 MiB
        return a;
    }(), "special");
    ASSERT_GT(s.port(), 0);
    Reply r = ask(s);  // answered after the files were loaded
    ASSERT_EQ(r.status, 200);
    const std::string log = s.log();
    EXPECT_NE(log.find("prefix-000100.ogpc: skipped (not a regular file)"), std::string::npos) << log;
    EXPECT_NE(log.find("prefix-000101.ogpc: skipped (a symbolic link)"), std::string::npos) << log;
    EXPECT_NE(log.find("prefix-000102.ogpc: skipped (2097152 bytes, more than the cache budget"), std::string::npos) << log;
    EXPECT_EQ(r.j["usage"]["prompt_tokens_details"]["cached_tokens"], r.j["usage"]["prompt_tokens"]);
    EXPECT_EQ(s.stop(), 0);
    // The save removed the odd entries (their names were not among those it wrote).
    for (const auto & e : fs::directory_iterator(folder)) EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(e.path()))) << e.path();
}

// Snapshots of another slot layout (-np 1, then -np 2) are refused once, when the files are loaded: the first
// request is cold, the prompt is cached again at once, and only the new snapshots are saved.
TEST(CacheRestart, SnapshotsOfAnotherSlotLayoutAreDroppedAtStart) {
    const fs::path dir = work_dir() / "cache_layout";
    const json cold = prime(dir);
    std::vector<std::string> two = with_dir(dir);
    two[1] = "2";
    for (int round = 0; round < 2; ++round) {
        ServerProcess s(two, "layout");
        Reply r = ask(s);  // answered after the files were loaded
        ASSERT_EQ(r.status, 200);
        if (round == 0) {
            EXPECT_NE(s.log().find("cannot be restored"), std::string::npos) << s.log();
        } else {
            EXPECT_EQ(s.log().find("cannot be restored"), std::string::npos) << s.log();
        }
        EXPECT_EQ(r.j["usage"]["prompt_tokens_details"]["cached_tokens"], round == 0 ? json(0) : r.j["usage"]["prompt_tokens"]);
        EXPECT_EQ(r.j["choices"], cold["choices"]);
        Reply again = ask(s);
        EXPECT_EQ(again.j["usage"]["prompt_tokens_details"]["cached_tokens"], again.j["usage"]["prompt_tokens"]);
        EXPECT_EQ(s.stop(), 0);
    }
}

// A server of another model (here: only rms eps differs) that took no request leaves the first model's files in
// place, and the first model's next server still hits its cache.
TEST(CacheRestart, AnotherModelsServerLeavesTheFilesInPlace) {
    const fs::path dir = work_dir() / "cache_owners";
    prime(dir);
    const auto files = ogpc_files(model_folder(dir));
    const fs::path other = work_dir() / "tiny_other_eps.gguf";
    const std::string cmd = std::string(OFFGRID_BINARY) + " gen-model --preset tiny --rms-eps 0.0001 -o '" + other.string() + "' > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    {
        ServerProcess s(with_dir(dir), "other", other);
        EXPECT_EQ(s.stop(), 0);
    }
    size_t folders = 0;
    for (const auto & e : fs::directory_iterator(dir)) folders += e.is_directory() ? 1 : 0;
    EXPECT_EQ(folders, 2u);  // each model has its own
    for (const auto & f : files) EXPECT_TRUE(fs::exists(f)) << f;
    ServerProcess s(with_dir(dir), "owner");
    Reply r = ask(s);
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.j["usage"]["prompt_tokens_details"]["cached_tokens"], r.j["usage"]["prompt_tokens"]);
}

}  // namespace
}  // namespace offgrid::test
