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

// A snapshot is superseded by one further along its path only while no other path parts below it.
TEST(PrefixCache, ALonePathBelowASnapshotIsOneThatALongerPathFollows) {
    PrefixCache c(1 << 20);
    const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7}, b = {1, 2, 3, 4, 8, 9};
    c.insert(std::span(a).first(2), snap(10));
    c.insert(std::span(a).first(5), snap(10));
    EXPECT_TRUE(c.lone_path(std::span(a).first(2), a));                    // one path, which `a` follows
    EXPECT_TRUE(c.lone_path(std::span(a).first(5), a));                    // nothing below it
    EXPECT_TRUE(c.lone_path(std::span(a).first(2), std::span(a).first(4)));  // the shorter path ends inside it
    EXPECT_FALSE(c.lone_path(std::span(a).first(2), b));                   // `b` would part below it
    EXPECT_FALSE(c.lone_path(std::span(a).first(3), a));                   // no node there
    c.insert(b, snap(10));
    EXPECT_FALSE(c.lone_path(std::span(a).first(2), a));  // a branch point below it, at 4 tokens
    EXPECT_TRUE(c.lone_path(std::span(a).first(5), a));
    c.erase(b);
    EXPECT_TRUE(c.lone_path(std::span(a).first(2), a));  // the branch is gone with its snapshot
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

// A conversation's next turn that does not give its reply back token for token parts from the tree at the
// reply's start: the turn end on the path it passes by is dropped (its prompt end is then on a lone path again);
// a snapshot that is not a turn end, a pinned turn end and a branch holding more than one snapshot stay.
TEST(PrefixCache, APromptThatPassesATurnEndByDropsIt) {
    PrefixCache c(1 << 20);
    const std::vector<int32_t> turn1 = {1, 2, 3, 4, 5, 6};  // prompt 1..3, reply 4..6
    const std::vector<int32_t> turn2 = {1, 2, 3, 9, 9, 9, 7};  // the reply came back as other tokens
    auto prompt_end = c.insert(std::span(turn1).first(3), snap(10, true));
    ASSERT_TRUE(prompt_end);
    Snapshot t = tail(10, prompt_end, 3);
    t.turn_end = true;
    auto end = c.insert(turn1, std::move(t));
    ASSERT_TRUE(end);
    EXPECT_FALSE(c.lone_path(std::span(turn1).first(3), turn2));
    EXPECT_EQ(c.drop_passed_turn_ends(turn1), 0u);                    // a prompt on the path passes nothing
    EXPECT_EQ(c.drop_passed_turn_ends(std::span(turn1).first(5)), 0u);  // nor one that ends inside it
    EXPECT_EQ(c.drop_passed_turn_ends(turn2), 1u);
    EXPECT_FALSE(end->cached);
    EXPECT_TRUE(prompt_end->cached);
    EXPECT_EQ(prompt_end->dependents, 0u);
    EXPECT_EQ(c.entries(), 1u);
    EXPECT_TRUE(c.lone_path(std::span(turn1).first(3), turn2));

    auto keep = [&](const std::vector<int32_t> & path, bool turn_end, bool pinned) {
        Snapshot s = snap(10);
        s.turn_end = turn_end;
        s.pinned = pinned;
        return c.insert(path, std::move(s));
    };
    auto plain = keep({1, 2, 3, 4}, false, false);
    auto pinned = keep({1, 2, 3, 5}, true, true);
    auto with_tail = keep({1, 2, 3, 6, 6}, true, false);
    Snapshot u = tail(10, with_tail, 5);
    u.turn_end = true;
    auto tail_of_it = c.insert(std::vector<int32_t>{1, 2, 3, 6, 6, 6}, std::move(u));
    auto two_a = keep({1, 2, 3, 8, 1}, true, false), two_b = keep({1, 2, 3, 8, 2}, true, false);
    ASSERT_TRUE(plain && pinned && with_tail && tail_of_it && two_a && two_b);
    EXPECT_EQ(c.drop_passed_turn_ends(turn2), 0u);
    EXPECT_TRUE(plain->cached && pinned->cached && with_tail->cached && tail_of_it->cached && two_a->cached &&
                two_b->cached);
    // Without the pin, the lone turn end on its branch goes.
    pinned->pinned = false;
    EXPECT_EQ(c.drop_passed_turn_ends(turn2), 1u);
    EXPECT_FALSE(pinned->cached);
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
