// Embeddings output on both architectures: the pooled embedding of one batch equals the pooling of the hidden
// states computed token by token (one token per decode call), for mean, last and cls; Context::embed leaves the
// memory as it was; a context without embeddings refuses to give them.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "model/glm5next/gen_model.h"
#include "model/qwen4exp/gen_model.h"
#include "common/error.h"
#include "offgrid/context.h"

namespace {

using offgrid::BatchToken;
using offgrid::Context;
using offgrid::ContextParams;
using offgrid::Pooling;

std::shared_ptr<const offgrid::Model> load(const offgrid::gguf::Writer & w, const char * tag) {
    const auto path = (std::filesystem::temp_directory_path() /
                       ("offgrid_embd_" + std::string(tag) + "_" + std::to_string(getpid()) + ".gguf")).string();
    w.write_file(path);
    auto m = offgrid::Model::load(path);
    std::filesystem::remove(path);
    return m;
}

std::shared_ptr<const offgrid::Model> model(const std::string & arch) {
    if (arch == "qwen4exp") {
        auto c = offgrid::model::qwen4exp::gen_preset("tiny");
        c.n_vocab = 300;
        return load(offgrid::model::qwen4exp::generate_model(c), "q");
    }
    return load(offgrid::model::glm5next::generate_model(offgrid::model::glm5next::gen_preset("tiny")), "g");
}

ContextParams params(Pooling pooling) {
    ContextParams p;
    p.n_ctx = 512;
    p.n_seq_max = 2;
    p.type_k = p.type_v = "f32";
    p.embeddings = true;
    p.pooling = pooling;
    return p;
}

std::vector<int32_t> tokens(int n, uint32_t seed) {
    std::vector<int32_t> out;
    uint32_t x = seed * 2654435761u + 1;
    for (int i = 0; i < n; ++i) {
        x = x * 1664525u + 1013904223u;
        out.push_back(static_cast<int32_t>((x >> 8) % 120));
    }
    return out;
}

class Embeddings : public ::testing::TestWithParam<std::string> {};

TEST_P(Embeddings, PooledBatchEqualsPoolingOfTokenByTokenHiddenStates) {
    const auto m = model(GetParam());
    const size_t n = m->n_embd();
    const auto toks = tokens(37, 3);
    // Token by token, no pooling: one hidden state per decode call.
    Context each(m, params(Pooling::None));
    std::vector<std::vector<float>> h;
    for (size_t i = 0; i < toks.size(); ++i) {
        ASSERT_TRUE(each.decode({{toks[i], static_cast<int32_t>(i), {0}, true}}).ok());
        h.emplace_back(each.embeddings(0), each.embeddings(0) + n);
    }
    for (Pooling pooling : {Pooling::Mean, Pooling::Last, Pooling::Cls}) {
        std::vector<float> want(n, 0.0f);
        for (size_t j = 0; j < n; ++j) {
            if (pooling == Pooling::Mean) {
                double s = 0;
                for (const auto & r : h) s += r[j];
                want[j] = static_cast<float>(s / double(h.size()));
            } else {
                want[j] = (pooling == Pooling::Last ? h.back() : h.front())[j];
            }
        }
        Context batch(m, params(pooling));
        std::vector<BatchToken> b;
        for (size_t i = 0; i < toks.size(); ++i) b.push_back({toks[i], static_cast<int32_t>(i), {0}, false});
        ASSERT_TRUE(batch.decode(b).ok());
        double worst = 0;
        for (size_t j = 0; j < n; ++j) worst = std::max(worst, double(std::fabs(batch.embeddings_seq(0)[j] - want[j])));
        std::printf("[embeddings] %s pooling %d: batch vs token by token, max |diff| %.3g\n", GetParam().c_str(),
                    static_cast<int>(pooling), worst);
        EXPECT_LE(worst, 1e-5);
        EXPECT_THROW(batch.embeddings_seq(1), offgrid::Error);  // no token of sequence 1 in the call
        if (pooling == Pooling::Mean) {
            // The server's call: the same vector, and the memory is left empty.
            Context api(m, params(Pooling::Mean));
            const std::vector<float> e = api.embed(toks, 1);
            double d = 0;
            for (size_t j = 0; j < n; ++j) d = std::max(d, double(std::fabs(e[j] - want[j])));
            EXPECT_LE(d, 1e-5);
            EXPECT_EQ(api.seq_pos_max(1), -1);
        }
    }
}

TEST_P(Embeddings, RefusedWithoutEmbeddings) {
    ContextParams p = params(Pooling::None);
    p.embeddings = false;
    Context ctx(model(GetParam()), p);
    ASSERT_TRUE(ctx.decode({{1, 0, {0}, true}}).ok());
    EXPECT_THROW(ctx.embeddings(0), offgrid::Error);
    EXPECT_THROW(ctx.embed({1, 2}), offgrid::Error);
}

INSTANTIATE_TEST_SUITE_P(BothArchitectures, Embeddings, ::testing::Values("qwen4exp", "glm5-next"),
                         [](const auto & info) { return info.param == "qwen4exp" ? std::string("qwen4exp") : std::string("glm5next"); });

}  // namespace
