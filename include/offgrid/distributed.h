// A layer pipeline over MPI ranks (docs/distributed.md): what the command line needs to run as one rank of it
// (the code is src/distributed/, built as offgrid_distributed; without OFFGRID_MPI it runs one process only and
// refuses a split or a launch as one of several ranks). Every rank runs the same program on the same input
// (SPMD): the same decode calls, sequence edits and state operations, so the hybrid memory's books (cells, pools,
// recurrent slots) are the same on every rank. Only the forward differs: rank r runs its layer range, taking
// the ubatch's carried streams from rank r - 1 and handing its own to rank r + 1; the last rank runs the head
// and sends the result to every other rank, so every rank's decode returns the same logits.
//
// Invariants:
//  1. Results are bit for bit those of one process: the ranges' forwards run the same operations in the same
//     order (the layer range of a forward), and the carry is copied as bytes.
//  2. A forward that fails on one rank (bad input, no memory) fails on every rank with the same message, and
//     the decode call is undone everywhere; a rank that dies or stops answering ends the job within
//     the timeout.
//  3. A rank's memory stores the rows of its own layers only (it keeps every layer's books); rank 0 gathers every
//     rank's rows before a state is saved, so a state file equals the one process's file and restores onto any
//     split.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "offgrid/context.h"

namespace offgrid::distributed {

struct PipelineOptions {
    std::string split;       // "" or "auto": balanced by weight bytes and each rank's memory; else "0-11,12-23"
    double timeout = 120.0;  // seconds a rank waits for another before ending the job
};

// What one process of a run uses.
struct Pipeline {
    std::shared_ptr<const Model> model;  // this rank's stage (or the whole model in a single process)
    int rank = 0;
    int size = 1;
    std::string split;                   // the split in --split syntax (empty in a single process)
    std::string layers;                  // this rank's range, "FIRST-LAST" (empty in a single process)
    bool writes_outputs() const { return rank == 0; }
    // Around a state save: `gather` makes this rank's memory hold every layer's rows (rank 0 receives them,
    // the others send theirs); `saved` waits until the file is written (so every rank may read it next).
    std::function<void(Context &)> gather;
    std::function<void()> saved;
    // Returns once every rank has called it (around a timed measurement, so no rank starts or probes the bus
    // while another is still busy elsewhere). Empty in a single process.
    std::function<void()> meet;
    // One line for stderr: this rank's ubatches, seconds in its layers' forward, seconds in messages (waiting
    // included), bytes and messages sent. Empty in a single process.
    std::function<std::string()> report;
};

// True when an MPI launcher (mpirun, srun) started this process: its environment names a rank.
bool under_launcher();

// Loads `model_path` for this process. Outside an MPI launcher (or with one rank) the whole model, as
// Model::load does. Under mpirun with N ranks: the split is agreed (rank 0 decides it from every rank's memory),
// each rank checks that it can hold its share before loading anything (else the job ends with one line naming
// the rank), then loads and wraps its stage. Throws offgrid::Error for a bad split or a build without MPI asked
// for one.
Pipeline start_pipeline(const std::string & model_path, const PipelineOptions & options);

// Ends MPI if start_pipeline started it (call before exit, on every rank).
void end_pipeline();

}  // namespace offgrid::distributed
