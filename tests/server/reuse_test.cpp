// Reuse to the token: the message ends of a rendered chat are exact prefixes of it; two chats sharing a system
// prompt reuse all of it whatever the split point (the system prompt's end against the prefill chunks, a second
// chat that parts from the first mid-message or at a message boundary); each turn of a conversation restores all
// earlier turns; and the answers equal those of a server without a prefix cache.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "common/shared_dir.h"
#include "runtime/byte_vocab.h"
#include "server/protocol.h"
#include "server_helpers.h"

namespace offgrid::test {
namespace {

using server::ChatMessage;

std::string words(size_t n_chars, uint32_t seed) {
    static const char * vocab[] = {"tool", "call", "json", "read", "file", "grep", "the", "agent", "plan", "step", "result", "edit"};
    std::string out;
    uint32_t s = seed * 2654435761u + 7;
    while (out.size() < n_chars) {
        s = s * 1103515245u + 12345u;
        if (!out.empty()) out += ' ';
        out += vocab[(s >> 16) % 12];
    }
    out.resize(n_chars);
    return out;
}

json chat(const std::vector<std::pair<std::string, std::string>> & msgs, int max_tokens) {
    json m = json::array();
    for (const auto & [role, content] : msgs) m.push_back({{"role", role}, {"content", content}});
    return {{"model", "tiny"}, {"messages", m}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
}

int cached(const Reply & r) { return r.j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(); }
int prompt_tokens(const Reply & r) { return r.j["usage"]["prompt_tokens"].get<int>(); }

TEST(ChatReuse, MessageEndsArePrefixesOfTheRenderedChat) {
    const Tokenizer tok(std::make_shared<const runtime::Tokenizer>(runtime::byte_vocab_tokenizer()));
    const std::vector<ChatMessage> msgs = {{"system", words(300, 1)}, {"user", "hi"}, {"assistant", words(40, 2)},
                                           {"tool", words(90, 3)}, {"user", "<|im_end|>x"}};
    const std::vector<int32_t> full = server::render_chatml(tok, msgs);
    const std::vector<size_t> ends = server::chat_message_ends(tok, msgs, full);
    ASSERT_EQ(ends.size(), msgs.size());
    const std::vector<int32_t> bare = server::render_chatml(tok, {});
    for (size_t k = 0; k < ends.size(); ++k) {
        // The first k + 1 messages rendered alone, without the assistant's opener, are the first ends[k] tokens.
        std::vector<ChatMessage> head(msgs.begin(), msgs.begin() + static_cast<std::ptrdiff_t>(k + 1));
        std::vector<int32_t> r = server::render_chatml(tok, head);
        r.resize(r.size() - bare.size());
        ASSERT_EQ(r.size(), ends[k]) << "message " << k;
        EXPECT_TRUE(std::equal(r.begin(), r.end(), full.begin())) << "message " << k;
        if (k > 0) {
            EXPECT_GT(ends[k], ends[k - 1]);
        }
    }
    EXPECT_LT(ends.back(), full.size());
}

size_t common_prefix(const std::vector<int32_t> & a, const std::vector<int32_t> & b) {
    return static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}

// The shared opening is the system turn and the next message's role line: what any two chats with that system
// prompt and a next message of that role share, whatever the message says (here the byte vocabulary, then Qwen's
// with control-token markers, with and without tools).
void expect_shared_opening(const Tokenizer & tok, const ChatOptions & o, bool bytes) {
    const std::string system = words(200, 3);
    for (const char * role : {"user", "tool", "assistant"}) {
        const std::vector<std::string> contents = {"hello there", "world", "x", "xyz", "<b>", " lead", "\nnew line"};
        std::vector<size_t> openings;
        for (const std::string & c : contents) {
            const std::vector<ChatMessage> msgs = {{"system", system}, {role, c}};
            const std::vector<int32_t> r = server::render_chatml(tok, msgs, o);
            const size_t opening = server::chat_shared_opening(tok, msgs, r, o);
            const size_t end = server::chat_message_ends(tok, msgs, r, o).at(0);
            EXPECT_GT(opening, end) << role << " '" << c << "'";
            EXPECT_LT(opening, r.size());
            // A prefix of every other chat with this system prompt and a message of this role.
            for (const std::string & other : contents) {
                const std::vector<int32_t> r2 = server::render_chatml(tok, {{"system", system}, {role, other}}, o);
                EXPECT_GE(common_prefix(r, r2), opening) << role << " '" << c << "' against '" << other << "'";
            }
            openings.push_back(opening);
        }
        // The same for every content, and, in the byte vocabulary (no merges), all that two contents parting at
        // their first byte share.
        for (const size_t opening : openings) EXPECT_EQ(opening, openings[0]) << role;
        if (bytes) {
            const std::vector<int32_t> a = server::render_chatml(tok, {{"system", system}, {role, "hello there"}}, o);
            const std::vector<int32_t> b = server::render_chatml(tok, {{"system", system}, {role, "world"}}, o);
            EXPECT_EQ(openings[0], common_prefix(a, b)) << role;
        }
    }
    // No message after the system turn: none.
    const std::vector<ChatMessage> alone = {{"system", system}};
    EXPECT_EQ(server::chat_shared_opening(tok, alone, server::render_chatml(tok, alone, o), o), 0u);
}

TEST(ChatReuse, TheSharedOpeningEndsAfterTheNextMessagesRoleLine) {
    const Tokenizer tok(std::make_shared<const runtime::Tokenizer>(runtime::byte_vocab_tokenizer()));
    expect_shared_opening(tok, {}, true);
    ChatOptions o;
    o.tools = {R"({"type": "function", "function": {"name": "f", "parameters": {}}})"};
    expect_shared_opening(tok, o, true);
}

TEST(ChatReuse, TheSharedOpeningWithTheQwenVocabulary) {
    OFFGRID_REQUIRE_SHARED();
    const Tokenizer tok = Tokenizer::from_file(test::shared_dir() + "/data/ggml-vocab-qwen35.gguf");
    expect_shared_opening(tok, {}, false);
    // <|im_start|> and "user": the role line's newline is "\n\n" with a content that opens with one.
    const std::vector<ChatMessage> msgs = {{"system", "You help."}, {"user", "Hi."}};
    const std::vector<int32_t> r = server::render_chatml(tok, msgs);
    EXPECT_EQ(server::chat_shared_opening(tok, msgs, r), server::chat_message_ends(tok, msgs, r).at(0) + 2);
}

// The second chat reuses the whole system prompt and the user turn's opening, wherever the system prompt ends
// against the 64-token prefill chunks and wherever the second chat parts from the first; where the user messages
// differ from their first token, that is every token the two prompts share.
TEST(ChatReuse, ASharedSystemPromptIsReusedToTheTokenWhateverTheSplitPoint) {
    ServerProcess s({"-np", "2", "-c", "4096", "-b", "64", "-t", "2", "--quiet"}, "reuse");
    const Tokenizer tok(std::make_shared<const runtime::Tokenizer>(runtime::byte_vocab_tokenizer()));
    struct Case {
        size_t system_chars;
        std::string user_a, user_b;
        bool part_at_first_token = false;
    };
    const std::string shared_user = words(150, 77);
    const std::vector<Case> cases = {
        {301, "A " + words(120, 5), "B " + words(90, 6), true},   // different user messages
        {357, shared_user + " alpha", shared_user + " beta"},      // parts 150 characters into the user message
        {420, words(200, 8), words(200, 8).substr(0, 3) + "Z"},    // parts 3 characters into it
        {383, "same", "same question, longer"},                    // parts at the very end of the first's message
    };
    int k = 0;
    for (const Case & c : cases) {
        const std::string system = words(c.system_chars, 100 + k++);
        Reply a = post(s, "/v1/chat/completions", chat({{"system", system}, {"user", c.user_a}}, 4));
        ASSERT_EQ(a.status, 200) << a.body;
        Reply b = post(s, "/v1/chat/completions", chat({{"system", system}, {"user", c.user_b}}, 4));
        ASSERT_EQ(b.status, 200) << b.body;
        const std::vector<ChatMessage> sys_only = {{"system", system}};
        const std::vector<int32_t> sys_tokens = server::render_chatml(tok, sys_only);
        const size_t system_len = server::chat_message_ends(tok, sys_only, sys_tokens).at(0);
        const std::vector<ChatMessage> msgs_a = {{"system", system}, {"user", c.user_a}};
        const std::vector<int32_t> prompt_a = server::render_chatml(tok, msgs_a);
        const size_t opening = server::chat_shared_opening(tok, msgs_a, prompt_a);
        ASSERT_GT(opening, system_len);
        EXPECT_GE(cached(b), static_cast<int>(opening)) << "case " << k << ", system prompt of " << system_len << " tokens";
        EXPECT_LT(cached(b), prompt_tokens(b));
        if (c.part_at_first_token) {
            const std::vector<int32_t> prompt_b = server::render_chatml(tok, {{"system", system}, {"user", c.user_b}});
            EXPECT_EQ(cached(b), static_cast<int>(common_prefix(prompt_a, prompt_b)));
        }
    }
    EXPECT_EQ(s.stop(), 0);
}

// A conversation of four turns: every turn restores at least all of the previous turn's prompt (the earlier
// turns and the previous question), and the last answer equals a server's without a prefix cache.
TEST(ChatReuse, EachTurnRestoresTheEarlierTurnsAndAnswersAsAColdServer) {
    std::vector<std::pair<std::string, std::string>> msgs = {{"system", words(260, 11)}};
    std::vector<Reply> replies;
    json last_request;
    {
        ServerProcess s({"-np", "2", "-c", "4096", "-b", "64", "-t", "2", "--quiet"}, "turns");
        int previous_prompt = 0;
        for (int turn = 0; turn < 4; ++turn) {
            msgs.push_back({"user", words(60 + 50 * turn, 20 + turn)});
            last_request = chat(msgs, 8);
            Reply r = post(s, "/v1/chat/completions", last_request);
            ASSERT_EQ(r.status, 200) << r.body;
            if (turn > 0) {
                EXPECT_GE(cached(r), previous_prompt) << "turn " << turn;
            }
            previous_prompt = prompt_tokens(r);
            msgs.push_back({"assistant", r.j["choices"][0]["message"]["content"].get<std::string>()});
            msgs.push_back({"tool", words(120, 40 + turn)});
            replies.push_back(std::move(r));
        }
        EXPECT_EQ(s.stop(), 0);
    }
    ServerProcess cold({"-np", "1", "-c", "4096", "-t", "1", "--cache-ram", "0", "--quiet"}, "turns_cold");
    Reply c = post(cold, "/v1/chat/completions", last_request);
    ASSERT_EQ(c.status, 200) << c.body;
    EXPECT_EQ(cached(c), 0);
    EXPECT_EQ(c.j["choices"][0]["message"]["content"], replies.back().j["choices"][0]["message"]["content"]);
}

}  // namespace
}  // namespace offgrid::test

namespace offgrid::test {
namespace {

// --slot-save-path: a restarted server resumes a conversation without prefilling its earlier turns and answers as
// a cold server; with the conversation's first (whole) snapshot damaged, the tails built on it are skipped with
// their reason and the answer is the cold one.
TEST(ChatReuse, ARestartedServerResumesTheConversationFromItsFiles) {
    const fs::path dir = work_dir() / "resume";
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::vector<std::pair<std::string, std::string>> msgs = {{"system", words(240, 31)}, {"user", words(100, 32)}};
    auto args = [&](const char * save) {
        std::vector<std::string> a = {"-np", "1", "-c", "4096", "-b", "64", "-t", "2"};
        if (save) a.insert(a.end(), {"--slot-save-path", save});
        return a;
    };
    int previous_prompt = 0;
    {
        ServerProcess s(args(dir.c_str()), "resume1");
        for (int turn = 0; turn < 2; ++turn) {
            Reply r = post(s, "/v1/chat/completions", chat(msgs, 8));
            ASSERT_EQ(r.status, 200) << r.body;
            previous_prompt = prompt_tokens(r);
            msgs.push_back({"assistant", r.j["choices"][0]["message"]["content"].get<std::string>()});
            msgs.push_back({"user", words(80, 33 + turn)});
        }
        EXPECT_EQ(s.stop(), 0);
    }
    json cold;
    {
        ServerProcess c(args(nullptr), "resume_cold");
        Reply r = post(c, "/v1/chat/completions", chat(msgs, 8));
        ASSERT_EQ(r.status, 200) << r.body;
        cold = r.j["choices"];
    }
    // Keep a copy of the files: the restarted server saves its own at shutdown.
    const fs::path saved = work_dir() / "resume_saved";
    fs::remove_all(saved);
    fs::copy(dir, saved, fs::copy_options::recursive);
    {
        ServerProcess s(args(dir.c_str()), "resume2");
        Reply r = post(s, "/v1/chat/completions", chat(msgs, 8));
        ASSERT_EQ(r.status, 200) << r.body;
        EXPECT_GE(cached(r), previous_prompt);
        EXPECT_EQ(r.j["choices"], cold);
        EXPECT_EQ(s.stop(), 0);
    }
    // Damage the whole-state file (the shortest path); the tails need it.
    fs::remove_all(dir);
    fs::copy(saved, dir, fs::copy_options::recursive);
    fs::path folder;
    for (const auto & e : fs::directory_iterator(dir)) folder = e.path();
    fs::path root;
    size_t shortest = SIZE_MAX;
    for (const auto & e : fs::directory_iterator(folder)) {
        const std::string data = slurp(e.path());
        uint32_t n = 0, from = 0;
        ASSERT_GT(data.size(), 28u);
        std::memcpy(&n, data.data() + 20, 4);
        std::memcpy(&from, data.data() + 24 + 4 * size_t(n), 4);
        if (from == 0 && n < shortest) {
            shortest = n;
            root = e.path();
        }
    }
    ASSERT_FALSE(root.empty());
    std::string data = slurp(root);
    data[data.size() / 2] = static_cast<char>(data[data.size() / 2] ^ 1);
    std::ofstream(root, std::ios::binary | std::ios::trunc) << data;
    ServerProcess s(args(dir.c_str()), "resume3");
    Reply r = post(s, "/v1/chat/completions", chat(msgs, 8));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.j["choices"], cold);
    const std::string log = s.log();
    EXPECT_NE(log.find("checksum mismatch"), std::string::npos) << log;
    EXPECT_NE(log.find("was not loaded"), std::string::npos) << log;
    EXPECT_EQ(s.stop(), 0);
}

}  // namespace
}  // namespace offgrid::test
