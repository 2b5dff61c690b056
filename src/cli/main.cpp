// `offgrid COMMAND [ARGS]`: dispatches to the registered subcommands.
#include <algorithm>
#include <cstdio>
#include <exception>

#include "command.h"

namespace offgrid::cli {

std::vector<Command> & commands() {
    static std::vector<Command> list;
    return list;
}

namespace {

void print_usage(std::FILE * out) {
    std::fprintf(out, "usage: offgrid COMMAND [ARGS]\n\ncommands:\n");
    auto list = commands();
    std::sort(list.begin(), list.end(), [](const Command & a, const Command & b) { return a.name < b.name; });
    for (const auto & c : list) {
        std::fprintf(out, "  %-12s %s\n", c.name.c_str(), c.summary.c_str());
    }
    std::fprintf(out, "\n`offgrid COMMAND --help` describes one command.\n");
}

}  // namespace
}  // namespace offgrid::cli

int main(int argc, char ** argv) {
    using namespace offgrid::cli;
    if (argc < 2) {
        print_usage(stderr);
        return 2;
    }
    const std::string name = argv[1];
    if (name == "-h" || name == "--help" || name == "help") {
        print_usage(stdout);
        return 0;
    }
    if (name == "--version" || name == "version") {
        std::printf("offgrid 0.1.0\n");
        return 0;
    }
    for (const auto & c : commands()) {
        if (c.name == name) {
            try {
                return c.run(std::vector<std::string>(argv + 2, argv + argc));
            } catch (const std::exception & e) {
                std::fprintf(stderr, "offgrid %s: %s\n", name.c_str(), e.what());
                return 1;
            }
        }
    }
    std::fprintf(stderr, "offgrid: unknown command '%s' (see offgrid --help)\n", name.c_str());
    return 2;
}
