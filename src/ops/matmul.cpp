#include "ops/matmul.h"

#include <string>
#include <vector>

#include "common/error.h"
#include "ops/half.h"

#if defined(__F16C__) && defined(__AVX2__)
#include <immintrin.h>
#define OFFGRID_HAVE_F16C 1
#endif

namespace offgrid::ops {

namespace {

using tensor::ElemType;

constexpr int kQ8Block = 32;
constexpr size_t kQ8BlockBytes = 2 + kQ8Block;  // f16 scale, then 32 int8 quants

// Eight independent partial sums: lets the compiler vectorise without reassociating a single sum.
inline float dot_f32(const float * a, const float * b, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
    }
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

inline float dot_f16(const uint16_t * w, const float * x, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float wf[8];
#ifdef OFFGRID_HAVE_F16C
        _mm256_storeu_ps(wf, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(w + i))));
#else
        for (int j = 0; j < 8; ++j) wf[j] = half_to_float(w[i + j]);
#endif
        for (int j = 0; j < 8; ++j) acc[j] += wf[j] * x[i + j];
    }
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; ++i) s += half_to_float(w[i]) * x[i];
    return s;
}

inline float dot_bf16(const uint16_t * w, const float * x, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int j = 0; j < 8; ++j) acc[j] += bf16_to_float(w[i + j]) * x[i + j];
    }
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; ++i) s += bf16_to_float(w[i]) * x[i];
    return s;
}

inline float dot_q8_0(const uint8_t * w, const float * x, int64_t n) {
    float s = 0;
    for (int64_t b = 0; b < n / kQ8Block; ++b) {
        const uint8_t * blk = w + b * kQ8BlockBytes;
        uint16_t d_bits;
        std::memcpy(&d_bits, blk, 2);
        const int8_t * q = reinterpret_cast<const int8_t *>(blk + 2);
        const float * xb = x + b * kQ8Block;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int i = 0; i < kQ8Block; i += 8) {
            for (int j = 0; j < 8; ++j) acc[j] += static_cast<float>(q[i + j]) * xb[i + j];
        }
        const float block_sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        s += half_to_float(d_bits) * block_sum;
    }
    return s;
}

inline float element(const Matrix & w, int64_t r, int64_t i) {
    const uint8_t * row = w.row(r);
    switch (w.type) {
        case ElemType::F32: {
            float v;
            std::memcpy(&v, row + 4 * i, 4);
            return v;
        }
        case ElemType::F16: {
            uint16_t h;
            std::memcpy(&h, row + 2 * i, 2);
            return half_to_float(h);
        }
        case ElemType::BF16: {
            uint16_t h;
            std::memcpy(&h, row + 2 * i, 2);
            return bf16_to_float(h);
        }
        case ElemType::Q8_0: {
            const uint8_t * blk = row + (i / kQ8Block) * kQ8BlockBytes;
            uint16_t d_bits;
            std::memcpy(&d_bits, blk, 2);
            const int8_t q = static_cast<int8_t>(blk[2 + i % kQ8Block]);
            return half_to_float(d_bits) * static_cast<float>(q);
        }
        default:
            throw Error("matmul: unsupported weight type " + std::to_string(static_cast<uint32_t>(w.type)));
    }
}

// Whole-row conversion to float for the matmul (exact for F16 and BF16; d * q for Q8_0).
void row_to_float(const Matrix & w, int64_t r, float * out) {
    const uint8_t * row = w.row(r);
    if (w.type == ElemType::F16) {
        const uint16_t * h = reinterpret_cast<const uint16_t *>(row);
        int64_t i = 0;
#ifdef OFFGRID_HAVE_F16C
        for (; i + 8 <= w.cols; i += 8) {
            _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(h + i))));
        }
#endif
        for (; i < w.cols; ++i) out[i] = half_to_float(h[i]);
    } else if (w.type == ElemType::BF16) {
        const uint16_t * h = reinterpret_cast<const uint16_t *>(row);
        for (int64_t i = 0; i < w.cols; ++i) out[i] = bf16_to_float(h[i]);
    } else {  // Q8_0
        for (int64_t b = 0; b < w.cols / kQ8Block; ++b) {
            const uint8_t * blk = row + b * kQ8BlockBytes;
            uint16_t d_bits;
            std::memcpy(&d_bits, blk, 2);
            const float d = half_to_float(d_bits);
            const int8_t * q = reinterpret_cast<const int8_t *>(blk + 2);
            for (int i = 0; i < kQ8Block; ++i) out[b * kQ8Block + i] = d * static_cast<float>(q[i]);
        }
    }
}

}  // namespace

