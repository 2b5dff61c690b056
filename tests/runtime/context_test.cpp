// The public context's sizing and decode contract, on a small generated model.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <stdexcept>

#include "common/error.h"
#include "model/qwen4exp/gen_model.h"
#include "offgrid/context.h"

namespace {

std::shared_ptr<const offgrid::Model> small_model() {
    static std::shared_ptr<const offgrid::Model> model = [] {
        offgrid::model::qwen4exp::GenConfig cfg = offgrid::model::qwen4exp::gen_preset("tiny");
        cfg.n_ctx = 2048;
        // One file per process: ctest runs every test in its own process, in parallel.
        const auto path =
            (std::filesystem::temp_directory_path() / ("offgrid_context_test_" + std::to_string(getpid()) + ".gguf")).string();
        offgrid::model::qwen4exp::generate_model(cfg).write_file(path);
        auto model = offgrid::Model::load(path);
        std::filesystem::remove(path);  // the mapping stays valid
        return model;
    }();
    return model;
}

std::vector<offgrid::BatchToken> tokens(int32_t seq, int32_t pos0, int n) {
    std::vector<offgrid::BatchToken> b;
    for (int i = 0; i < n; ++i) {
        b.push_back({1 + (i * 7) % 50, pos0 + i, {seq}, i == n - 1});
    }
    return b;
}

TEST(Context, PerSequenceStreamsGetTheirShareOfTheCells) {
    offgrid::ContextParams p;
    p.n_ctx = 1000;  // rounded up to 1024: 256 cells for each of the 4 streams
    p.n_seq_max = 4;
    p.unified = false;
    p.type_k = p.type_v = "f32";
    offgrid::Context ctx(small_model(), p);
    EXPECT_EQ(ctx.params().n_ctx, 1024u);
    ASSERT_TRUE(ctx.decode(tokens(0, 0, 200)).ok());
    ASSERT_TRUE(ctx.decode(tokens(0, 200, 56)).ok());
    EXPECT_EQ(ctx.seq_pos_max(0), 255);
    // The stream is full: one more token does not fit, and nothing changes.
    const auto r = ctx.decode(tokens(0, 256, 1));
    EXPECT_EQ(r.status, offgrid::DecodeStatus::NoSpace) << r.message;
    EXPECT_EQ(ctx.seq_pos_max(0), 255);
    // Another sequence has its own stream.
    EXPECT_TRUE(ctx.decode(tokens(1, 0, 256)).ok());
}

TEST(Context, UnifiedCacheSharesAllCells) {
    offgrid::ContextParams p;
    p.n_ctx = 512;
    p.n_seq_max = 2;
    p.unified = true;
    offgrid::Context ctx(small_model(), p);
    EXPECT_EQ(ctx.params().n_ctx, 512u);
    ASSERT_TRUE(ctx.decode(tokens(0, 0, 300)).ok());
    EXPECT_EQ(ctx.decode(tokens(1, 0, 300)).status, offgrid::DecodeStatus::NoSpace);
    EXPECT_TRUE(ctx.decode(tokens(1, 0, 212)).ok());
}

TEST(Context, InvalidBatchLeavesTheMemoryAsItWas) {
    offgrid::ContextParams p;
    p.n_ctx = 256;
    offgrid::Context ctx(small_model(), p);
    ASSERT_TRUE(ctx.decode(tokens(0, 0, 10)).ok());
    auto bad = tokens(0, 10, 5);
    bad[3].token = 1 << 20;  // outside the vocabulary
    const auto r = ctx.decode(bad);
    EXPECT_EQ(r.status, offgrid::DecodeStatus::InvalidBatch);
    EXPECT_NE(r.message.find("token 3"), std::string::npos) << r.message;
    EXPECT_EQ(ctx.seq_pos_max(0), 9);
    EXPECT_EQ(ctx.n_outputs(), 0);
}

TEST(Context, AbortRollsBackTheWholeCall) {
    offgrid::ContextParams p;
    p.n_ctx = 256;
    p.n_ubatch = 4;
    offgrid::Context ctx(small_model(), p);
    ASSERT_TRUE(ctx.decode(tokens(0, 0, 8)).ok());
    int calls = 0;
    ctx.set_abort_callback([&] { return ++calls == 3; });  // abort before the third micro-batch
    const auto r = ctx.decode(tokens(0, 8, 12));
    EXPECT_EQ(r.status, offgrid::DecodeStatus::Aborted);
    EXPECT_EQ(ctx.seq_pos_max(0), 7);
    ctx.set_abort_callback(nullptr);
    EXPECT_TRUE(ctx.decode(tokens(0, 8, 12)).ok());
    EXPECT_EQ(ctx.seq_pos_max(0), 19);
}

// A token shared by several sequences is decoded on a PLE model too (its
// n-gram follows the set's first sequence; tests/equivalence checks the logits against decoding alone).
TEST(Context, SharedTokensAreAcceptedWithPle) {
    offgrid::ContextParams p;
    p.n_ctx = 256;
    p.n_seq_max = 2;
    p.unified = true;
    offgrid::Context ctx(small_model(), p);  // the tiny preset has PLE
    const auto r = ctx.decode({{5, 0, {0, 1}, false}, {7, 1, {0, 1}, true}});
    EXPECT_TRUE(r.ok()) << r.message;
    EXPECT_TRUE(ctx.decode({{6, 2, {0}, true}}).ok());  // a sequence keeps one set within a batch (rule V8)
    EXPECT_EQ(ctx.seq_pos_max(0), 2);
    EXPECT_EQ(ctx.seq_pos_max(1), 1);
}

// A state file made with other context sizes is refused, and the error points into the file (header included),
// not into the memory section alone.
TEST(Context, StateFileOfAnotherContextSizeIsRefusedAtItsFileOffset) {
    offgrid::ContextParams small;
    small.n_ctx = 256;
    offgrid::Context a(small_model(), small);
    ASSERT_TRUE(a.decode(tokens(0, 0, 12)).ok());
    const std::vector<int32_t> toks(12, 7);
    const auto path = (std::filesystem::temp_directory_path() / ("offgrid_ctx_state_" + std::to_string(getpid()))).string();
    a.state_save_file(path, toks);

    offgrid::ContextParams big = small;
    big.n_ctx = 512;
    offgrid::Context b(small_model(), big);
    uint64_t blob_offset = 0;
    std::string field;
    try {
        b.state_set(a.state_get());
        FAIL() << "a state of another size was accepted";
    } catch (const offgrid::FileError & e) {
        blob_offset = e.offset();
        field = e.field();
    }
    try {
        b.state_load_file(path);
        FAIL() << "a state file of another size was accepted";
    } catch (const offgrid::FileError & e) {
        const uint64_t header = 8 + 4 + 8 + 4 + 4 + 4 * toks.size() + 8 + 4;  // ending with its checksum
        EXPECT_EQ(e.offset(), header + blob_offset) << e.what();
        EXPECT_EQ(e.field(), field);
        EXPECT_EQ(e.file(), path);
    }
    EXPECT_EQ(b.seq_pos_max(0), -1);
    std::filesystem::remove(path);
}


// A callback that throws anything, std::exception or not, is an abort: the call is undone, its status is Aborted,
// and the context is not left "in a call" (later decodes work).
TEST(Context, ThrowingAbortCallbackOfAnyTypeIsAnAbort) {
    offgrid::ContextParams p;
    p.n_ctx = 256;
    p.n_ubatch = 4;
    offgrid::Context ctx(small_model(), p);
    offgrid::Context ref(small_model(), p);
    ASSERT_TRUE(ctx.decode(tokens(0, 0, 6)).ok());
    ASSERT_TRUE(ref.decode(tokens(0, 0, 6)).ok());
    const std::function<bool()> throwers[] = {
        [] () -> bool { throw 42; },
        [] () -> bool { throw std::string("not an exception class"); },
        [] () -> bool { throw std::runtime_error("a std::exception"); },
    };
    for (const auto & cb : throwers) {
        ctx.set_abort_callback(cb);
        const auto r = ctx.decode(tokens(0, 6, 9));
        EXPECT_EQ(r.status, offgrid::DecodeStatus::Aborted) << r.message;
        EXPECT_EQ(ctx.seq_pos_max(0), 5);  // undone
    }
    ctx.set_abort_callback(nullptr);
    const auto r = ctx.decode(tokens(0, 6, 9));
    ASSERT_TRUE(r.ok()) << r.message;
    ASSERT_TRUE(ref.decode(tokens(0, 6, 9)).ok());
    const int32_t n_vocab = small_model()->n_vocab();
    for (int32_t v = 0; v < n_vocab; ++v) ASSERT_EQ(ctx.logits(0)[v], ref.logits(0)[v]) << v;
}

// Every byte of a small state file, flipped in turn, is refused, and the context keeps its memory.
TEST(Context, EveryFlippedByteOfAStateFileIsRefused) {
    offgrid::ContextParams p;
    p.n_ctx = 256;
    p.type_k = p.type_v = "f16";
    offgrid::Context a(small_model(), p);
    ASSERT_TRUE(a.decode(tokens(0, 0, 3)).ok());
    const auto dir = std::filesystem::temp_directory_path() / ("offgrid_ctx_flip_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    const std::string good = (dir / "good.state").string(), bad = (dir / "bad.state").string();
    a.state_save_file(good, {5, 6, 7, 8});
    std::ifstream in(good, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 100u);

    offgrid::Context b(small_model(), p);
    ASSERT_TRUE(b.decode(tokens(0, 0, 5)).ok());
    const std::vector<uint8_t> before = b.state_get();
    std::filesystem::copy_file(good, bad);
    // The byte is changed in place and put back (rewriting the whole file each time is slow on ext4).
    const int fd = ::open(bad.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    size_t refused = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
        const char flipped = static_cast<char>(bytes[i] ^ 0xFF);
        ASSERT_EQ(::pwrite(fd, &flipped, 1, static_cast<off_t>(i)), 1);
        try {
            b.state_load_file(bad);
            ADD_FAILURE() << "flipped byte " << i << " of " << bytes.size() << " was accepted";
        } catch (const offgrid::FileError & e) {
            ++refused;
            EXPECT_EQ(e.file(), bad);
        }
        ASSERT_EQ(b.state_get(), before) << "flipped byte " << i << " changed the memory";
        ASSERT_EQ(::pwrite(fd, &bytes[i], 1, static_cast<off_t>(i)), 1);
    }
    ::close(fd);
    EXPECT_EQ(refused, bytes.size());
    EXPECT_EQ(b.state_load_file(good), (std::vector<int32_t>{5, 6, 7, 8}));  // the intact file still loads
    EXPECT_EQ(b.seq_pos_max(0), 2);
    std::filesystem::remove_all(dir);
}

}  // namespace

namespace {

// What the server reads through the public API: a slot's capacity, its stream's free cells, GGUF strings.
TEST(Context, SequenceCapacityAndFreeCells) {
    offgrid::ContextParams p;
    p.n_ctx = 1024;
    p.n_seq_max = 4;
    p.unified = false;
    offgrid::Context ctx(small_model(), p);
    EXPECT_EQ(ctx.seq_capacity(), 256u);
    EXPECT_EQ(ctx.n_free_cells(2), 256u);
    ASSERT_TRUE(ctx.decode(tokens(2, 0, 100)).ok());
    EXPECT_EQ(ctx.n_free_cells(2), 156u);
    EXPECT_EQ(ctx.n_free_cells(1), 256u);  // another stream
    ctx.seq_rm(2, -1, -1);
    EXPECT_EQ(ctx.n_free_cells(2), 256u);
    EXPECT_THROW(ctx.n_free_cells(4), offgrid::Error);

    p.unified = true;
    offgrid::Context shared(small_model(), p);
    EXPECT_EQ(shared.seq_capacity(), 1024u);
    ASSERT_TRUE(shared.decode(tokens(0, 0, 10)).ok());
    EXPECT_EQ(shared.n_free_cells(3), 1014u);  // one stream for all
}

TEST(Context, ModelMetadataStrings) {
    const auto model = small_model();
    EXPECT_EQ(model->metadata_string("general.architecture"), "qwen4exp");
    EXPECT_EQ(model->metadata_string("no.such.key"), "");
    EXPECT_EQ(model->metadata_string("qwen4exp.block_count"), "");  // not a string
}

}  // namespace

TEST(WeightLoad, AutoReadsAFileThatTakesAtMostHalfTheAvailableMemory) {
    using offgrid::Model;
    using offgrid::WeightLoad;
    EXPECT_EQ(Model::resolve(WeightLoad::Auto, 100, 200), WeightLoad::Read);
    EXPECT_EQ(Model::resolve(WeightLoad::Auto, 101, 200), WeightLoad::Map);
    EXPECT_EQ(Model::resolve(WeightLoad::Auto, 100, 0), WeightLoad::Map);  // nothing known: map
    EXPECT_EQ(Model::resolve(WeightLoad::Map, 1, 1 << 30), WeightLoad::Map);
    EXPECT_EQ(Model::resolve(WeightLoad::Read, uint64_t(1) << 40, 1), WeightLoad::Read);
}

TEST(WeightLoad, EveryWayOfLoadingGivesTheSameLogits) {
    offgrid::model::qwen4exp::GenConfig cfg = offgrid::model::qwen4exp::gen_preset("tiny");
    const auto path =
        (std::filesystem::temp_directory_path() / ("offgrid_weight_load_" + std::to_string(getpid()) + ".gguf")).string();
    offgrid::model::qwen4exp::generate_model(cfg).write_file(path);
    std::vector<std::vector<float>> out;
    for (const auto how : {offgrid::WeightLoad::Map, offgrid::WeightLoad::Read, offgrid::WeightLoad::Auto}) {
        offgrid::ContextParams p;
        p.n_ctx = 256;
        offgrid::Context ctx(offgrid::Model::load(path, how), p);
        ASSERT_TRUE(ctx.decode(tokens(0, 0, 12)).ok());
        const float * l = ctx.logits(0);
        ASSERT_NE(l, nullptr);
        out.emplace_back(l, l + ctx.model().n_vocab());
    }
    std::filesystem::remove(path);
    EXPECT_EQ(out[0], out[1]);
    EXPECT_EQ(out[0], out[2]);
}
