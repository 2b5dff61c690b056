// The PLE key and value products folded into the PLE table (spec 3.4.2). A token's PLE input u_t is the
// concatenation of Hp table rows, one per head, so W u_t is the sum over heads h of W[:, h-block] times head h's
// row. Multiplying every table row by its head's block once, at load, turns a token's key and value into Hp
// precomputed rows added in head order: (hc + 1) E floats read per head instead of the (hc + 1) E x E weights of
// the two products (21 MB of the 357 MB an F32 `bench` token reads).
//
// Invariants:
//  - entry (row r, output o) is one f32 dot product of W's row o over head h's Dp inputs and table row r
//    (ops::matmul on the widened weights, built once at load; never depends on a batch or a thread count);
//  - a token's key and value are its Hp rows added in head order, so they never depend on other tokens;
//  - the values are the exact products of the stored weights (dequantised to f32, no activation quantisation),
//    so they differ from the spec's order of summation only by float rounding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/qwen4exp/hparams.h"
#include "ops/matmul.h"

namespace offgrid::model::qwen4exp {

struct PleProjections {
    size_t key_width = 0, value_width = 0;  // hc * E and E
    std::vector<size_t> first;              // Hp: head h's local row i is table row first[h] + i
    std::vector<float> key;                 // (sum of V[h]) x key_width
    std::vector<float> value;               // (sum of V[h]) x value_width

    bool empty() const { return first.empty(); }
    size_t bytes() const { return (key.size() + value.size()) * sizeof(float); }
    // Bytes the tables of this model would take.
    static size_t bytes_for(const Hparams & hp);
    // Key and value of one token whose head h uses local row rows[h] (< V[h]): sums in head order.
    void token(const uint32_t * rows, float * key_out, float * value_out) const;
};

// The tables for the PLE layer's key (hc*E x E) and value (E x E) matrices over the per-layer token table.
PleProjections build_ple_projections(const Hparams & hp, const ops::Matrix & table, const ops::Matrix & key,
                                     const ops::Matrix & value);

}  // namespace offgrid::model::qwen4exp
