// `offgrid replay MODEL SCRIPT [-b OUT.bin] [-o OUT.txt] [-t N]`: runs a golden-format workload script.
#include <cstdio>

#include "cli/command.h"
#include "common/error.h"
#include "runtime/replay.h"

namespace {

int replay_main(const std::vector<std::string> & args) {
    std::vector<std::string> pos;
    offgrid::runtime::ReplayOptions opt;
    opt.n_threads = 0;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string & a = args[i];
        auto value = [&]() -> const std::string & {
            if (i + 1 >= args.size()) throw offgrid::Error("option " + a + " needs a value");
            return args[++i];
        };
        if (a == "-h" || a == "--help") {
            std::printf("usage: offgrid replay MODEL SCRIPT [-b OUT.bin] [-o OUT.txt] [-t THREADS]\n"
                        "Runs a workload script (the golden set's format) and writes its logit rows:\n"
                        "  -b FILE   binary LOGREC01 record\n"
                        "  -o FILE   readable text log ('-' = stdout)\n"
                        "  -t N      threads (results do not depend on it)\n");
            return 0;
        } else if (a == "-b") {
            opt.bin_path = value();
        } else if (a == "-o") {
            opt.text_path = value();
        } else if (a == "-t") {
            opt.n_threads = std::stoi(value());
        } else if (!a.empty() && a[0] == '-') {
            throw offgrid::Error("unknown option " + a + " (see offgrid replay --help)");
        } else {
            pos.push_back(a);
        }
    }
    if (pos.size() != 2) {
        throw offgrid::Error("expected MODEL and SCRIPT (see offgrid replay --help)");
    }
    auto workload = offgrid::runtime::Workload::load(pos[1]);
    auto model = offgrid::Model::load(pos[0]);
    const auto s = offgrid::runtime::replay(model, workload, opt);
    std::fprintf(stderr, "replay: %d decode calls, %d rows, %d failed calls\n", s.steps, s.rows, s.failed_calls);
    return 0;
}

}  // namespace

OFFGRID_COMMAND("replay", "run a workload script and record its logits (golden format)", replay_main);
