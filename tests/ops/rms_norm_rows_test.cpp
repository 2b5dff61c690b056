// ops::rms_norm_rows gives every row ops::rms_norm's bits, for any row count (groups of four and the rest),
// with and without gammas, and in place.
#include <gtest/gtest.h>

#include <vector>

#include "ops/elementwise.h"
#include "random_data.h"

namespace offgrid::ops {
namespace {

using test_data::random_floats;

TEST(RmsNormRows, EveryRowHasRmsNormBits) {
    for (size_t n : {1u, 7u, 64u, 1024u}) {
        for (size_t rows = 0; rows <= 9; ++rows) {
            auto x = random_floats(rows * n, 11 + rows + n);
            for (size_t i = 0; i < x.size(); i += 3) x[i] *= 1000.0f;  // a wide range of magnitudes
            const auto g = random_floats(rows * n, 23 + rows);
            std::vector<const float *> gammas(rows);
            for (size_t r = 0; r < rows; ++r) gammas[r] = g.data() + r * n;
            for (bool with_gamma : {false, true}) {
                std::vector<float> want(rows * n), got(rows * n);
                for (size_t r = 0; r < rows; ++r) {
                    rms_norm(x.data() + r * n, n, 1e-6f, with_gamma ? gammas[r] : nullptr, want.data() + r * n);
                }
                rms_norm_rows(x.data(), rows, n, 1e-6f, with_gamma ? gammas.data() : nullptr, got.data());
                EXPECT_EQ(got, want) << "n " << n << " rows " << rows << " gamma " << with_gamma;
                auto in_place = x;
                rms_norm_rows(in_place.data(), rows, n, 1e-6f, with_gamma ? gammas.data() : nullptr, in_place.data());
                EXPECT_EQ(in_place, want) << "in place, n " << n << " rows " << rows;
            }
        }
    }
}

}  // namespace
}  // namespace offgrid::ops
