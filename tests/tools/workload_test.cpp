#include <gtest/gtest.h>

#include <filesystem>

#include "common/error.h"
#include "common/shared_dir.h"
#include "workload/logrec.h"
#include "workload/workload.h"

using namespace offgrid::tools;

// The examples the golden README gives for its generator.
TEST(Workload, RandMatchesTheGoldenReadmeExamples) {
    EXPECT_EQ(rand_tokens(8, 1, 128), (std::vector<int32_t>{63, 65, 78, 75, 61, 41, 11, 71}));
    EXPECT_EQ(rand_tokens(5, 42, 128), (std::vector<int32_t>{36, 34, 50, 123, 6}));
}

TEST(Workload, ParsesEveryTokenItemKind) {
    auto wl = Workload::parse("decode 2 @5 7 range(126,130) rep(3,9) rand(2,1)\n", "t");
    ASSERT_EQ(wl.commands.size(), 1u);
    const auto & c = wl.commands[0];
    EXPECT_EQ(c.kind, Command::Kind::Decode);
    ASSERT_EQ(c.groups.size(), 1u);
    EXPECT_EQ(c.groups[0].first, 2);
    EXPECT_EQ(c.groups[0].second.start_pos, 5);
    EXPECT_EQ(c.groups[0].second.resolve(128), (std::vector<int32_t>{7, 126, 127, 0, 1, 9, 9, 9, 63, 65}));
}

TEST(Workload, ParsesMdecodeGroupsWithCommasInsideCalls) {
    auto wl = Workload::parse("mdecode 0:rand(2,3),5 1:7,8  # comment\n", "t");
    ASSERT_EQ(wl.commands.size(), 1u);
    const auto & g = wl.commands[0].groups;
    ASSERT_EQ(g.size(), 2u);
    EXPECT_EQ(g[0].first, 0);
    EXPECT_EQ(g[0].second.resolve(128).size(), 3u);
    EXPECT_EQ(g[0].second.resolve(128).back(), 5);
    EXPECT_EQ(g[1].second.resolve(128), (std::vector<int32_t>{7, 8}));
}

TEST(Workload, ParsesBatchBlocks) {
    auto wl = Workload::parse("batch\n5 0 0,1,2 0\n9 1 2\nend\ngen 0 4\n", "t");
    ASSERT_EQ(wl.commands.size(), 2u);
    const auto & b = wl.commands[0];
    ASSERT_EQ(b.entries.size(), 2u);
    EXPECT_EQ(b.entries[0].seqs, (std::vector<int32_t>{0, 1, 2}));
    EXPECT_FALSE(b.entries[0].output);
    EXPECT_TRUE(b.entries[1].output);
    EXPECT_EQ(wl.commands[1].kind, Command::Kind::Gen);
    EXPECT_EQ(wl.commands[1].n, 4);
}

TEST(Workload, ErrorsNameScriptAndLine) {
    try {
        Workload::parse("set fa off\nrm 0 x 3\n", "w.txt");
        FAIL() << "expected an error";
    } catch (const offgrid::Error & e) {
        EXPECT_NE(std::string(e.what()).find("w.txt:2:"), std::string::npos) << e.what();
    }
    EXPECT_THROW(Workload::parse("batch\n1 2 3\n", "t"), offgrid::Error);
    EXPECT_THROW(Workload::parse("decode 0 rand(3)\n", "t"), offgrid::Error);
}

TEST(Workload, UnknownCommandsAreKeptForTheLog) {
    auto wl = Workload::parse("frobnicate 1 2\n", "t");
    ASSERT_EQ(wl.commands.size(), 1u);
    EXPECT_EQ(wl.commands[0].kind, Command::Kind::Unknown);
}

TEST(Workload, ParsesEveryGoldenScript) {
    OFFGRID_REQUIRE_SHARED();
    int n = 0;
    for (const auto & e : std::filesystem::directory_iterator(offgrid::test::shared_dir() + "/golden/workloads")) {
        auto wl = Workload::load(e.path().string());
        EXPECT_FALSE(wl.commands.empty()) << e.path();
        for (const auto & c : wl.commands) {
            EXPECT_NE(c.kind, Command::Kind::Unknown) << e.path() << ":" << c.line;
        }
        ++n;
    }
    EXPECT_EQ(n, 14);
}

TEST(Logrec, WriteThenReadGivesTheRows) {
    const auto path = (std::filesystem::temp_directory_path() / "offgrid_logrec_test.bin").string();
    {
        LogrecWriter w(path, 3);
        const float a[3] = {1.0f, -2.5f, 3.25f};
        const float b[3] = {0.0f, 1e-7f, -0.0f};
        w.write(0, 1, 2, 3, a);
        w.write(4, 5, 6, 7, b);
        w.close();
    }
    const auto rec = Logrec::read(path);
    EXPECT_EQ(rec.n_vocab, 3);
    ASSERT_EQ(rec.rows.size(), 2u);
    EXPECT_EQ(rec.rows[1].step, 4);
    EXPECT_EQ(rec.rows[1].tok, 7);
    EXPECT_EQ(rec.rows[0].logits[1], -2.5f);
    std::filesystem::remove(path);
}

TEST(Logrec, ReadsAGoldenRecord) {
    OFFGRID_REQUIRE_SHARED();
    const auto rec = Logrec::read(offgrid::test::shared_dir() + "/golden/expected/tiny-r1__01_smoke.bin");
    EXPECT_EQ(rec.n_vocab, 128);
    ASSERT_EQ(rec.rows.size(), 44u);
    EXPECT_EQ(rec.rows[0].tok, 63);  // rand(40,1) starts 63 65 78 ...
    EXPECT_EQ(rec.rows[1].tok, 65);
    EXPECT_EQ(rec.rows[43].pos, 43);
}
