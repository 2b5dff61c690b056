// The shipped built-in model (models/offgrid-speaks.gguf): commands without -m use it, and it writes English.
// The rest of the suite runs with OFFGRID_BUILTIN=tiny (tests/CMakeLists.txt); these tests clear it.
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <set>

#include "cli_helpers.h"

namespace offgrid::test {
namespace {

const std::string kSpeaks = "OFFGRID_BUILTIN= ";

std::vector<std::string> words_of(const std::string & text) {
    std::vector<std::string> words;
    std::string w;
    for (char c : text + " ") {
        if (std::isalpha(static_cast<unsigned char>(c))) {
            w += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        } else if (!w.empty()) {
            words.push_back(w);
            w.clear();
        }
    }
    return words;
}

TEST(BuiltinModel, RunWithoutModelUsesTheShippedFile) {
    const std::string path = std::string(OFFGRID_SOURCE_DIR) + "/models/offgrid-speaks.gguf";
    ASSERT_TRUE(fs::is_regular_file(path)) << path;
    const CmdResult info = run_offgrid("gguf-info " + q(path));
    ASSERT_EQ(info.status, 0) << info.err;
    EXPECT_NE(info.out.find("offgrid-speaks"), std::string::npos);
    // A file-size bound for the repository: at most 40 MB.
    EXPECT_LE(fs::file_size(path), 40u * 1000 * 1000);
    const CmdResult r = run_offgrid("run -p 'The old man' -n 24 --temp 0", kSpeaks);
    ASSERT_EQ(r.status, 0) << r.err;
    const CmdResult m = run_offgrid("run -m " + q(path) + " -p 'The old man' -n 24 --temp 0", kSpeaks);
    ASSERT_EQ(m.status, 0) << m.err;
    EXPECT_EQ(r.out, m.out);
}

// Greedy continuations of prompts that are not in the corpus are English words: at least 90 % of them are in the
// system dictionary (wamerican), and no replacement characters appear. The prompts are tools/train/eval.py's list,
// fixed before any output of the model was seen.
TEST(BuiltinModel, GreedyTextIsDictionaryWords) {
    std::ifstream dict("/usr/share/dict/words");
    if (!dict) GTEST_SKIP() << "/usr/share/dict/words is absent (Debian package wamerican)";
    std::set<std::string> known;
    for (std::string line; std::getline(dict, line);) {
        for (const std::string & w : words_of(line)) known.insert(w);
    }
    size_t total = 0, found = 0;
    for (const char * prompt : {"The old man", "Once upon a time", "In the morning we", "She opened the door and",
                                 "The city was", "My friend told me that", "Water is", "When the king heard",
                                 "The best way to learn", "A list can be", "They walked along the river",
                                 "I think that"}) {
        const CmdResult r = run_offgrid(std::string("run -p '") + prompt + "' -n 64 --temp 0", kSpeaks);
        ASSERT_EQ(r.status, 0) << r.err;
        EXPECT_EQ(r.out.find("\xEF\xBF\xBD"), std::string::npos) << r.out;
        for (const std::string & w : words_of(r.out)) {
            ++total;
            found += known.count(w);
        }
    }
    ASSERT_GT(total, 200u);
    EXPECT_GE(static_cast<double>(found), 0.9 * static_cast<double>(total)) << found << " of " << total;
}

TEST(BuiltinModel, UnknownChoiceIsRefused) {
    expect_one_line_error(run_offgrid("run -n 2", "OFFGRID_BUILTIN=huge "), "OFFGRID_BUILTIN");
}

}  // namespace
}  // namespace offgrid::test
