// Random-weight model generators, one per architecture (`offgrid gen-model`, the built-in tiny model, tests and
// benchmarks). Each architecture's folder defines its generator (src/model/<arch>/generator.cpp); the registry
// (model_generators.cpp) lists them, one line each; the CLI reads names, presets and options from it and names
// no architecture itself.
//
// Thread safety: the registry and the generators are immutable; any thread may use them. A GeneratedModel is
// used by one thread at a time.
//
// Invariants:
//  1. The same request gives the same file, byte for byte, on every platform.
//  2. configure() checks everything: a GeneratedModel it returns always writes a loadable model.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace offgrid::tools {

// One override flag of a generator (beyond -o, --arch, --preset, --seed and --type, which every generator has).
struct GenOption {
    enum class Kind { Flag, Integer, Real, Text };
    std::string flag;     // "--n-ctx"
    Kind kind = Kind::Flag;
    double lo = 0, hi = 0;  // the accepted range of Integer and Real values (inclusive)
};

// One override as given on the command line, already parsed and range-checked against its GenOption.
struct GenSetting {
    std::string flag;
    int64_t integer = 0;  // Integer
    double real = 0;      // Real
    std::string text;     // Text
};

struct GenRequest {
    std::string preset = "tiny";
    std::optional<uint64_t> seed;         // the preset's seed when absent
    std::string weight_type;              // "f32", "f16", "bf16", "q8_0"; empty: the preset's
    std::vector<GenSetting> settings;     // in command-line order (a later one wins)
};

// A model ready to be written: its settings are valid.
class GeneratedModel {
public:
    virtual ~GeneratedModel() = default;
    // One line: the main sizes and the weight count.
    virtual std::string describe() const = 0;
    // Writes the file with the library's byte-level vocabulary, through a temporary file renamed into place
    // (`path` is either absent or complete). Throws Error.
    virtual void write(const std::string & path) const = 0;
};

class ModelGenerator {
public:
    virtual ~ModelGenerator() = default;
    virtual std::string arch() const = 0;                       // the name --arch takes
    virtual const std::vector<std::string> & presets() const = 0;  // "tiny" is always one
    virtual const std::vector<GenOption> & options() const = 0;
    virtual std::string usage() const = 0;                      // its paragraph of `offgrid gen-model --help`
    // Throws Error naming the preset or the first setting that gives no valid model.
    virtual std::unique_ptr<GeneratedModel> configure(const GenRequest & request) const = 0;
};

// The registered generators, in registry order; the first is the default of --arch and its "tiny" preset is the
// built-in random model (models/default_model.h).
const std::vector<const ModelGenerator *> & model_generators();
// nullptr when no generator has that name.
const ModelGenerator * find_model_generator(std::string_view arch);
// The registered names joined by `separator`, in registry order (for messages and usage lines).
std::string model_generator_names(const char * separator = ", ");

}  // namespace offgrid::tools
