// The software fetch ahead of the AVX-512 4-row decode tiles (the int8 q4_K and q6_K tiles, the Q8_0 tile of the
// float side; include only from *_avx512.cpp, inside their AVX-512 guard). A tile reads its four rows block by
// block in turn, so the next tile's bytes are fetched as one stream, an even share per block: into L1 a tile
// ahead of the reads, and the same share of a later tile into L2 (docs/kernels.md, "Integer kernels with 16-bit
// activations", the 4-row tiles; the distances are the callers'). Hints only: no result depends on them.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace offgrid::ops::cpu::avx512 {

// One block's share of both fetches: `share` bytes of the next tile (at next) into L1, and as many of the tile
// `later` bytes past it into L2.
inline void fetch_tile_share(const uint8_t * next, size_t share, size_t later) {
    for (size_t off = 0; off < share; off += 64) {
        _mm_prefetch(reinterpret_cast<const char *>(next + off), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char *>(next + later + off), _MM_HINT_T1);
    }
}

}  // namespace offgrid::ops::cpu::avx512
