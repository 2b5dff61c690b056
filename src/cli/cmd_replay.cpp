// `offgrid replay MODEL SCRIPT [-b OUT.bin] [-o OUT.txt] [-t N]`: runs a golden-format workload script.
#include <cstdio>

#include "command.h"
#include "offgrid/context.h"
#include "offgrid/error.h"
#include "args/cli_args.h"
#include "workload/replay.h"

namespace {

int replay_main(const std::vector<std::string> & args) {
    return offgrid::tools::run_with_usage("replay", [&]() -> int {
        std::vector<std::string> pos;
        offgrid::tools::ReplayOptions opt;
        int64_t threads = 0;
        bool help = false;
        offgrid::tools::ArgParser p;
        p.text({"-b"}, &opt.bin_path);
        p.text({"-o"}, &opt.text_path);
        p.integer({"-t"}, &threads, 1, offgrid::kMaxThreads);
        p.allow_positional(&pos);
        help = !p.parse(args);
        if (help) {
            std::printf("usage: offgrid replay MODEL SCRIPT [-b OUT.bin] [-o OUT.txt] [-t THREADS]\n"
                        "Runs a workload script (the golden set's format) and writes its logit rows:\n"
                        "  -b FILE   binary LOGREC01 record\n"
                        "  -o FILE   readable text log ('-' = stdout)\n"
                        "  -t N      threads, 1..256 (results do not depend on it)\n"
                        "Outputs appear only when the whole script ran. Exit status 1 when a decode call failed\n"
                        "(unless the script says `set expect_failures 1`) or a command was unknown.\n");
            return 0;
        }
        opt.n_threads = static_cast<int>(threads);
        if (pos.size() != 2) throw offgrid::tools::UsageError("expected MODEL and SCRIPT");
        if (p.given("-b") && opt.bin_path.empty()) throw offgrid::tools::UsageError("-b: empty file name");
        if (p.given("-o") && opt.text_path.empty()) throw offgrid::tools::UsageError("-o: empty file name");
        auto workload = offgrid::tools::Workload::load(pos[1]);
        auto model = offgrid::Model::load(pos[0]);
        const auto s = offgrid::tools::replay(model, workload, opt);
        std::fprintf(stderr, "replay: %d decode calls, %d rows, %d failed calls%s%s\n", s.steps, s.rows, s.failed_calls,
                     s.failed_calls > 0 && s.failures_expected ? " (expected by the script)" : "",
                     s.unknown > 0 ? (", " + std::to_string(s.unknown) + " unknown commands").c_str() : "");
        return s.ok() ? 0 : 1;
    });
}

}  // namespace

OFFGRID_COMMAND("replay", "run a workload script and record its logits (golden format)", replay_main);
