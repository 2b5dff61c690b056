// How fast can this machine stream bytes from DRAM at all? The ceiling of F32 decode (docs/kernels.md,
// "The bus and pages"). Every variant reads the same number of bytes once per pass with AVX-512 loads:
//   memory     anon-4k (MADV_NOHUGEPAGE), anon-thp (2 MiB aligned, MADV_HUGEPAGE), file (read-only private
//              mapping of a file, as the weights are mapped), file-thp (the same with MADV_HUGEPAGE before the
//              first touch), file-populate (MAP_POPULATE);
//   threads    1 or 2 (each reads a contiguous share, as the matmul driver splits rows);
//   streams    1, 2, 4 or 8 independent sequential streams per thread (a thread's share cut in that many
//              pieces, read in lock step: the 4-row decode tile is 4 streams);
//   prefetch   software prefetch (prefetcht0) that many bytes ahead in every stream, 0 = none.
// Variants are interleaved round by round (a busy machine disturbs them alike); prints best and median GB/s
// and, per mapping, how much of it the kernel backs with 2 MiB pages (smaps AnonHugePages / FilePmdMapped).
// usage: bench_bandwidth [MiB=384] [rounds=5] [file=/work/models/kbench-f32.gguf] [file2]
// file2 (optional): a second file mapped like `file`, e.g. one whose page cache was dropped and re-read through
// a mapping, so that the kernel holds it in 2 MiB folios (docs/kernels.md, "The bus and pages").
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "ops/thread_pool.h"

namespace {

constexpr size_t kHuge = size_t{2} << 20;
constexpr size_t kStep = 256;  // bytes per stream per iteration: four 64-byte lines

#if defined(__x86_64__)
// Reads [base, base + bytes) as S pieces in lock step; returns a sum so the loads cannot be dropped.
template <int S>
__attribute__((target("avx512f"))) float read_streams(const uint8_t * base, size_t bytes, size_t prefetch) {
    const size_t len = bytes / S / kStep * kStep;
    __m512 acc[S];
    for (int s = 0; s < S; ++s) acc[s] = _mm512_setzero_ps();
    for (size_t i = 0; i < len; i += kStep) {
        for (int s = 0; s < S; ++s) {
            const uint8_t * p = base + static_cast<size_t>(s) * len + i;
            if (prefetch) {
                for (size_t l = 0; l < kStep; l += 64) _mm_prefetch(reinterpret_cast<const char *>(p + prefetch + l), _MM_HINT_T0);
            }
            const __m512 a = _mm512_add_ps(_mm512_loadu_ps(p), _mm512_loadu_ps(p + 64));
            const __m512 b = _mm512_add_ps(_mm512_loadu_ps(p + 128), _mm512_loadu_ps(p + 192));
            acc[s] = _mm512_add_ps(acc[s], _mm512_add_ps(a, b));
        }
    }
    __m512 t = acc[0];
    for (int s = 1; s < S; ++s) t = _mm512_add_ps(t, acc[s]);
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, t);
    float sum = 0;
    for (const float v : lanes) sum += v;
    return sum;
}
#else
template <int S>
float read_streams(const uint8_t * base, size_t bytes, size_t) {
    float s = 0;
    for (size_t i = 0; i < bytes; i += 64) s += static_cast<float>(base[i]);
    return s;
}
#endif

float read_any(int streams, const uint8_t * base, size_t bytes, size_t prefetch) {
    switch (streams) {
        case 1: return read_streams<1>(base, bytes, prefetch);
        case 2: return read_streams<2>(base, bytes, prefetch);
        case 4: return read_streams<4>(base, bytes, prefetch);
        default: return read_streams<8>(base, bytes, prefetch);
    }
}

struct Region {
    std::string name;
    const uint8_t * data = nullptr;
    void * map = nullptr;  // what to munmap
    size_t map_size = 0;
};

// 2 MiB aligned address range reserved for a mapping of `bytes` (so huge pages can back it).
uint8_t * reserve_aligned(size_t bytes, void ** map, size_t * map_size) {
    *map_size = bytes + kHuge;
    *map = mmap(nullptr, *map_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (*map == MAP_FAILED) { std::perror("mmap"); std::exit(1); }
    return reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(*map) + kHuge - 1) / kHuge * kHuge);
}

