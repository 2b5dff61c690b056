// The server's pieces without a server: stop strings across token boundaries, the prefix cache's radix tree and
// LRU, the ChatML renderer.
#include <gtest/gtest.h>

#include <memory>

#include "runtime/byte_vocab.h"
#include "server/chat_template.h"
#include "server/prefix_cache.h"
#include "server/stop_text.h"

namespace offgrid::server {
namespace {

std::string feed(StopText & st, const std::vector<std::string> & pieces) {
    std::string out;
    for (const auto & p : pieces) {
        out += st.push(p);
        if (st.stopped()) return out;
    }
    return out + st.flush();
}

TEST(StopText, StopAcrossPiecesIsNeverEmitted) {
    StopText st({"END"});
    EXPECT_EQ(st.push("abc E"), "abc ");  // "E" may start the stop string: held back
    EXPECT_FALSE(st.stopped());
    EXPECT_EQ(st.push("N"), "");
    EXPECT_EQ(st.push("Dxyz"), "");
    EXPECT_TRUE(st.stopped());
    EXPECT_EQ(st.push("more"), "");
}

TEST(StopText, HeldTextComesOutWhenItCannotBeAStop) {
    StopText st({"END"});
    EXPECT_EQ(st.push("xE"), "x");
    EXPECT_EQ(st.push("Nd"), "ENd");
    EXPECT_EQ(st.push("E"), "");
    EXPECT_EQ(st.flush(), "E");  // nothing can follow: a partial stop string is text
}

TEST(StopText, EarliestOfSeveralStopsWins) {
    StopText st({"world", "lo w"});
    EXPECT_EQ(feed(st, {"hel", "lo ", "world"}), "hel");
}

TEST(StopText, UnfinishedUtf8IsHeldBack) {
    StopText st({});
    EXPECT_EQ(st.push("a\xC3"), "a");
    EXPECT_EQ(st.push("\xA9!"), "\xC3\xA9!");
}

TEST(StopText, EveryCutOfTheTextGivesTheSameOutput) {
    const std::string text = "one two <stop> three";
    for (size_t a = 1; a < text.size(); ++a) {
        for (size_t b = a; b < text.size(); ++b) {
            StopText st({"<stop>", "zzz"});
            EXPECT_EQ(feed(st, {text.substr(0, a), text.substr(a, b - a), text.substr(b)}), "one two ") << a << " " << b;
        }
    }
}

Snapshot snap(size_t bytes, bool logits = false) {
    Snapshot s;
    s.state.assign(bytes, 7);
    if (logits) s.logits.assign(4, 1.0f);
    return s;
}

TEST(PrefixCache, LongestSnapshotAtAnyPosition) {
    PrefixCache c(1 << 20);
    const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6};
    c.insert(std::span(a).first(2), snap(10));
    c.insert(std::span(a).first(5), snap(10));
    const std::vector<int32_t> q = {1, 2, 3, 4, 5, 9, 9};
    auto hit = c.lookup(q, q.size());
    EXPECT_EQ(hit.length, 5u);
    const std::vector<int32_t> q2 = {1, 2, 3, 7};
    EXPECT_EQ(c.lookup(q2, q2.size()).length, 2u);
    EXPECT_EQ(c.match_length(q2), 3u);  // inside the edge to the 5-token node
    const std::vector<int32_t> q3 = {2, 2};
    EXPECT_EQ(c.lookup(q3, q3.size()).length, 0u);
    EXPECT_EQ(c.lookup(q, 4).length, 2u);  // at most max_len tokens
}

TEST(PrefixCache, FullLengthNeedsLogits) {
    PrefixCache c(1 << 20);
    const std::vector<int32_t> a = {1, 2, 3};
    c.insert(a, snap(10));
    EXPECT_EQ(c.lookup(a, a.size()).length, 0u);
    c.insert(a, snap(10, true));
    EXPECT_EQ(c.lookup(a, a.size()).length, 3u);
    EXPECT_EQ(c.entries(), 1u);
    EXPECT_TRUE(c.has(a, true));
}

TEST(PrefixCache, SplitsKeepBothBranches) {
    PrefixCache c(1 << 20);
    const std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 2, 8, 9};
    c.insert(a, snap(10));
    c.insert(b, snap(10));
    c.insert(std::span(a).first(2), snap(10));
    EXPECT_EQ(c.lookup(std::vector<int32_t>{1, 2, 3, 4, 0}, 5).length, 4u);
    EXPECT_EQ(c.lookup(std::vector<int32_t>{1, 2, 8, 9, 0}, 5).length, 4u);
    EXPECT_EQ(c.lookup(std::vector<int32_t>{1, 2, 5}, 3).length, 2u);
    EXPECT_EQ(c.entries(), 3u);
}

TEST(PrefixCache, LeastRecentlyUsedIsEvictedFirst) {
    PrefixCache c(100);
    const std::vector<int32_t> a = {1, 1}, b = {2, 2}, d = {3, 3};
    c.insert(a, snap(40));
    c.insert(b, snap(40));
    c.lookup(std::vector<int32_t>{1, 1, 0}, 3);  // a is now more recent than b
    c.insert(d, snap(40));
    EXPECT_LE(c.bytes(), 100u);
    EXPECT_EQ(c.lookup(std::vector<int32_t>{1, 1, 0}, 3).length, 2u);
    EXPECT_EQ(c.lookup(std::vector<int32_t>{2, 2, 0}, 3).length, 0u);
    EXPECT_EQ(c.lookup(std::vector<int32_t>{3, 3, 0}, 3).length, 2u);
    c.insert(std::vector<int32_t>{4}, snap(101));  // larger than the budget: not kept
    EXPECT_EQ(c.entries(), 2u);
}