bool supported_weight_type(ElemType type) {
    return type == ElemType::F32 || type == ElemType::F16 || type == ElemType::BF16 || type == ElemType::Q8_0;
}

size_t weight_row_bytes(ElemType type, int64_t n) {
    switch (type) {
        case ElemType::F32: return 4 * static_cast<size_t>(n);
        case ElemType::F16:
        case ElemType::BF16: return 2 * static_cast<size_t>(n);
        case ElemType::Q8_0: return static_cast<size_t>(n / kQ8Block) * kQ8BlockBytes;
        default: throw Error("unsupported weight type " + std::to_string(static_cast<uint32_t>(type)));
    }
}

Matrix make_matrix(ElemType type, const void * data, int64_t cols, int64_t rows) {
    if (!supported_weight_type(type)) {
        throw Error("unsupported weight type " + std::to_string(static_cast<uint32_t>(type)));
    }
    if (cols <= 0 || rows < 0) throw Error("matrix: bad shape " + std::to_string(cols) + "x" + std::to_string(rows));
    if (type == ElemType::Q8_0 && cols % kQ8Block != 0) {
        throw Error("matrix: q8_0 row width " + std::to_string(cols) + " is not a multiple of 32");
    }
    Matrix m;
    m.type = type;
    m.data = static_cast<const uint8_t *>(data);
    m.cols = cols;
    m.rows = rows;
    m.row_bytes = weight_row_bytes(type, cols);
    return m;
}

Matrix Matrix::row_slice(int64_t first, int64_t count) const {
    Matrix m = *this;
    m.data = row(first);
    m.rows = count;
    return m;
}

float dot_row(const Matrix & w, int64_t r, const float * x) {
    const uint8_t * row = w.row(r);
    switch (w.type) {
        case ElemType::F32: return dot_f32(reinterpret_cast<const float *>(row), x, w.cols);
        case ElemType::F16: return dot_f16(reinterpret_cast<const uint16_t *>(row), x, w.cols);
        case ElemType::BF16: return dot_bf16(reinterpret_cast<const uint16_t *>(row), x, w.cols);
        case ElemType::Q8_0: return dot_q8_0(row, x, w.cols);
        default: throw Error("matmul: unsupported weight type " + std::to_string(static_cast<uint32_t>(w.type)));
    }
}

float dot_row_ref(const Matrix & w, int64_t r, const float * x) {
    float s = 0;
    for (int64_t i = 0; i < w.cols; ++i) s += element(w, r, i) * x[i];
    return s;
}

void dequantize_matrix_row(const Matrix & w, int64_t r, float * out) {
    for (int64_t i = 0; i < w.cols; ++i) out[i] = element(w, r, i);
}

void matvec(const Matrix & w, const float * x, float * y, ThreadPool * pool) {
    matmul(w, x, 1, y, pool);
}

void matmul(const Matrix & w, const float * x, int64_t n_tokens, float * y, ThreadPool * pool) {
    if (!supported_weight_type(w.type)) {
        throw Error("matmul: unsupported weight type " + std::to_string(static_cast<uint32_t>(w.type)));
    }
    // Rows of W outer, tokens inner: each weight row is read and converted to F32 once per call, then
    // multiplied with every token by the same dot product (so grouping tokens never changes the bits).
    parallel_for(
        pool, static_cast<size_t>(w.rows),
        [&](size_t begin, size_t end) {
            std::vector<float> row_buf(w.type == ElemType::F32 ? 0 : w.cols);
            for (size_t o = begin; o < end; ++o) {
                const float * row;
                if (w.type == ElemType::F32) {
                    row = reinterpret_cast<const float *>(w.row(static_cast<int64_t>(o)));
                } else {
                    row_to_float(w, static_cast<int64_t>(o), row_buf.data());
                    row = row_buf.data();
                }
                for (int64_t t = 0; t < n_tokens; ++t) y[t * w.rows + o] = dot_f32(row, x + t * w.cols, w.cols);
            }
        },
        16);
}

void matmul_ref(const Matrix & w, const float * x, int64_t n_tokens, float * y) {
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t o = 0; o < w.rows; ++o) y[t * w.rows + o] = dot_row_ref(w, o, x + t * w.cols);
    }
}

}  // namespace offgrid::ops
