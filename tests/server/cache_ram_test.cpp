// RAM of a cached conversation: with snapshots stored as tails of the one below, the prefix cache grows linearly
// with the conversation (each token's rows once, plus a fixed part per snapshot), against whole-state snapshots
// whose rows are copied into every snapshot along the path. Both servers run the same greedy conversation and give
// the same replies.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "offgrid/context.h"
#include "server/scheduler.h"
#include "server_helpers.h"

namespace offgrid::test {
namespace {

struct Outcome {
    std::vector<std::string> replies;
    size_t cache_bytes = 0, row_bytes = 0, logits_bytes = 0, entries = 0;
    size_t tokens = 0;  // the last turn's prompt and reply
    std::vector<size_t> cached;  // per turn
};

std::string run_turn(server::Scheduler & sched, std::vector<int32_t> prompt, int max_tokens, int32_t & prompt_n, int32_t & cached_n,
                     std::vector<int32_t> & reply_ids) {
    auto ch = std::make_shared<server::Channel>();
    server::GenRequest g;
    g.prompt = std::move(prompt);
    g.max_tokens = max_tokens;
    g.sampling.temperature = 0;
    g.ignore_eos = true;
    g.top_logprobs = 0;  // the sampled ids come back with the logprobs
    EXPECT_EQ(sched.submit({g}, ch, "t"), server::SubmitStatus::Ok);
    std::string text;
    for (;;) {
        server::ChoiceEvent e;
        if (!ch->pop(e, std::chrono::milliseconds(30000))) {
            ADD_FAILURE() << "no event within 30 s";
            return text;
        }
        text += e.text;
        for (const auto & lp : e.logprobs) reply_ids.push_back(lp.id);
        if (e.done) {
            EXPECT_TRUE(e.error.empty()) << e.error;
            prompt_n = e.prompt_tokens;
            cached_n = e.cached_tokens;
            return text;
        }
    }
}

// A conversation of `turns` turns: every turn sends the earlier prompt, the reply's own tokens and a new message.
Outcome converse(bool tails, int turns) {
    // OFFGRID_CACHE_RAM_MODEL: another model for the same count (its figure goes in docs/server.md).
    const char * other = std::getenv("OFFGRID_CACHE_RAM_MODEL");
    auto model = offgrid::Model::load(other && *other ? std::string(other) : (work_dir() / "tiny.gguf").string());
    server::SchedulerConfig cfg;
    cfg.n_slots = 1;
    cfg.n_ctx = 4096;
    cfg.n_batch = cfg.n_ubatch = 128;
    cfg.n_threads = 2;
    cfg.cache_bytes = size_t(1) << 30;
    cfg.log = false;
    cfg.tails = tails;
    server::Scheduler sched(model, offgrid::Tokenizer::from_model(*model), cfg);
    Outcome out;
    std::vector<int32_t> prompt;
    uint32_t s = 12345;
    for (int t = 0; t < turns; ++t) {
        for (int i = 0; i < 300; ++i) {
            s = s * 1103515245u + 12345u;
            prompt.push_back(static_cast<int32_t>(1 + (s >> 16) % 200));
        }
        int32_t pn = 0, cn = 0;
        std::vector<int32_t> reply;
        out.replies.push_back(run_turn(sched, prompt, 16, pn, cn, reply));
        out.cached.push_back(static_cast<size_t>(cn));
        prompt.insert(prompt.end(), reply.begin(), reply.end());
        out.tokens = prompt.size();
    }
    const auto & st = sched.stats();
    out.cache_bytes = st.cache_bytes;
    out.row_bytes = st.cache_row_bytes;
    out.logits_bytes = st.cache_logits_bytes;
    out.entries = st.cache_entries;
    sched.shutdown(std::chrono::milliseconds(0));
    return out;
}

TEST(CacheRam, ATailCachedConversationTakesAtMostATenthOfWholeSnapshots) {
    const int turns = 10;
    const Outcome whole = converse(false, turns);
    const Outcome tails = converse(true, turns);
    ASSERT_EQ(tails.replies, whole.replies);  // the same greedy text either way
    ASSERT_EQ(tails.cached, whole.cached);
    for (int t = 1; t < turns; ++t) EXPECT_EQ(tails.cached[t], 300u * t + 16u * t - 1) << "turn " << t;
    const double per_k_whole = 1000.0 * static_cast<double>(whole.cache_bytes) / static_cast<double>(whole.tokens);
    const double per_k_tails = 1000.0 * static_cast<double>(tails.cache_bytes) / static_cast<double>(tails.tokens);
    std::printf("conversation of %zu tokens: %zu snapshots; whole states %.0f bytes per 1000 tokens, tails %.0f "
                "(%.1f %%: rows %zu, logits %zu, the rest %zu)\n",
                tails.tokens, tails.entries, per_k_whole, per_k_tails, 100.0 * per_k_tails / per_k_whole, tails.row_bytes,
                tails.logits_bytes, tails.cache_bytes - tails.row_bytes - tails.logits_bytes);
    EXPECT_EQ(tails.entries, whole.entries);
    EXPECT_LE(per_k_tails, 0.10 * per_k_whole);
    // Rows held once: a tenth of the rows whole states copy along the path (here about one in twenty).
    EXPECT_LE(tails.row_bytes * 10, whole.row_bytes);
}

// Chunk boundaries get a snapshot only once the rows since the last one weigh what a snapshot adds besides rows
// (on the tiny model about 50 tokens): a 400-token prompt in 16-token chunks leaves a handful, not one per chunk,
// and the cache holds at most about twice the rows of the prompt.
TEST(CacheRam, ChunkSnapshotsAreSpacedByWhatASnapshotWeighs) {
    auto model = offgrid::Model::load((work_dir() / "tiny.gguf").string());
    server::SchedulerConfig cfg;
    cfg.n_slots = 1;
    cfg.n_ctx = 1024;
    cfg.n_batch = cfg.n_ubatch = 16;
    cfg.n_threads = 2;
    cfg.log = false;
    server::Scheduler sched(model, offgrid::Tokenizer::from_model(*model), cfg);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 400; ++i) prompt.push_back(1 + (i * 37) % 200);
    int32_t pn = 0, cn = 0;
    std::vector<int32_t> reply;
    run_turn(sched, prompt, 1, pn, cn, reply);
    const auto & st = sched.stats();
    // 23 chunk boundaries from 32 on, and the prompt's end.
    EXPECT_GE(st.cache_entries.load(), 4u);
    EXPECT_LE(st.cache_entries.load(), 10u);
    EXPECT_LE(st.cache_bytes.load() - st.cache_logits_bytes.load(), 2 * st.cache_row_bytes.load() + 2 * (st.cache_bytes.load() / st.cache_entries.load()));
    // The same prompt again restores it whole (its end's snapshot, with logits).
    run_turn(sched, prompt, 1, pn, cn, reply);
    EXPECT_EQ(cn, 400);
    sched.shutdown(std::chrono::milliseconds(0));
}

}  // namespace
}  // namespace offgrid::test