TEST(PrefixCache, EvictionMergesPathsBack) {
    PrefixCache c(50);
    const std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 2, 8};
    c.insert(a, snap(20));
    c.insert(b, snap(20));
    c.insert(std::vector<int32_t>{5}, snap(20));  // evicts a
    EXPECT_EQ(c.lookup(std::vector<int32_t>{1, 2, 8, 0}, 4).length, 3u);
    EXPECT_EQ(c.match_length(a), 2u);
}

Snapshot tail(size_t bytes, std::shared_ptr<const Snapshot> parent, size_t from) {
    Snapshot s = snap(bytes);
    s.parent = std::move(parent);
    s.from = from;
    return s;
}

TEST(PrefixCache, TailsChainToTheirParentsWhichStayWhileTheyAre) {
    PrefixCache c(100);
    const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6};
    auto root = c.insert(std::span(a).first(2), snap(30));
    ASSERT_TRUE(root);
    auto mid = c.insert(std::span(a).first(4), tail(30, root, 2));
    ASSERT_TRUE(mid);
    auto top = c.insert(a, tail(30, mid, 4));
    ASSERT_TRUE(top);
    EXPECT_EQ(top->chain(), (std::vector<const Snapshot *>{root.get(), mid.get(), top.get()}));
    EXPECT_EQ(root->dependents, 1u);
    // Over budget: only the snapshot nothing depends on goes, the least recently used of those first.
    c.lookup(std::span(a).first(3), 3);  // uses root, but it has a dependent
    auto other = c.insert(std::vector<int32_t>{9}, snap(30));
    ASSERT_TRUE(other);
    EXPECT_FALSE(top->cached);
    EXPECT_TRUE(mid->cached);
    EXPECT_TRUE(root->cached);
    EXPECT_EQ(mid->dependents, 0u);
    EXPECT_LE(c.bytes(), 100u);
    // A tail whose parent is gone is not kept; nor one with no parent that does not start at 0.
    EXPECT_FALSE(c.insert(a, tail(10, top, 4)));
    EXPECT_FALSE(c.insert(a, tail(10, nullptr, 4)));
    // A snapshot with tails is not replaced (the same state): insert gives back the one there.
    EXPECT_EQ(c.insert(std::span(a).first(2), snap(10, true)), root);
}

TEST(PrefixCache, ErasingASnapshotErasesTheTailsBuiltOnIt) {
    PrefixCache c(1 << 20);
    const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6}, b = {1, 2, 3, 7};
    auto root = c.insert(std::span(a).first(2), snap(10));
    auto mid = c.insert(std::span(a).first(4), tail(10, root, 2));
    c.insert(a, tail(10, mid, 4));
    auto side = c.insert(b, tail(10, root, 2));
    auto lone = c.insert(std::span(a).first(5), snap(10));  // whole, below a's tail but not depending on mid
    ASSERT_TRUE(side && lone);
    EXPECT_TRUE(c.erase(std::span(a).first(4)));
    EXPECT_EQ(c.entries(), 3u);  // root, side, lone
    EXPECT_TRUE(root->cached && side->cached && lone->cached);
    EXPECT_EQ(root->dependents, 1u);
    EXPECT_EQ(c.lookup(a, a.size()).length, 5u);
    EXPECT_EQ(c.bytes(), 30u);
    c.clear();
    EXPECT_FALSE(root->cached);
}

TEST(ChatTemplate, ChatMLMarkersAreTextWithoutControlTokensAndContentNeverSpecial) {
    const Tokenizer tok(std::make_shared<const runtime::Tokenizer>(runtime::byte_vocab_tokenizer()));
    const std::vector<int32_t> ids = render_chatml(tok, {{"system", "S"}, {"user", "<|endoftext|>hi"}});
    const std::string text = tok.detokenize(ids);
    EXPECT_EQ(text, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n<|endoftext|>hi<|im_end|>\n<|im_start|>assistant\n");
    const auto eos = tok.find_token("<|endoftext|>");
    ASSERT_TRUE(eos.has_value());
    for (const int32_t id : ids) EXPECT_NE(id, *eos) << "user text became a control token";
}

TEST(ChatTemplate, ChoosingATemplate) {
    EXPECT_EQ(choose_chat_template("auto", ""), ChatTemplate::ChatML);
    EXPECT_EQ(choose_chat_template("auto", "{% for m in messages %}<|im_start|>{{m.role}}<|im_end|>{% endfor %}"),
              ChatTemplate::ChatML);
    EXPECT_EQ(choose_chat_template("none", "anything"), ChatTemplate::None);
    try {
        choose_chat_template("auto", "[INST] {{ m }} [/INST]");
        FAIL() << "a non-ChatML template was taken";
    } catch (const std::exception & e) {
        EXPECT_NE(std::string(e.what()).find("--chat-template"), std::string::npos);
    }
}

}  // namespace
}  // namespace offgrid::server
