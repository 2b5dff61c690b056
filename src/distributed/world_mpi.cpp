#include "distributed/world.h"

#include <malloc.h>
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "common/error.h"
#include "common/files.h"

namespace offgrid::distributed {

namespace {

// Largest piece of one MPI call (counts are int).
constexpr size_t kPiece = size_t{1} << 30;

// Polls `done` until it answers true or the deadline passes. Active time only: one interval counts at most
// 0.1 s, so a pause of this whole process (SIGSTOP) does not run the clock out.
template <typename Done>
bool wait_until(Done done, double timeout) {
    using clock = std::chrono::steady_clock;
    double waited = 0;
    auto last = clock::now();
    int spins = 0;
    while (!done()) {
        if (++spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(spins > 1024 ? 500 : 50));
        const auto now = clock::now();
        waited += std::min(0.1, std::chrono::duration<double>(now - last).count());
        last = now;
        if (waited > timeout) return false;
    }
    return true;
}

void wait_request(const World & w, MPI_Request & req, const std::string & what) {
    const bool ok = wait_until(
        [&] {
            int flag = 0;
            MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
            return flag != 0;
        },
        w.timeout());
    if (!ok) w.abort(what + ": no answer within " + std::to_string(static_cast<int>(w.timeout())) + " s");
}

bool g_initialised = false;

}  // namespace

bool World::launched() {
    for (const char * v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
        if (std::getenv(v) != nullptr) return true;
    }
    return false;
}

World & World::get() {
    static World world;
    if (!g_initialised) {
        // Under an address-space limit (ulimit -v), one malloc arena: glibc gives each thread that allocates its
        // own arena and reserves 64 MiB of address space for it, so Open MPI's two service threads would take
        // 128 MiB of the limit (measured; docs/distributed.md) that the rank's weights need. Our own threads
        // allocate nothing in a decode step (the workspace is reserved up front), so sharing costs no speed.
        rlimit lim{};
        if (getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) mallopt(M_ARENA_MAX, 1);
        int provided = 0;
        if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            throw Error("MPI: initialisation failed");
        }
        g_initialised = true;
        // The launcher ends the other ranks with SIGTERM when one aborts: leave no temporary output behind.
        std::signal(SIGTERM, [](int) {
            remove_temporary_files();
            std::_Exit(143);
        });
        MPI_Comm_rank(MPI_COMM_WORLD, &world.rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &world.size_);
    }
    return world;
}

void World::finalize() {
    if (!g_initialised) return;
    g_initialised = false;
    MPI_Finalize();
}

namespace {

// Adds the seconds from its construction to its end to `total`.
struct Stopwatch {
    explicit Stopwatch(double & total) : total_(total), t0_(std::chrono::steady_clock::now()) {}
    ~Stopwatch() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
    double & total_;
    std::chrono::steady_clock::time_point t0_;
};

}  // namespace

void World::send(int to, int tag, const std::vector<uint8_t> & bytes, const char * what) {
    const Stopwatch watch(traffic_.wait_seconds);
    const uint64_t n = bytes.size();
    traffic_.bytes_sent += n + sizeof n;
    ++traffic_.messages_sent;
    const std::string name = std::string("sending ") + what + " to rank " + std::to_string(to);
    MPI_Request req;
    MPI_Isend(&n, 1, MPI_UINT64_T, to, tag, MPI_COMM_WORLD, &req);
    wait_request(*this, req, name);
    for (size_t at = 0; at < n; at += kPiece) {
        const int count = static_cast<int>(std::min<uint64_t>(kPiece, n - at));
        MPI_Isend(bytes.data() + at, count, MPI_BYTE, to, tag, MPI_COMM_WORLD, &req);
        wait_request(*this, req, name);
    }
}

std::vector<uint8_t> World::recv(int from, int tag, const char * what) {
    const Stopwatch watch(traffic_.wait_seconds);
    const std::string name = std::string("waiting for ") + what + " from rank " + std::to_string(from);
    uint64_t n = 0;
    MPI_Request req;
    MPI_Irecv(&n, 1, MPI_UINT64_T, from, tag, MPI_COMM_WORLD, &req);
    wait_request(*this, req, name);
    std::vector<uint8_t> bytes(n);
    for (size_t at = 0; at < n; at += kPiece) {
        const int count = static_cast<int>(std::min<uint64_t>(kPiece, n - at));
        MPI_Irecv(bytes.data() + at, count, MPI_BYTE, from, tag, MPI_COMM_WORLD, &req);
        wait_request(*this, req, name);
    }
    return bytes;
}

void World::barrier(const char * what) {
    const Stopwatch watch(traffic_.wait_seconds);
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    wait_request(*this, req, std::string("waiting for every rank at ") + what);
}

void World::abort(const std::string & why) const {
    std::fprintf(stderr, "offgrid: rank %d of %d: %s; ending all ranks\n", rank_, size_, why.c_str());
    std::fflush(stderr);
    remove_temporary_files();  // MPI_Abort unwinds nothing: outputs in progress would stay as temporaries
    MPI_Abort(MPI_COMM_WORLD, 3);
    std::_Exit(3);
}

}  // namespace offgrid::distributed
