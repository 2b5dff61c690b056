// q4_K weights in groups of 16 rows, for the 8-bit path's products of a few tokens (ops::Matrix::rows16).
//
// In the file's layout a row is a run of super-blocks, so a product sums along a row and ends every block with a
// horizontal sum and a fold per row. In 16-row groups the 16 int32 lanes of a register are 16 rows: one 64-byte
// load holds the same 4 bytes of 16 rows, and each token's matching 4 activation bytes are one broadcast, so a
// token costs two `vpdpbusd` per 64 bytes (the low and the high nibbles) and no horizontal sum. A group's
// super-block b (sizeof(Q4KRows16Block) bytes, what the 16 rows' blocks take in the file):
//   qs[k][4r .. 4r + 3]   row r's qs bytes 4k .. 4k + 3 (k < 32): a 16 x 32 transpose of 4-byte words, every
//                         nibble stays in its byte (low nibbles: sub-block 2 (k / 8), high: the next one)
//   planes[j][r]          row r's packed scale byte j (j < 12)
//   d[r], dmin[r]         row r's f16 scales
// Group g holds rows 16g .. 16g + 15, blocks in order: it starts at byte 16 g row_bytes, as in the file, so a
// slice of whole groups is a plain offset. A row's integer sums of a block (isum, imin) are exact whatever the
// order, so products over this layout are the q4_K entry's bits (tests/ops/rows16_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/matmul.h"

namespace offgrid::ops {

constexpr int64_t kRows16 = 16;  // rows of a group

struct Q4KRows16Block {
    uint8_t qs[32][64];
    uint8_t planes[12][16];
    uint16_t d[16], dmin[16];
};
static_assert(sizeof(Q4KRows16Block) == 16 * 144, "a group's block takes what its 16 rows' blocks take");

// True when w (plain rows) can be held in 16-row groups: q4_K, a whole number of groups.
bool rows16_eligible(const Matrix & w);
// w's rows written to dst (w.rows * w.row_bytes bytes, not overlapping w) in 16-row groups; the matrix over dst.
Matrix repack_rows16(const Matrix & w, uint8_t * dst);
// Group g of a rows16 matrix as 16 plain rows at out (16 * w.row_bytes bytes).
void unpack_rows16_group(const Matrix & w, int64_t g, uint8_t * out);

}  // namespace offgrid::ops
