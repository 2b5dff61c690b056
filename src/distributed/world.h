// The MPI world of a pipeline run: this process's rank, the number of ranks, and point-to-point messages that
// never wait forever. Built only with OFFGRID_MPI (world_mpi.cpp).
//
// Invariants:
//  1. Every wait (a send to complete, a message to arrive) has a deadline: after `timeout` seconds of this
//     process running without progress, it prints one line naming the peer and what it waited for, and ends the
//     whole job with MPI_Abort. A peer that died or stopped answering never hangs the others. Time while this
//     process itself is stopped (SIGSTOP) does not count: each poll interval counts at most 0.1 s.
//  2. Messages between two ranks arrive in the order they were sent (MPI's non-overtaking rule, one tag per kind).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace offgrid::distributed {

class World {
public:
    // True when this process was started by an MPI launcher (mpirun, srun): its environment names a rank.
    static bool launched();
    // Initialises MPI (once; later calls return the same world). Throws offgrid::Error when MPI cannot start.
    static World & get();
    // Finalises MPI if it was initialised (the end of main).
    static void finalize();

    int rank() const { return rank_; }
    int size() const { return size_; }
    double timeout() const { return timeout_; }
    void set_timeout(double seconds) { timeout_ = seconds; }

    // Blocking send / receive of a byte vector (any size), with the deadline of invariant 1. `what` names the
    // message in the timeout error.
    void send(int to, int tag, const std::vector<uint8_t> & bytes, const char * what);
    std::vector<uint8_t> recv(int from, int tag, const char * what);
    // Every rank reaches this point (with the deadline).
    void barrier(const char * what);

    // Totals since start: seconds spent in send / recv / barrier (waiting for peers and copying), bytes and
    // messages sent. For the cost model's figures (docs/distributed.md).
    struct Traffic {
        double wait_seconds = 0;
        uint64_t bytes_sent = 0;
        uint64_t messages_sent = 0;
    };
    const Traffic & traffic() const { return traffic_; }

    // One line on stderr with the rank, then MPI_Abort: the launcher ends every rank.
    [[noreturn]] void abort(const std::string & why) const;

private:
    World() = default;
    int rank_ = 0, size_ = 1;
    double timeout_ = 120.0;
    Traffic traffic_;
};

// Message tags, one per kind of message.
enum Tag : int { kTagCarry = 1, kTagResult = 2, kTagState = 3, kTagBarrier = 4, kTagHello = 5 };

}  // namespace offgrid::distributed
