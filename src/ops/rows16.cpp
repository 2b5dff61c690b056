#include "ops/rows16.h"

#include <cstring>

#include "common/error.h"
#include "tensor/blocks.h"

namespace offgrid::ops {

namespace {

using tensor::BlockQ4_K;

size_t group_bytes(const Matrix & w) { return static_cast<size_t>(kRows16) * w.row_bytes; }

}  // namespace

bool rows16_eligible(const Matrix & w) {
    return w.type == tensor::ElemType::Q4_K && !w.rows16 && w.rows > 0 && w.rows % kRows16 == 0;
}

Matrix repack_rows16(const Matrix & w, uint8_t * dst) {
    if (!rows16_eligible(w)) throw Error("repack_rows16: a q4_K matrix of whole 16-row groups in the file's layout");
    const int64_t nb = w.cols / 256;
    for (int64_t g = 0; g < w.rows / kRows16; ++g) {
        auto * out = reinterpret_cast<Q4KRows16Block *>(dst + static_cast<size_t>(g) * group_bytes(w));
        for (int64_t b = 0; b < nb; ++b) {
            Q4KRows16Block & o = out[b];
            for (int r = 0; r < kRows16; ++r) {
                const auto & x = reinterpret_cast<const BlockQ4_K *>(w.row(g * kRows16 + r))[b];
                o.d[r] = x.d;
                o.dmin[r] = x.dmin;
                for (int j = 0; j < 12; ++j) o.planes[j][r] = x.scales[j];
                for (int k = 0; k < 32; ++k) std::memcpy(&o.qs[k][4 * r], x.qs + 4 * k, 4);
            }
        }
    }
    Matrix m = w;
    m.data = dst;
    m.rows16 = true;
    return m;
}

void unpack_rows16_group(const Matrix & w, int64_t g, uint8_t * out) {
    const int64_t nb = w.cols / 256;
    const auto * in = reinterpret_cast<const Q4KRows16Block *>(w.data + static_cast<size_t>(g) * group_bytes(w));
    for (int64_t b = 0; b < nb; ++b) {
        const Q4KRows16Block & o = in[b];
        for (int r = 0; r < kRows16; ++r) {
            auto & x = reinterpret_cast<BlockQ4_K *>(out + static_cast<size_t>(r) * w.row_bytes)[b];
            x.d = o.d[r];
            x.dmin = o.dmin[r];
            for (int j = 0; j < 12; ++j) x.scales[j] = o.planes[j][r];
            for (int k = 0; k < 32; ++k) std::memcpy(x.qs + 4 * k, &o.qs[k][4 * r], 4);
        }
    }
}

}  // namespace offgrid::ops
