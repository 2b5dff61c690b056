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
    std::vector<size_t> prompts, replied;  // per turn: prompt and reply tokens
    size_t cache_bytes = 0, row_bytes = 0, logits_bytes = 0, entries = 0;
    size_t tokens = 0;  // the last turn's prompt and reply
    size_t row_bytes_per_token = 0;
    std::vector<size_t> cached;  // per turn
};

std::string run_turn(server::Scheduler & sched, std::vector<int32_t> prompt, std::vector<size_t> ends, int max_tokens, int32_t & prompt_n, int32_t & cached_n,
                     std::vector<int32_t> & reply_ids) {
    auto ch = std::make_shared<server::Channel>();
    server::GenRequest g;
    g.prompt = std::move(prompt);
    g.message_ends = std::move(ends);
    g.max_tokens = max_tokens;
    g.sampling.temperature = 0;
    g.ignore_eos = true;
    g.top_logprobs = 0;  // the sampled ids come back with the logprobs
    EXPECT_EQ(sched.submit({g}, ch, "t"), server::SubmitStatus::Ok);
    std::string text;
    for (;;) {
        server::ChoiceEvent e;
        if (!ch->pop(e, std::chrono::milliseconds(600000))) {  // (a loaded machine: generous)
            ADD_FAILURE() << "no event within 600 s";
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

// How snapshots are kept: today's (tails, superseded ones dropped) or the layout before (every snapshot a whole
// state, none dropped until evicted).
enum class Layout { Tails, WholeEverySnapshot };

// A conversation's shape: a first message (a system prompt, its end pinned), then turns that each append the
// previous reply's own tokens and a new message of a seeded length, and ask for a reply of a seeded length.
struct Conversation {
    std::string model;
    uint32_t n_ctx = 4096, n_batch = 128;
    size_t system = 300;
    int turns = 10;
    size_t message_min = 300, message_max = 300;
    int reply_min = 16, reply_max = 16;
};

Outcome converse(Layout layout, const Conversation & c) {
    auto model = offgrid::Model::load(c.model);
    server::SchedulerConfig cfg;
    cfg.n_slots = 1;
    cfg.n_ctx = c.n_ctx;
    cfg.n_batch = cfg.n_ubatch = c.n_batch;
    cfg.n_threads = 2;
    cfg.cache_bytes = size_t(4) << 30;
    cfg.log = false;
    cfg.tails = layout == Layout::Tails;
    cfg.supersede = layout == Layout::Tails;
    server::Scheduler sched(model, offgrid::Tokenizer::from_model(*model), cfg);
    const int32_t n_vocab = model->n_vocab();
    Outcome out;
    std::vector<int32_t> prompt;
    std::vector<size_t> ends;
    uint32_t s = 12345;
    auto next = [&s] {
        s = s * 1103515245u + 12345u;
        return s >> 16;
    };
    auto message = [&](size_t n) {
        for (size_t i = 0; i < n; ++i) prompt.push_back(static_cast<int32_t>(1 + next() % uint32_t(std::min(n_vocab - 1, 200))));
        ends.push_back(prompt.size());
    };
    message(c.system);
    for (int t = 0; t < c.turns; ++t) {
        message(c.message_min + next() % (c.message_max - c.message_min + 1));
        const int reply_len = c.reply_min + static_cast<int>(next() % uint32_t(c.reply_max - c.reply_min + 1));
        int32_t pn = 0, cn = 0;
        std::vector<int32_t> reply;
        out.replies.push_back(run_turn(sched, prompt, ends, reply_len, pn, cn, reply));
        out.cached.push_back(static_cast<size_t>(cn));
        out.prompts.push_back(prompt.size());
        out.replied.push_back(reply.size());
        prompt.insert(prompt.end(), reply.begin(), reply.end());
        ends.push_back(prompt.size());
        out.tokens = prompt.size();
    }
    const auto & st = sched.stats();
    out.cache_bytes = st.cache_bytes;
    out.row_bytes = st.cache_row_bytes;
    out.logits_bytes = st.cache_logits_bytes;
    out.entries = st.cache_entries;
    out.row_bytes_per_token = sched.row_bytes_per_token();
    sched.shutdown(std::chrono::milliseconds(0));
    return out;
}

double per_thousand(const Outcome & o) { return 1000.0 * static_cast<double>(o.cache_bytes) / static_cast<double>(o.tokens); }

void report(const char * what, const Outcome & whole, const Outcome & tails) {
    std::printf("%s: conversation of %zu tokens; whole states at every snapshot: %zu snapshots, %.0f bytes per 1000 "
                "tokens; tails, superseded dropped: %zu snapshots, %.0f bytes per 1000 tokens (%.1f %%: rows %zu, "
                "logits %zu, the rest %zu)\n",
                what, tails.tokens, whole.entries, per_thousand(whole), tails.entries, per_thousand(tails),
                100.0 * per_thousand(tails) / per_thousand(whole), tails.row_bytes, tails.logits_bytes,
                tails.cache_bytes - tails.row_bytes - tails.logits_bytes);
}

// Every turn restores the previous turn's end: all of it but the previous reply's last token (sampled, not decoded).
void expect_turns_restored(const Outcome & o) {
    for (size_t t = 1; t < o.cached.size(); ++t) EXPECT_EQ(o.cached[t], o.prompts[t - 1] + o.replied[t - 1] - 1) << "turn " << t;
}

TEST(CacheRam, ATailCachedConversationTakesAtMostATenthOfWholeSnapshots) {
    Conversation c;
    c.model = (work_dir() / "tiny.gguf").string();
    const Outcome whole = converse(Layout::WholeEverySnapshot, c);
    const Outcome tails = converse(Layout::Tails, c);
    ASSERT_EQ(tails.replies, whole.replies);  // the same greedy text either way
    ASSERT_EQ(tails.cached, whole.cached);
    for (int t = 1; t < c.turns; ++t) EXPECT_EQ(tails.cached[t], 300u * (t + 1) + 16u * t - 1) << "turn " << t;
    expect_turns_restored(tails);
    report("tiny", whole, tails);
    // The system prompt's end, the last prompt's last chunk boundary and its end, and the last turn's end (each
    // turn's chunk boundary is superseded by the next turn's).
    EXPECT_EQ(tails.entries, 4u);
    EXPECT_LT(tails.entries * 5, whole.entries);
    EXPECT_LE(per_thousand(tails), 0.10 * per_thousand(whole));
    // Rows held once: a tenth of the rows whole states copy along the path (here about one in twenty).
    EXPECT_LE(tails.row_bytes * 10, whole.row_bytes);
}

// The `bench` shape (OFFGRID_CACHE_RAM_MODEL=/work/scale/bench-q4_k_m.gguf; skipped without it), where a
// snapshot's recurrent state (3.4 MB) outweighs 1,100 tokens of rows: an agent-like conversation (a 1,500-token
// system prompt, 14 turns with tool outputs of 300-2,000 tokens and replies of 50-200: about 19,000 tokens) takes
// at most a tenth of the bytes per 1,000 tokens of whole states at every snapshot. Prints what the same snapshots would weigh on the scale shape.
TEST(CacheRam, AnAgentConversationOnTheBenchShapeTakesAtMostATenthOfWholeSnapshots) {
    const char * path = std::getenv("OFFGRID_CACHE_RAM_MODEL");
    if (!path || !*path) GTEST_SKIP() << "set OFFGRID_CACHE_RAM_MODEL to the bench shape's file (/work/scale/bench-q4_k_m.gguf)";
    Conversation c;
    c.model = path;
    c.n_ctx = 24576;
    c.n_batch = 512;
    c.system = 1500;
    c.turns = 14;
    c.message_min = 300;
    c.message_max = 2000;
    c.reply_min = 50;
    c.reply_max = 200;
    const Outcome whole = converse(Layout::WholeEverySnapshot, c);
    const Outcome tails = converse(Layout::Tails, c);
    ASSERT_EQ(tails.replies, whole.replies);
    ASSERT_EQ(tails.cached, whole.cached);
    expect_turns_restored(tails);
    report("bench shape", whole, tails);
    EXPECT_LE(per_thousand(tails), 0.10 * per_thousand(whole));

    // The same snapshots on the scale shape, by the count of docs/server.md: a snapshot weighs its fixed part R
    // (recurrent states and conv histories, books) plus its rows, c per token. Whole states: k R + c (the sum of
    // the snapshots' depths); tails: k R + c (the rows held, each token once). The bench shape's measured R and c
    // are carried over by the two shapes' widths: GDN 18 x 32 value heads against 6 x 8 (state 128 x 128 f32,
    // conv histories of 3 steps over q, k and v), attention 6 x 2 KV heads of 256 against 2 x 2 of 128 (f16 K
    // and V), the indexer's rows 3 times the bench's (6 layers against 2, the same width), and logits of
    // 248,320 tokens against 16,384.
    const double rows_b = 2.0 * 2 * 2 * 128 * 2;  // the bench shape's K and V bytes per token
    const double c_b = static_cast<double>(tails.row_bytes_per_token);
    const double c_s = 6.0 * 2 * 2 * 256 * 2 + 3.0 * (c_b - rows_b);
    const auto recurrent = [](double layers, double v_heads, double k_heads) {
        return layers * (v_heads * 128 * 128 * 4 + 3.0 * (2 * k_heads + v_heads) * 128 * 4);
    };
    const auto fixed_b = [](const Outcome & o) {
        return static_cast<double>(o.cache_bytes - o.row_bytes - o.logits_bytes) / static_cast<double>(o.entries);
    };
    const double r_b = fixed_b(tails);
    const double r_s = r_b - recurrent(6, 8, 4) + recurrent(18, 32, 16);
    const auto on_scale = [&](const Outcome & o) {
        const double rows = static_cast<double>(o.row_bytes) / c_b * c_s;
        const double logits = static_cast<double>(o.logits_bytes) * 248320.0 / 16384.0;
        return (static_cast<double>(o.entries) * r_s + rows + logits) * 1000.0 / static_cast<double>(o.tokens);
    };
    std::printf("scale shape, by the count: R %.1f MB, c %.1f KB per token; whole states %.1f MB per 1000 tokens, "
                "tails %.1f MB (%.1f %%)\n",
                r_s / 1e6, c_s / 1e3, on_scale(whole) / 1e6, on_scale(tails) / 1e6, 100.0 * on_scale(tails) / on_scale(whole));
}

// Chunk boundaries get a snapshot only once the rows since the last one weigh what a snapshot adds besides rows
// (on the tiny model about 50 tokens): a 400-token prompt in 16-token chunks takes a handful, not one per chunk
// (counted with superseded snapshots kept), and the cache holds at most about twice the rows of the prompt. With
// superseded snapshots dropped, the prompt's end and the prefill's last chunk boundary stay; the same prompt
// again restores it whole, and a prompt that shares all but its last tokens restores that chunk boundary.
TEST(CacheRam, ChunkSnapshotsAreSpacedByWhatASnapshotWeighs) {
    auto model = offgrid::Model::load((work_dir() / "tiny.gguf").string());
    for (const bool supersede : {false, true}) {
        server::SchedulerConfig cfg;
        cfg.n_slots = 1;
        cfg.n_ctx = 1024;
        cfg.n_batch = cfg.n_ubatch = 16;
        cfg.n_threads = 2;
        cfg.log = false;
        cfg.supersede = supersede;
        server::Scheduler sched(model, offgrid::Tokenizer::from_model(*model), cfg);
        std::vector<int32_t> prompt;
        for (int i = 0; i < 400; ++i) prompt.push_back(1 + (i * 37) % 200);
        int32_t pn = 0, cn = 0;
        std::vector<int32_t> reply;
        run_turn(sched, prompt, {}, 1, pn, cn, reply);
        const auto & st = sched.stats();
        if (!supersede) {
            // 23 chunk boundaries from 32 on, and the prompt's end.
            EXPECT_GE(st.cache_entries.load(), 4u);
            EXPECT_LE(st.cache_entries.load(), 10u);
        } else {
            EXPECT_EQ(st.cache_entries.load(), 2u);
        }
        EXPECT_LE(st.cache_bytes.load() - st.cache_logits_bytes.load(),
                  2 * st.cache_row_bytes.load() + 2 * (st.cache_bytes.load() / st.cache_entries.load()));
        // The same prompt again restores it whole (its end's snapshot, with logits).
        run_turn(sched, prompt, {}, 1, pn, cn, reply);
        EXPECT_EQ(cn, 400) << "supersede " << supersede;
        // Another prompt that parts from it 10 tokens before its end (a raw completion with another question):
        // the last chunk boundary below 390 is restored, not nothing.
        std::vector<int32_t> other(prompt.begin(), prompt.begin() + 390);
        for (int i = 0; i < 12; ++i) other.push_back(201 + i);
        run_turn(sched, other, {}, 1, pn, cn, reply);
        EXPECT_GE(cn, 300) << "supersede " << supersede;
        EXPECT_LT(cn, 390) << "supersede " << supersede;
        sched.shutdown(std::chrono::milliseconds(0));
    }
}

}  // namespace
}  // namespace offgrid::test
