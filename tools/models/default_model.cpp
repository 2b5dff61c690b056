#include "models/default_model.h"

#include <algorithm>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include <unistd.h>

#include "models/model_generator.h"
#include "offgrid/error.h"

namespace offgrid::tools {

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
    model_generators().front()->configure(GenRequest{})->write(path);
    return path;
}

}  // namespace offgrid::tools
