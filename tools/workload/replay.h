// Runs a workload script (runtime/workload.h) against a model and writes the golden set's records: the binary
// LOGREC01 file and the readable text log.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "offgrid/context.h"
#include "workload/workload.h"

namespace offgrid::tools {

struct ReplayOptions {
    std::string bin_path;   // LOGREC01 output; empty = none
    std::string text_path;  // text log; empty = none, "-" = stdout
    int n_threads = 1;      // overrides `set threads` (no effect on results); 0 = the script's; at most 256
    // A layer pipeline over processes (offgrid/distributed.h): every process runs the script, one writes the
    // state files (write_state_files); before a save every process calls before_state_save (the writer gathers
    // the cache rows of every layer), after it after_state_save (so no process reads a file not yet written).
    bool write_state_files = true;
    std::function<void(Context &)> before_state_save;
    std::function<void()> after_state_save;
};

struct ReplaySummary {
    int steps = 0;          // decode calls made
    int rows = 0;           // logit rows written
    int failed_calls = 0;   // decode calls that did not return Ok
    int unknown = 0;        // commands skipped as unknown
    bool failures_expected = false;  // the script said `set expect_failures 1`
    // The command's exit status: failed calls (unless expected) or unknown commands make it 1.
    bool ok() const { return (failed_calls == 0 || failures_expected) && unknown == 0; }
};

// Throws offgrid::Error for a command the engine cannot run (with the script line). The outputs are written
// through temporary files and appear only when the whole script ran; an output path that is the model (or a
// directory) is refused before the first command.
ReplaySummary replay(std::shared_ptr<const Model> model, const Workload & workload, const ReplayOptions & options);

}  // namespace offgrid::tools
