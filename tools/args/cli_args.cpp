#include "args/cli_args.h"

#include "offgrid/prompt_file.h"
#include "offgrid/system.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cctype>
#include <cstdlib>

namespace offgrid::tools {

int64_t parse_integer(const std::string & what, const std::string & text, int64_t lo, int64_t hi) {
    int64_t v = 0;
    const char * end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, v);
    if (text.empty() || ec == std::errc::invalid_argument || ptr != end) {
        throw UsageError(what + ": expected an integer, got '" + printable(text) + "'");
    }
    if (ec == std::errc::result_out_of_range || v < lo || v > hi) {
        throw UsageError(what + ": " + printable(text) + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
    }
    return v;
}

float parse_real(const std::string & what, const std::string & text, float lo, float hi) {
    errno = 0;
    char * end = nullptr;
    const float v = text.empty() ? 0.0f : std::strtof(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || std::isspace(static_cast<unsigned char>(text[0]))) {
        throw UsageError(what + ": expected a number, got '" + printable(text) + "'");
    }
    if (errno == ERANGE || !std::isfinite(v) || v < lo || v > hi) {
        char range[96];
        std::snprintf(range, sizeof(range), "%g..%g", static_cast<double>(lo), static_cast<double>(hi));
        throw UsageError(what + ": " + printable(text) + " is outside " + range);
    }
    return v;
}

std::vector<int64_t> parse_integer_list(const std::string & what, const std::string & text, int64_t lo, int64_t hi) {
    std::vector<int64_t> out;
    size_t start = 0;
    while (true) {
        const size_t comma = text.find(',', start);
        out.push_back(parse_integer(what, text.substr(start, comma - start), lo, hi));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

void ArgParser::add(std::initializer_list<const char *> names, bool takes_value,
                    std::function<void(const std::string &, const std::string &)> set) {
    Option o;
    for (const char * n : names) o.names.emplace_back(n);
    o.takes_value = takes_value;
    o.set = std::move(set);
    options_.push_back(std::move(o));
}

void ArgParser::flag(std::initializer_list<const char *> names, bool * out) {
    add(names, false, [out](const std::string &, const std::string &) { *out = true; });
}

void ArgParser::custom_flag(std::initializer_list<const char *> names, std::function<void()> fn) {
    add(names, false, [fn = std::move(fn)](const std::string &, const std::string &) { fn(); });
}

void ArgParser::weight_load(WeightLoad * out) {
    add({"--mmap"}, false, [out](const std::string &, const std::string &) { *out = WeightLoad::Map; });
    add({"--no-mmap"}, false, [out](const std::string &, const std::string &) { *out = WeightLoad::Read; });
}

void ArgParser::activation_mode() {
    add({"--act-quant"}, true, [](const std::string & n, const std::string & v) {
        try {
            set_activation_mode(v.c_str());
        } catch (const UsageError &) {
            throw;
        } catch (const Error & e) {
            throw UsageError(n + ": " + e.what());
        }
    });
    add({"--expert-rows16"}, false, [](const std::string &, const std::string &) { set_expert_rows16(true); });
}

void ArgParser::text(std::initializer_list<const char *> names, std::string * out) {
    add(names, true, [out](const std::string &, const std::string & v) { *out = v; });
}

void ArgParser::integer(std::initializer_list<const char *> names, int64_t * out, int64_t lo, int64_t hi) {
    add(names, true, [=](const std::string & n, const std::string & v) { *out = parse_integer(n, v, lo, hi); });
}

void ArgParser::real(std::initializer_list<const char *> names, float * out, float lo, float hi) {
    add(names, true, [=](const std::string & n, const std::string & v) { *out = parse_real(n, v, lo, hi); });
}

void ArgParser::custom(std::initializer_list<const char *> names, std::function<void(const std::string &)> fn) {
    add(names, true, [fn = std::move(fn)](const std::string &, const std::string & v) { fn(v); });
}

bool ArgParser::parse(const std::vector<std::string> & args) {
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string & a = args[i];
        if (a == "-h" || a == "--help") return false;
        Option * match = nullptr;
        for (auto & o : options_) {
            for (const auto & n : o.names) {
                if (n == a) match = &o;
            }
        }
        if (!match) {
            // "-" alone and non-dash words are positional; anything else dash-led is a flag we do not know.
            if (a.size() > 1 && a[0] == '-' && !(a.size() > 1 && (std::isdigit(static_cast<unsigned char>(a[1])) != 0))) {
                throw UsageError("unknown flag '" + printable(a) + "'");
            }
            if (!positional_) throw UsageError("unexpected argument '" + printable(a) + "'");
            positional_->push_back(a);
            continue;
        }
        std::string value;
        if (match->takes_value) {
            if (i + 1 >= args.size()) throw UsageError(a + ": missing value");
            value = args[++i];
        }
        match->set(a, value);
        match->given = true;
    }
    return true;
}

bool ArgParser::given(const std::string & name) const {
    for (const auto & o : options_) {
        for (const auto & n : o.names) {
            if (n == name) return o.given;
        }
    }
    return false;
}

int run_with_usage(const std::string & command, const std::function<int()> & body) {
    try {
        return body();
    } catch (const UsageError & e) {
        std::fprintf(stderr, "offgrid %s: %s (see offgrid %s --help)\n", command.c_str(), e.what(), command.c_str());
        return 2;
    }
}

}  // namespace offgrid::tools
