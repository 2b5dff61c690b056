#include "runtime/default_model.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <unistd.h>

#include "common/error.h"
#include "runtime/byte_vocab.h"
#include "runtime/tokenizer.h"

namespace offgrid::runtime {

namespace {

// Bump when the generator or the vocabulary changes, so a cached file of an older generator is not reused.
constexpr const char * kDefaultModelFile = "offgrid-default-tiny-v2.gguf";

std::string env(const char * name) {
    const char * v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

}  // namespace

model::qwen4exp::GenConfig with_byte_vocab(model::qwen4exp::GenConfig config) {
    const TokenizerSpec & spec = byte_vocab_spec();
    config.n_vocab = static_cast<uint32_t>(spec.tokens.size());
    config.eos_token = static_cast<uint32_t>(spec.eos.value_or(0));
    return config;
}

std::vector<gguf::KeyValue> byte_vocab_metadata() { return tokenizer_metadata(byte_vocab_spec()); }

namespace {

void write_atomically(const gguf::Writer & w, const std::string & path);

}  // namespace

void write_model_file(const model::qwen4exp::GenConfig & config, const std::string & path) {
    write_atomically(model::qwen4exp::generate_model(with_byte_vocab(config), byte_vocab_metadata()), path);
}

void write_model_file(model::glm5next::GenConfig config, const std::string & path) {
    config.n_vocab = static_cast<uint32_t>(byte_vocab_spec().tokens.size());
    write_atomically(model::glm5next::generate_model(config, byte_vocab_metadata()), path);
}

namespace {

void write_atomically(const gguf::Writer & w, const std::string & path) {
    const std::vector<uint8_t> bytes = w.to_bytes();
    // A name of our own beside the target (same file system, so the rename is atomic), unique per process.
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    std::FILE * f = std::fopen(tmp.c_str(), "wb");
    if (!f) throw Error(path + ": cannot create " + tmp + ": " + std::strerror(errno));
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    const bool closed = std::fclose(f) == 0;
    if (!ok || !closed) {
        std::remove(tmp.c_str());
        throw Error(path + ": writing " + tmp + " failed");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const std::string why = std::strerror(errno);
        std::remove(tmp.c_str());
        throw Error(path + ": cannot rename " + tmp + " into place: " + why);
    }
}

}  // namespace

std::string cache_dir() {
    if (const std::string d = env("OFFGRID_CACHE"); !d.empty()) return d;
    if (const std::string d = env("XDG_CACHE_HOME"); !d.empty()) return d + "/offgrid";
    if (const std::string d = env("HOME"); !d.empty()) return d + "/.cache/offgrid";
    throw Error("no cache directory for the default model: set OFFGRID_CACHE (or XDG_CACHE_HOME or HOME)");
}

std::string default_model_path() {
    const std::string dir = cache_dir();
    const std::string path = dir + "/" + kDefaultModelFile;
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) return path;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw Error(dir + ": cannot create the cache directory: " + ec.message());
    write_model_file(model::qwen4exp::gen_preset("tiny"), path);
    return path;
}

}  // namespace offgrid::runtime
