// The hand-written pre-tokenizer scans against a real regex engine: data/split_vectors.txt holds random texts
// split by Python's `regex` module with the qwen2 / qwen35 expressions (tools/gen_split_vectors.py).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/unicode_split.h"

namespace offgrid::runtime {
namespace {

std::string unhex(const std::string & hex) {
    std::string out;
    if (hex == "-") return out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) {
        out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    }
    return out;
}

TEST(SplitVectors, MatchTheRegexEngine) {
    const std::string path = std::string(OFFGRID_SOURCE_DIR) + "/tests/runtime/data/split_vectors.txt";
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    size_t checked = 0;
    for (std::string line; std::getline(in, line);) {
        std::istringstream fields(line);
        std::string pre_name, text_hex, pieces_hex;
        ASSERT_TRUE(fields >> pre_name >> text_hex >> pieces_hex) << line;
        const auto pre = pre_tokenizer_from_name(pre_name);
        ASSERT_TRUE(pre.has_value()) << line;
        const std::string text = unhex(text_hex);
        std::vector<std::string> want;
        if (pieces_hex != "-") {
            std::istringstream parts(pieces_hex);
            for (std::string p; std::getline(parts, p, '|');) want.push_back(unhex(p));
        }
        std::vector<std::string_view> got_views;
        split_words(text, *pre, got_views);
        const std::vector<std::string> got(got_views.begin(), got_views.end());
        EXPECT_EQ(got, want) << pre_name << " text hex " << text_hex;
        ++checked;
    }
    EXPECT_EQ(checked, 600u);
}

}  // namespace
}  // namespace offgrid::runtime
