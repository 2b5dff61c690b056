// The C interface (include/offgrid.h) through its header alone: generation equal to `offgrid run`, tokenizer
// round trips, buffer-size protocol, statuses and messages instead of exceptions, embeddings, state files.
#include "offgrid.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_helpers.h"

extern "C" long offgrid_c_generate(const char * model_path, const char * prompt, int n, char * out, size_t cap);

namespace {

using offgrid::test::q;
using offgrid::test::run_offgrid;
using offgrid::test::TempDir;

// A generated tiny model (random weights, the built-in tokenizer) in a private directory.
class CApi : public ::testing::Test {
protected:
    void SetUp() override {
        path_ = dir_.file("tiny.gguf");
        const auto r = run_offgrid("gen-model -o " + q(path_));
        ASSERT_EQ(r.status, 0) << r.err;
        ASSERT_EQ(offgrid_model_load(path_.c_str(), 0, &model_), OFFGRID_OK) << offgrid_last_error();
        ASSERT_EQ(offgrid_tokenizer_from_model(model_, &tok_), OFFGRID_OK) << offgrid_last_error();
    }
    void TearDown() override {
        offgrid_tokenizer_free(tok_);
        offgrid_model_free(model_);
    }

    offgrid_context * new_context(offgrid_context_params p = offgrid_context_default_params()) {
        offgrid_context * ctx = nullptr;
        EXPECT_EQ(offgrid_context_new(model_, &p, &ctx), OFFGRID_OK) << offgrid_last_error();
        return ctx;
    }
    std::vector<int32_t> tokenize(const std::string & text, int add_bos = 0) {
        size_t n = 0;
        EXPECT_EQ(offgrid_tokenize(tok_, text.data(), text.size(), add_bos, 0, nullptr, 0, &n),
                  text.empty() && !add_bos ? OFFGRID_OK : OFFGRID_ERROR_BUFFER_TOO_SMALL);
        std::vector<int32_t> ids(n);
        EXPECT_EQ(offgrid_tokenize(tok_, text.data(), text.size(), add_bos, 0, ids.data(), ids.size(), &n), OFFGRID_OK);
        return ids;
    }
    std::string detokenize(const std::vector<int32_t> & ids) {
        size_t len = 0;
        offgrid_detokenize(tok_, ids.data(), ids.size(), 1, nullptr, 0, &len);
        std::string out(len, '\0');
        EXPECT_EQ(offgrid_detokenize(tok_, ids.data(), ids.size(), 1, out.data(), out.size(), &len), OFFGRID_OK);
        return out;
    }
    // The logits row after the last decode call.
    std::vector<float> last_logits(offgrid_context * ctx) {
        const float * row = offgrid_logits(ctx, -1);
        EXPECT_NE(row, nullptr) << offgrid_last_error();
        return row ? std::vector<float>(row, row + offgrid_model_n_vocab(model_)) : std::vector<float>{};
    }

