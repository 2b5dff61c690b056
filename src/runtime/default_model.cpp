#include <algorithm>
#include "runtime/default_model.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include <unistd.h>

#include "common/error.h"
#include "runtime/byte_vocab.h"
#include "runtime/tokenizer.h"

namespace offgrid::runtime {

namespace {

// Bump when the generator or the vocabulary changes, so a cached file of an older generator is not reused.
constexpr const char * kDefaultModelFile = "offgrid-default-tiny-v2.gguf";
// The trained model in the repository (tools/train/README.md tells how it was made).
constexpr const char * kShippedModelFile = "offgrid-speaks.gguf";

#ifndef OFFGRID_MODELS_DIR
#define OFFGRID_MODELS_DIR ""
#endif

std::string env(const char * name) {
    const char * v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

}  // namespace

model::qwen4exp::GenConfig with_byte_vocab(model::qwen4exp::GenConfig config) {
    const TokenizerSpec & spec = byte_vocab_spec();
    config.n_vocab = std::max(config.n_vocab, static_cast<uint32_t>(spec.tokens.size()));
    config.eos_token = static_cast<uint32_t>(spec.eos.value_or(0));
    return config;
}

std::vector<gguf::KeyValue> byte_vocab_metadata(uint32_t n_vocab) {
    const TokenizerSpec & base = byte_vocab_spec();
    if (n_vocab <= base.tokens.size()) return tokenizer_metadata(base);
    // A wider head than the vocabulary (the bench shape): the extra ids are Unused tokens, which tokenizing never
    // produces and detokenizing prints as nothing, so the embedding and output matrices have the asked rows.
    TokenizerSpec spec = base;
    if (spec.token_types.empty()) spec.token_types.assign(spec.tokens.size(), static_cast<int32_t>(TokenType::Normal));
    for (size_t id = base.tokens.size(); id < n_vocab; ++id) {
        spec.tokens.push_back("<|unused_" + std::to_string(id) + "|>");
        spec.token_types.push_back(static_cast<int32_t>(TokenType::Unused));
    }
    return tokenizer_metadata(spec);
}

void write_model_file(const model::qwen4exp::GenConfig & config, const std::string & path) {
    const model::qwen4exp::GenConfig c = with_byte_vocab(config);
    model::qwen4exp::generate_model(c, byte_vocab_metadata(c.n_vocab)).write_file(path);  // atomic
}

void write_model_file(model::glm5next::GenConfig config, const std::string & path) {
    config.n_vocab = static_cast<uint32_t>(byte_vocab_spec().tokens.size());
    model::glm5next::generate_model(config, byte_vocab_metadata()).write_file(path);  // atomic
}

std::string cache_dir() {
    if (const std::string d = env("OFFGRID_CACHE"); !d.empty()) return d;
    if (const std::string d = env("XDG_CACHE_HOME"); !d.empty()) return d + "/offgrid";
    if (const std::string d = env("HOME"); !d.empty()) return d + "/.cache/offgrid";
    throw Error("no cache directory for the default model: set OFFGRID_CACHE (or XDG_CACHE_HOME or HOME)");
}

std::string shipped_model_path() {
    std::vector<std::string> dirs;
    if (const std::string d = env("OFFGRID_MODELS_DIR"); !d.empty()) dirs.push_back(d);
    if (std::strlen(OFFGRID_MODELS_DIR) > 0) dirs.emplace_back(OFFGRID_MODELS_DIR);
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        dirs.push_back((exe.parent_path() / "models").string());
        dirs.push_back((exe.parent_path().parent_path() / "models").string());
    }
    std::vector<std::string> seen;
    for (const std::string & d : dirs) {
        const std::string norm = std::filesystem::path(d).lexically_normal().string();
        if (std::find(seen.begin(), seen.end(), norm) != seen.end()) continue;
        seen.push_back(norm);
        const std::string path = d + "/" + kShippedModelFile;
        if (std::filesystem::is_regular_file(path, ec)) return path;
    }
    std::string tried;
    for (const std::string & d : seen) tried += (tried.empty() ? "" : ", ") + d;
    throw Error(std::string("the built-in model ") + kShippedModelFile + " is not in " + tried +
                " (set OFFGRID_MODELS_DIR, pass -m MODEL, or OFFGRID_BUILTIN=tiny for the random tiny model)");
}

std::string default_model_path() {
    const std::string which = env("OFFGRID_BUILTIN");
    if (which.empty() || which == "speaks") return shipped_model_path();
    if (which != "tiny") throw Error("OFFGRID_BUILTIN='" + which + "': expected speaks or tiny");
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
