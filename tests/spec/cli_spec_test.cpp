// `offgrid run --spec-type` and `offgrid bench --spec-type` through the command line: the text equals the
// plain run's, on the built-in trained model (its own NextN head) and on generated models (an MTP-only -md file).
#include <gtest/gtest.h>

#include "cli/cli_helpers.h"

namespace offgrid::test {
namespace {

const std::string kSpeaks = std::string(OFFGRID_SOURCE_DIR) + "/models/offgrid-speaks.gguf";

TEST(SpecCli, RunTextIsThePlainTextForBothDraftTypes) {
    if (!fs::exists(kSpeaks)) GTEST_SKIP() << kSpeaks << " absent";
    for (const char * prompt : {"And God said", "The function returns the value of"}) {
        const std::string base = "run -m " + q(kSpeaks) + " -n 48 --temp 0 -p " + q(prompt);
        const CmdResult plain = run_offgrid(base);
        ASSERT_EQ(plain.status, 0) << plain.err;
        for (const char * type : {"draft-mtp", "ngram-simple"}) {
            for (const char * extra : {"", " --spec-draft-n-max 5 --spec-draft-p-min 0.3"}) {
                const CmdResult spec = run_offgrid(base + " --spec-type " + type + extra);
                ASSERT_EQ(spec.status, 0) << spec.err;
                EXPECT_EQ(spec.out, plain.out) << type << extra;
                EXPECT_NE(spec.err.find(std::string("speculative ") + type), std::string::npos) << spec.err;
            }
        }
        // Sampled with a seed: the same text too (one draw per emitted token from the target's row).
        const CmdResult sampled = run_offgrid(base + " --temp 0.9 -s 11");
        const CmdResult sampled_spec = run_offgrid(base + " --temp 0.9 -s 11 --spec-type draft-mtp");
        ASSERT_EQ(sampled_spec.status, 0) << sampled_spec.err;
        EXPECT_EQ(sampled_spec.out, sampled.out);
    }
}

TEST(SpecCli, AfterStateLoad) {
    if (!fs::exists(kSpeaks)) GTEST_SKIP() << kSpeaks << " absent";
    TempDir dir;
    const std::string st = q(dir.file("s.state")), plain_st = q(dir.file("p.state")), m = " -m " + q(kSpeaks);
    const CmdResult whole = run_offgrid("run" + m + " -n 30 --temp 0 -p 'In the beginning'");
    const CmdResult first = run_offgrid("run" + m + " -n 6 --temp 0 -p 'In the beginning'");
    // A state saved by a speculative run (its memory keeps the rollback snapshots), continued by both types.
    ASSERT_EQ(run_offgrid("run" + m + " -n 6 --temp 0 -p 'In the beginning' --spec-type ngram-simple --state-save " + st).status, 0);
    auto strip = [](std::string s) { return s.empty() || s.back() != '\n' ? s : s.substr(0, s.size() - 1); };
    for (const char * type : {"draft-mtp", "ngram-simple"}) {
        const CmdResult rest = run_offgrid("run" + m + " -n 24 --temp 0 -p '' --state-load " + st + " --spec-type " + type);
        ASSERT_EQ(rest.status, 0) << rest.err;
        EXPECT_EQ(strip(first.out) + strip(rest.out), strip(whole.out)) << type;
    }
    // A plain run's state has no snapshots: refused in one line that says why.
    ASSERT_EQ(run_offgrid("run" + m + " -n 6 --temp 0 -p 'In the beginning' --state-save " + plain_st).status, 0);
    expect_one_line_error(run_offgrid("run" + m + " -n 4 -p '' --state-load " + plain_st + " --spec-type draft-mtp"),
                          "n_rs_seq");
}

TEST(SpecCli, GeneratedModelWithAnMtpOnlyDraftFile) {
    TempDir dir;
    const std::string target = q(dir.file("t.gguf")), side = q(dir.file("side.gguf"));
    ASSERT_EQ(run_offgrid("gen-model --seed 4 --mtp -o " + target).status, 0);
    const CmdResult g = run_offgrid("gen-model --seed 4 --mtp-only -o " + side);
    ASSERT_EQ(g.status, 0) << g.err;
    EXPECT_NE(g.out.find("MTP block only"), std::string::npos) << g.out;
    const std::string base = "run -m " + target + " -n 40 --temp 0 -p 'offgrid speculates'";
    const CmdResult plain = run_offgrid(base);
    const CmdResult own = run_offgrid(base + " --spec-type draft-mtp");
    const CmdResult md = run_offgrid(base + " --spec-type draft-mtp -md " + side);
    ASSERT_EQ(own.status, 0) << own.err;
    ASSERT_EQ(md.status, 0) << md.err;
    EXPECT_EQ(own.out, plain.out);
    EXPECT_EQ(md.out, plain.out);
    // The same block in the file and in the MTP-only file drafts the same tokens.
    const auto stats = [](const std::string & err) { return err.substr(err.find("speculative draft-mtp")); };
    EXPECT_EQ(stats(own.err), stats(md.err));

    // A model without a NextN block, and a bad type, are refused in one line.
    const std::string plain_model = q(dir.file("p.gguf"));
    ASSERT_EQ(run_offgrid("gen-model --seed 4 -o " + plain_model).status, 0);
    expect_one_line_error(run_offgrid("run -m " + plain_model + " -n 4 -p x --spec-type draft-mtp"), "no MTP");
    expect_one_line_error(run_offgrid("run -m " + target + " -n 4 -p x --spec-type eagle"), "--spec-type");
}

TEST(SpecCli, BenchReportsAcceptanceAndSpeedUpAgainstPlain) {
    if (!fs::exists(kSpeaks)) GTEST_SKIP() << kSpeaks << " absent";
    TempDir dir;
    {
        std::ofstream f(dir.file("text.txt"));
        for (int i = 0; i < 40; ++i) f << "And the LORD spake unto Moses, saying, Speak unto the children of Israel. ";
    }
    const CmdResult r = run_offgrid("bench -m " + q(kSpeaks) + " --spec-type ngram-simple --spec-repeat -f " +
                                    q(dir.file("text.txt")) + " -p 32 -n 24 --spec-prompts 2 -t 1");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("speed-up"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("2 / 2"), std::string::npos) << r.out;  // both prompts identical
    const CmdResult j = run_offgrid("bench -m " + q(kSpeaks) + " --spec-type draft-mtp --json -f " +
                                    q(dir.file("text.txt")) + " -p 16 -n 12 --spec-prompts 1 -t 1");
    ASSERT_EQ(j.status, 0) << j.err;
    EXPECT_NE(j.out.find("\"acceptance\""), std::string::npos) << j.out;
    EXPECT_NE(j.out.find("\"identical\": 1"), std::string::npos) << j.out;
    expect_one_line_error(run_offgrid("bench -m " + q(kSpeaks) + " --spec-type ngram-simple"), "-f FILE");
}

}  // namespace
}  // namespace offgrid::test