    TempDir dir_;
    std::string path_;
    offgrid_model * model_ = nullptr;
    offgrid_tokenizer * tok_ = nullptr;
};

TEST_F(CApi, GreedyGenerationFromCEqualsOffgridRun) {
    for (const std::string prompt : {"Hello there", "The cabin stands at the end of a long gravel road, where"}) {
        const auto r = run_offgrid("run -m " + q(path_) + " -p " + q(prompt) + " -n 24 --temp 0 -t 1");
        ASSERT_EQ(r.status, 0) << r.err;
        std::vector<char> buf(1 << 16);
        const long n = offgrid_c_generate(path_.c_str(), prompt.c_str(), 24, buf.data(), buf.size());
        ASSERT_GE(n, 0) << offgrid_last_error();
        // `run` ends its text with one newline.
        EXPECT_EQ(std::string(buf.data(), static_cast<size_t>(n)) + "\n", r.out) << prompt;
    }
}

TEST_F(CApi, TokenizeDetokenizeRoundTripsAnyBytes) {
    std::string bytes = "plain words, then \xff\xfe bytes, \xc3\xa9t\xc3\xa9 and <|im_end|> as text";
    bytes.push_back('\0');
    bytes += "after a NUL";
    const auto ids = tokenize(bytes);
    ASSERT_FALSE(ids.empty());
    for (const int32_t id : ids) EXPECT_TRUE(id >= 0 && id < offgrid_tokenizer_n_vocab(tok_));
    EXPECT_EQ(detokenize(ids), bytes);
    // add_bos puts BOS first exactly when the tokenizer asks for it.
    const auto with_bos = tokenize(bytes, 1);
    const bool bos = offgrid_tokenizer_add_bos(tok_) && offgrid_tokenizer_bos(tok_) >= 0;
    ASSERT_EQ(with_bos.size(), ids.size() + (bos ? 1 : 0));
    if (bos) {
        EXPECT_EQ(with_bos.front(), offgrid_tokenizer_bos(tok_));
    }
}

TEST_F(CApi, ASmallBufferReportsTheSizeAndFillsNothing) {
    const std::string text = "several words of text";
    size_t n = 0;
    int32_t one[1] = {-7};
    EXPECT_EQ(offgrid_tokenize(tok_, text.data(), text.size(), 0, 0, one, 1, &n), OFFGRID_ERROR_BUFFER_TOO_SMALL);
    EXPECT_GT(n, 1u);
    EXPECT_EQ(one[0], -7);
    EXPECT_NE(std::string(offgrid_last_error()).find("buffer"), std::string::npos);
    size_t len = 0;
    char tiny[2];
    EXPECT_EQ(offgrid_model_describe(model_, tiny, sizeof tiny, &len), OFFGRID_ERROR_BUFFER_TOO_SMALL);
    std::string d(len + 1, '\0');
    ASSERT_EQ(offgrid_model_describe(model_, d.data(), d.size(), &len), OFFGRID_OK);
    EXPECT_NE(d.find("qwen4exp"), std::string::npos) << d;
}

TEST_F(CApi, FailuresAreStatusesWithAMessageNeverExceptions) {
    offgrid_model * m = nullptr;
    const std::string missing = dir_.file("missing.gguf");
    EXPECT_EQ(offgrid_model_load(missing.c_str(), 0, &m), OFFGRID_ERROR_FILE);
    EXPECT_EQ(m, nullptr);
    EXPECT_NE(std::string(offgrid_last_error()).find("missing.gguf"), std::string::npos) << offgrid_last_error();
    EXPECT_EQ(offgrid_model_load(nullptr, 0, &m), OFFGRID_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(offgrid_model_load(path_.c_str(), 9, &m), OFFGRID_ERROR_INVALID_ARGUMENT);
    offgrid_clear_error();
    EXPECT_STREQ(offgrid_last_error(), "");

    offgrid_sampler_params sp = offgrid_sampler_default_params();
    sp.top_p = 2;
    offgrid_sampler * s = nullptr;
    EXPECT_EQ(offgrid_sampler_new(&sp, &s), OFFGRID_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(offgrid_last_error()).find("top_p"), std::string::npos) << offgrid_last_error();

    offgrid_context_params cp = offgrid_context_default_params();
    cp.type_k = "q4_0";
    offgrid_context * bad = nullptr;
    EXPECT_NE(offgrid_context_new(model_, &cp, &bad), OFFGRID_OK);
    EXPECT_EQ(bad, nullptr);

    offgrid_context * ctx = new_context();
    ASSERT_NE(ctx, nullptr);
    const auto ids = tokenize("some prompt");
    ASSERT_EQ(offgrid_decode_tokens(ctx, ids.data(), ids.size(), 0), OFFGRID_OK);
    const int32_t before = offgrid_seq_pos_max(ctx, 0);
    const int32_t out_of_vocab = offgrid_model_n_vocab(model_);
    EXPECT_EQ(offgrid_decode_tokens(ctx, &out_of_vocab, 1, 0), OFFGRID_ERROR_INVALID_BATCH);
    EXPECT_EQ(offgrid_seq_pos_max(ctx, 0), before);  // memory unchanged
    EXPECT_EQ(offgrid_logits(ctx, 5), nullptr);      // no such row
    EXPECT_EQ(offgrid_decode_tokens(nullptr, ids.data(), ids.size(), 0), OFFGRID_ERROR_INVALID_ARGUMENT);
    const int32_t out_of_range[] = {out_of_vocab};
    size_t len = 0;
    EXPECT_EQ(offgrid_detokenize(tok_, out_of_range, 1, 1, nullptr, 0, &len), OFFGRID_ERROR_INVALID_ARGUMENT);
    offgrid_context_free(ctx);
}

TEST_F(CApi, GreedySamplerTakesTheLargestLogit) {
    offgrid_context * ctx = new_context();
    const auto ids = tokenize("a short prompt", 1);
    ASSERT_EQ(offgrid_decode_tokens(ctx, ids.data(), ids.size(), 0), OFFGRID_OK) << offgrid_last_error();
    ASSERT_EQ(offgrid_n_outputs(ctx), 1);
    const auto logits = last_logits(ctx);
    size_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i) {
        if (logits[i] > logits[best]) best = i;
    }
    offgrid_sampler_params sp = offgrid_sampler_default_params();
    sp.temperature = 0;
    offgrid_sampler * s = nullptr;
    ASSERT_EQ(offgrid_sampler_new(&sp, &s), OFFGRID_OK);
    int32_t from_ctx = -1, from_row = -1;
    ASSERT_EQ(offgrid_sampler_sample(s, ctx, -1, &from_ctx), OFFGRID_OK);
    ASSERT_EQ(offgrid_sampler_sample_logits(s, logits.data(), logits.size(), &from_row), OFFGRID_OK);
    EXPECT_EQ(from_ctx, static_cast<int32_t>(best));
    EXPECT_EQ(from_row, static_cast<int32_t>(best));
    offgrid_sampler_free(s);
    offgrid_context_free(ctx);
}

TEST_F(CApi, EmbeddingIsMeanPooledAndOptionallyUnitNorm) {
    offgrid_context_params cp = offgrid_context_default_params();
    cp.n_ctx = 256;
    cp.embeddings = 1;
    cp.pooling = 1;  // mean
    offgrid_context * ctx = new_context(cp);
    ASSERT_NE(ctx, nullptr);
    const size_t w = static_cast<size_t>(offgrid_model_n_embd(model_));
    const auto ids = tokenize("embed this text");
    std::vector<float> raw(w), unit(w), again(w);
    ASSERT_EQ(offgrid_embed(ctx, ids.data(), ids.size(), 0, 0, raw.data(), raw.size()), OFFGRID_OK) << offgrid_last_error();
    ASSERT_EQ(offgrid_embed(ctx, ids.data(), ids.size(), 0, 1, unit.data(), unit.size()), OFFGRID_OK);
    EXPECT_EQ(offgrid_seq_pos_max(ctx, 0), -1);  // the sequence is removed again
    double norm = 0;
    for (const float x : raw) norm += double(x) * x;
    norm = std::sqrt(norm);
    ASSERT_GT(norm, 0);
    for (size_t i = 0; i < w; ++i) EXPECT_NEAR(unit[i], raw[i] / norm, 1e-6) << i;
    // The same text again gives the same vector: the memory held nothing of the first call.
    ASSERT_EQ(offgrid_embed(ctx, ids.data(), ids.size(), 0, 0, again.data(), again.size()), OFFGRID_OK);
    EXPECT_EQ(again, raw);
    EXPECT_EQ(offgrid_embed(ctx, ids.data(), ids.size(), 0, 0, again.data(), w - 1), OFFGRID_ERROR_BUFFER_TOO_SMALL);
    offgrid_context_free(ctx);

    offgrid_context * plain = new_context();  // without embeddings
    EXPECT_EQ(offgrid_embed(plain, ids.data(), ids.size(), 0, 0, raw.data(), raw.size()), OFFGRID_ERROR_FAILED);
    offgrid_context_free(plain);
}

TEST_F(CApi, StateFileRestoresTheMemoryAndTheTokenList) {
    offgrid_context_params cp = offgrid_context_default_params();
    cp.n_ctx = 256;
    offgrid_context * a = new_context(cp);
    const auto ids = tokenize("the first part of a text", 1);
    ASSERT_EQ(offgrid_decode_tokens(a, ids.data(), ids.size(), 0), OFFGRID_OK);
    const std::string state = dir_.file("a.state");
    ASSERT_EQ(offgrid_state_save_file(a, state.c_str(), -1, ids.data(), ids.size()), OFFGRID_OK) << offgrid_last_error();
    const auto more = tokenize(" and more");
    ASSERT_EQ(offgrid_decode_tokens(a, more.data(), more.size(), 0), OFFGRID_OK);
    const auto expected = last_logits(a);

    offgrid_context * b = new_context(cp);
    int32_t * restored = nullptr;
    size_t n = 0;
    ASSERT_EQ(offgrid_state_load_file(b, state.c_str(), -1, &restored, &n), OFFGRID_OK) << offgrid_last_error();
    EXPECT_EQ(std::vector<int32_t>(restored, restored + n), ids);
    offgrid_tokens_free(restored);
    EXPECT_EQ(offgrid_seq_pos_max(b, 0), static_cast<int32_t>(ids.size()) - 1);
    ASSERT_EQ(offgrid_decode_tokens(b, more.data(), more.size(), 0), OFFGRID_OK);
    EXPECT_EQ(last_logits(b), expected);

    const std::string garbage = dir_.file("garbage.state");
    { std::ofstream(garbage) << "not a state file"; }
    EXPECT_EQ(offgrid_state_load_file(b, garbage.c_str(), -1, &restored, &n), OFFGRID_ERROR_FILE);
    EXPECT_NE(std::string(offgrid_last_error()).find("garbage.state"), std::string::npos) << offgrid_last_error();
    offgrid_context_free(a);
    offgrid_context_free(b);
}

TEST_F(CApi, ChatRenderingNeverTurnsContentIntoControlTokens) {
    const offgrid_chat_message chat[] = {{"system", "be brief"}, {"user", "<|im_end|> inside"}};
    size_t n = 0;
    ASSERT_EQ(offgrid_chat_render(tok_, chat, 2, nullptr, 0, &n), OFFGRID_ERROR_BUFFER_TOO_SMALL);
    std::vector<int32_t> ids(n);
    ASSERT_EQ(offgrid_chat_render(tok_, chat, 2, ids.data(), ids.size(), &n), OFFGRID_OK);
    // Rendered back, the text is the ChatML conversation with the assistant's turn opened.
    const std::string text = detokenize(ids);
    EXPECT_NE(text.find("<|im_start|>user\n<|im_end|> inside<|im_end|>\n"), std::string::npos) << text;
    EXPECT_EQ(text.substr(text.size() - 22), "<|im_start|>assistant\n");
    // The content's marker is tokenised as text: its ids are those of the plain text.
    const auto content = tokenize("<|im_end|> inside");
    EXPECT_NE(std::search(ids.begin(), ids.end(), content.begin(), content.end()), ids.end());
    const offgrid_chat_message broken[] = {{"user", nullptr}};
    EXPECT_EQ(offgrid_chat_render(tok_, broken, 1, ids.data(), ids.size(), &n), OFFGRID_ERROR_INVALID_ARGUMENT);
}

// The header's promise: a model is shared by contexts on several threads, and the last error is per thread.
TEST_F(CApi, ContextsOverOneModelRunInParallelAndErrorsStayOnTheirThread) {
    const auto greedy = [&](const std::string & prompt, std::vector<int32_t> & out, std::string & err) {
        offgrid_context_params cp = offgrid_context_default_params();
        cp.n_ctx = 256;
        offgrid_context * ctx = nullptr;
        offgrid_sampler * s = nullptr;
        offgrid_sampler_params sp = offgrid_sampler_default_params();
        sp.temperature = 0;
        if (offgrid_context_new(model_, &cp, &ctx) != OFFGRID_OK || offgrid_sampler_new(&sp, &s) != OFFGRID_OK) {
            err = offgrid_last_error();
            return;
        }
        std::vector<int32_t> ids(64);
        size_t n = 0;
        offgrid_tokenize(tok_, prompt.data(), prompt.size(), 1, 0, ids.data(), ids.size(), &n);
        offgrid_status st = offgrid_decode_tokens(ctx, ids.data(), n, 0);
        for (int i = 0; i < 16 && st == OFFGRID_OK; ++i) {
            int32_t next = -1;
            st = offgrid_sampler_sample(s, ctx, -1, &next);
            out.push_back(next);
            if (st == OFFGRID_OK) st = offgrid_decode_tokens(ctx, &next, 1, 0);
        }
        if (st != OFFGRID_OK) err = offgrid_last_error();
        offgrid_sampler_free(s);
        offgrid_context_free(ctx);
    };
    const std::vector<std::string> prompts = {"first thread's prompt", "the second one, longer than the first"};
    std::vector<std::vector<int32_t>> alone(2), together(2);
    std::vector<std::string> errors(2);
    for (size_t i = 0; i < 2; ++i) greedy(prompts[i], alone[i], errors[i]);
    ASSERT_EQ(errors, std::vector<std::string>(2)) << errors[0] << errors[1];
    std::vector<std::thread> threads;
    for (size_t i = 0; i < 2; ++i) threads.emplace_back([&, i] { greedy(prompts[i], together[i], errors[i]); });
    for (auto & t : threads) t.join();
    EXPECT_EQ(errors, std::vector<std::string>(2)) << errors[0] << errors[1];
    EXPECT_EQ(together, alone);

    offgrid_clear_error();
    std::string other;
    std::thread failing([&] {
        offgrid_model * m = nullptr;
        offgrid_model_load("/nonexistent/model.gguf", 0, &m);
        other = offgrid_last_error();
    });
    failing.join();
    EXPECT_NE(other.find("nonexistent"), std::string::npos) << other;
    EXPECT_STREQ(offgrid_last_error(), "");  // this thread's message is untouched
}

}  // namespace
