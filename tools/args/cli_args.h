// A small command-line flag parser shared by the `offgrid` subcommands: typed values with range checks, one
// clear message per mistake (unknown flag, missing or malformed value), and positional arguments.
//
// Thread safety: an ArgParser is used by one thread; the parse_* functions keep no state.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "offgrid/error.h"
#include "offgrid/context.h"

namespace offgrid::tools {

// A mistake on the command line (the commands exit with status 2 for it, 1 for other errors).
class UsageError : public Error {
public:
    explicit UsageError(const std::string & message) : Error(message) {}
};

class ArgParser {
public:
    ArgParser() = default;

    void flag(std::initializer_list<const char *> names, bool * out);
    void text(std::initializer_list<const char *> names, std::string * out);
    // Integers in [lo, hi]; floats finite and in [lo, hi].
    void integer(std::initializer_list<const char *> names, int64_t * out, int64_t lo, int64_t hi);
    void real(std::initializer_list<const char *> names, float * out, float lo, float hi);
    // --mmap (WeightLoad::Map) and --no-mmap (WeightLoad::Read); the last one given wins, neither leaves *out.
    void weight_load(WeightLoad * out);
    // --act-quant int16|int8|f32: the process's activation mode (offgrid::set_activation_mode), set as it is parsed;
    // --expert-rows16: the experts' q4_K gate and up in 16-row groups (offgrid::set_expert_rows16).
    void activation_mode();
    // A flag without a value that calls fn each time it is given.
    void custom_flag(std::initializer_list<const char *> names, std::function<void()> fn);
    // Any other value: fn gets the value text and throws UsageError (or Error) when it is wrong.
    void custom(std::initializer_list<const char *> names, std::function<void(const std::string &)> fn);
    // Positional arguments are refused unless allowed.
    void allow_positional(std::vector<std::string> * out) { positional_ = out; }

    // Parses the arguments. Returns false when -h / --help was given. Throws UsageError.
    bool parse(const std::vector<std::string> & args);
    // Whether an option (any of its names) was given.
    bool given(const std::string & name) const;

private:
    struct Option {
        std::vector<std::string> names;
        bool takes_value = true;
        std::function<void(const std::string & name, const std::string & value)> set;
        bool given = false;
    };
    void add(std::initializer_list<const char *> names, bool takes_value,
             std::function<void(const std::string &, const std::string &)> set);

    std::vector<Option> options_;
    std::vector<std::string> * positional_ = nullptr;
};

// Strict conversions (the whole text must be the number). Throw UsageError naming `what`.
int64_t parse_integer(const std::string & what, const std::string & text, int64_t lo, int64_t hi);
float parse_real(const std::string & what, const std::string & text, float lo, float hi);
// "0,1024,16384" -> {0, 1024, 16384}.
std::vector<int64_t> parse_integer_list(const std::string & what, const std::string & text, int64_t lo, int64_t hi);

// Runs a command body and turns a UsageError into "offgrid CMD: message (see offgrid CMD --help)" and exit 2.
// Other exceptions propagate (the dispatcher prints them and exits 1).
int run_with_usage(const std::string & command, const std::function<int()> & body);

}  // namespace offgrid::tools
