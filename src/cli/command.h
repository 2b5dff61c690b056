// Subcommand registry of the `offgrid` executable. Each src/cli/cmd_*.cpp registers its commands with
// OFFGRID_COMMAND, so adding a command never touches main.cpp.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace offgrid::cli {

// A command gets its own arguments (without the program and command names) and returns the exit code.
using CommandFn = std::function<int(const std::vector<std::string> & args)>;

struct Command {
    std::string name;
    std::string summary;  // one line for `offgrid --help`
    CommandFn run;
};

std::vector<Command> & commands();

struct Registrar {
    Registrar(std::string name, std::string summary, CommandFn fn) {
        commands().push_back({std::move(name), std::move(summary), std::move(fn)});
    }
};

}  // namespace offgrid::cli

#define OFFGRID_CLI_CONCAT2(a, b) a##b
#define OFFGRID_CLI_CONCAT(a, b) OFFGRID_CLI_CONCAT2(a, b)
#define OFFGRID_COMMAND(name, summary, fn) \
    static ::offgrid::cli::Registrar OFFGRID_CLI_CONCAT(offgrid_command_, __LINE__)(name, summary, fn)