Region anon(const char * name, size_t bytes, int advice) {
    Region r{name};
    uint8_t * p = reserve_aligned(bytes, &r.map, &r.map_size);
    if (mmap(p, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) {
        std::perror("mmap anon"); std::exit(1);
    }
    if (madvise(p, bytes, advice) != 0) std::perror("madvise");
    for (size_t i = 0; i < bytes; i += 4096) p[i] = static_cast<uint8_t>(i >> 12);
    std::memset(p, 1, bytes);
    r.data = p;
    return r;
}

Region file_map(const char * name, const char * path, size_t bytes, int flags, int advice) {
    Region r{name};
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { std::perror(path); std::exit(1); }
    struct stat st {};
    fstat(fd, &st);
    if (static_cast<size_t>(st.st_size) < bytes) { std::fprintf(stderr, "%s is smaller than the buffer\n", path); std::exit(1); }
    uint8_t * p = reserve_aligned(bytes, &r.map, &r.map_size);
    if (mmap(p, bytes, PROT_READ, MAP_PRIVATE | MAP_FIXED | flags, fd, 0) == MAP_FAILED) { std::perror("mmap file"); std::exit(1); }
    close(fd);
    if (advice >= 0 && madvise(p, bytes, advice) != 0) std::perror("madvise file");
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < bytes; i += 4096) sink = sink + p[i];  // fault every page in before timing
    r.data = p;
    return r;
}

// kB of 2 MiB pages behind [p, p + bytes): AnonHugePages + FilePmdMapped of the smaps entries inside it.
long huge_kb(const uint8_t * p, size_t bytes) {
    std::ifstream smaps("/proc/self/smaps");
    std::string line;
    bool inside = false;
    long kb = 0;
    const auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
    while (std::getline(smaps, line)) {
        uintptr_t a = 0, b = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx ", &a, &b) == 2 && line.find(':') > line.find(' ')) {
            inside = a >= lo && b <= hi;
            continue;
        }
        if (!inside) continue;
        long v = 0;
        if (std::sscanf(line.c_str(), "AnonHugePages: %ld", &v) == 1 || std::sscanf(line.c_str(), "FilePmdMapped: %ld", &v) == 1) kb += v;
    }
    return kb;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char ** argv) {
    const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 384;
    const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
    const char * path = argc > 3 ? argv[3] : "/work/models/kbench-f32.gguf";
    const char * path2 = argc > 4 ? argv[4] : nullptr;
    const size_t bytes = mib << 20;

    std::vector<Region> regions;
    regions.push_back(anon("anon-4k", bytes, MADV_NOHUGEPAGE));
    regions.push_back(anon("anon-thp", bytes, MADV_HUGEPAGE));
    regions.push_back(file_map("file", path, bytes, 0, -1));
    regions.push_back(file_map("file-thp", path, bytes, 0, MADV_HUGEPAGE));
    regions.push_back(file_map("file-populate", path, bytes, MAP_POPULATE, -1));
    if (path2) regions.push_back(file_map("file2", path2, bytes, 0, -1));
    for (const Region & r : regions) {
        std::printf("%-14s %4zu MiB, backed by 2 MiB pages: %ld MiB\n", r.name.c_str(), mib, huge_kb(r.data, bytes) / 1024);
    }

    struct Variant { int region, threads, streams; size_t prefetch; std::vector<double> gbs; };
    std::vector<Variant> variants;
    const int stream_counts[] = {1, 2, 4, 8};
    const size_t prefetches[] = {0, 1024, 4096};
    for (int reg = 0; reg < static_cast<int>(regions.size()); ++reg)
        for (int t = 1; t <= 2; ++t)
            for (int s : stream_counts)
                for (size_t pf : prefetches) {
                    // The full grid on the two baseline mappings; the others with the prefetch that matters.
                    if (reg != 0 && reg != 2 && reg != 5 && pf == 4096) continue;
                    variants.push_back({reg, t, s, pf, {}});
                }

    offgrid::ops::ThreadPool pool1(1), pool2(2);
    std::vector<float> sink(2);
    for (int round = 0; round < rounds; ++round) {
        for (Variant & v : variants) {
            offgrid::ops::ThreadPool & pool = v.threads == 1 ? pool1 : pool2;
            const uint8_t * base = regions[v.region].data;
            const size_t share = bytes / v.threads;
            const auto t0 = std::chrono::steady_clock::now();
            pool.run_parts(v.threads, [&](int p) { sink[p] += read_any(v.streams, base + share * p, share, v.prefetch); });
            v.gbs.push_back(static_cast<double>(bytes) / seconds_since(t0) / 1e9);
        }
    }
    std::printf("%-14s %7s %7s %8s %9s %9s\n", "memory", "threads", "streams", "prefetch", "best GB/s", "median");
    for (Variant & v : variants) {
        std::sort(v.gbs.begin(), v.gbs.end());
        std::printf("%-14s %7d %7d %8zu %9.1f %9.1f\n", regions[v.region].name.c_str(), v.threads, v.streams, v.prefetch,
                    v.gbs.back(), v.gbs[v.gbs.size() / 2]);
    }
    for (Region & r : regions) munmap(r.map, r.map_size);
    return sink[0] == 12345.0f ? 1 : 0;
}
