#include "model/qwen4exp/ple_projection.h"

#include <algorithm>

namespace offgrid::model::qwen4exp {

namespace {

size_t table_rows(const Hparams & hp) {
    size_t n = 0;
    for (uint32_t h = 0; h < hp.ple_heads(); ++h) n += hp.ple_vocab_sizes[h];
    return n;
}

// Head h's rows of out = (W's columns of head h, widened to an f32 matrix) times head h's table rows, as one
// f32 product (ops::matmul: every output a single dot of the f32 kernels, whatever the split).
void project(const Hparams & hp, const std::vector<size_t> & first, const std::vector<float> & emb,
             const ops::Matrix & w, size_t width, std::vector<float> & out) {
    const size_t Dp = hp.ple_dim, E = static_cast<size_t>(w.cols), Hp = hp.ple_heads();
    out.assign(emb.size() / Dp * width, 0.0f);
    std::vector<float> row(E), heads(Hp * width * Dp);  // heads: head h's block, width x Dp
    for (size_t o = 0; o < width; ++o) {
        ops::dequantize_matrix_row(w, static_cast<int64_t>(o), row.data());
        for (size_t h = 0; h < Hp; ++h) {
            std::copy(&row[h * Dp], &row[h * Dp] + Dp, &heads[(h * width + o) * Dp]);
        }
    }
    for (size_t h = 0; h < Hp; ++h) {
        const ops::Matrix wh = ops::make_matrix(tensor::ElemType::F32, &heads[h * width * Dp],
                                                static_cast<int64_t>(Dp), static_cast<int64_t>(width));
        ops::matmul(wh, &emb[first[h] * Dp], static_cast<int64_t>(hp.ple_vocab_sizes[h]), &out[first[h] * width]);
    }
}

}  // namespace

size_t PleProjections::bytes_for(const Hparams & hp) {
    return table_rows(hp) * (size_t{hp.hc} + 1) * hp.n_embd * sizeof(float);
}

void PleProjections::token(const uint32_t * rows, float * key_out, float * value_out) const {
    auto sum = [&](const std::vector<float> & t, size_t width, float * out) {
        const float * r0 = &t[(first[0] + rows[0]) * width];
        std::copy(r0, r0 + width, out);
        for (size_t h = 1; h < first.size(); ++h) {
            const float * r = &t[(first[h] + rows[h]) * width];
            for (size_t c = 0; c < width; ++c) out[c] += r[c];
        }
    };
    sum(key, key_width, key_out);
    sum(value, value_width, value_out);
}

PleProjections build_ple_projections(const Hparams & hp, const ops::Matrix & table, const ops::Matrix & key,
                                     const ops::Matrix & value) {
    PleProjections p;
    const size_t Hp = hp.ple_heads(), Dp = hp.ple_dim;
    p.key_width = static_cast<size_t>(key.rows);
    p.value_width = static_cast<size_t>(value.rows);
    p.first.resize(Hp);
    size_t rows = 0;
    for (size_t h = 0; h < Hp; ++h) {
        p.first[h] = rows;
        rows += hp.ple_vocab_sizes[h];
    }
    // Table rows as floats, head by head (a row two heads share is widened for each).
    std::vector<float> emb(rows * Dp);
    for (size_t h = 0; h < Hp; ++h) {
        for (size_t i = 0; i < hp.ple_vocab_sizes[h]; ++i) {
            ops::dequantize_matrix_row(table, static_cast<int64_t>(hp.ple_offsets[h] + i), &emb[(p.first[h] + i) * Dp]);
        }
    }
    project(hp, p.first, emb, key, p.key_width, p.key);
    project(hp, p.first, emb, value, p.value_width, p.value);
    return p;
}

}  // namespace offgrid::model::qwen4exp
