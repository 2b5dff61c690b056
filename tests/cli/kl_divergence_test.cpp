// `offgrid perplexity --kl-divergence-base` / `--kl-divergence`: the statistics against values computed here
// from `offgrid replay` logit records of the two models over the same tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <regex>

#include "cli_helpers.h"

namespace offgrid::test {
namespace {

std::vector<std::vector<float>> replay_rows(const TempDir & dir, const std::string & model,
                                            const std::vector<int> & toks) {
    std::string script = "set type_k f32\nset type_v f32\ndecode 0";
    for (int t : toks) script += " " + std::to_string(t);
    std::ofstream(dir.file("w.txt"), std::ios::binary) << script << "\n";
    const CmdResult r = run_offgrid("replay " + q(model) + " " + q(dir.file("w.txt")) + " -b " + q(dir.file("r.bin")));
    EXPECT_EQ(r.status, 0) << r.err;
    const std::string b = slurp(dir.file("r.bin"));
    int32_t width = 0;
    std::memcpy(&width, b.data() + 8, 4);
    std::vector<std::vector<float>> rows;
    const size_t rec = 16 + 4 * static_cast<size_t>(width);
    for (size_t off = 16; off + rec <= b.size(); off += rec) {
        std::vector<float> l(static_cast<size_t>(width));
        std::memcpy(l.data(), b.data() + off + 16, l.size() * 4);
        rows.push_back(std::move(l));
    }
    return rows;
}

std::vector<double> log_softmax(const std::vector<float> & l) {
    double mx = l[0];
    for (float x : l) mx = std::max<double>(mx, x);
    double z = 0;
    for (float x : l) z += std::exp(static_cast<double>(x) - mx);
    std::vector<double> out(l.size());
    for (size_t i = 0; i < l.size(); ++i) out[i] = static_cast<double>(l[i]) - mx - std::log(z);
    return out;
}

double field(const std::string & out, const std::string & label) {
    std::smatch m;
    const std::regex re(label + R"(\s*:\s*([-0-9.]+))");
    EXPECT_TRUE(std::regex_search(out, m, re)) << label << " missing in:\n" << out;
    return m.size() > 1 ? std::stod(m[1].str()) : NAN;
}

TEST(KlDivergence, MatchesTheStatisticsOfReplayedLogits) {
    TempDir dir;
    const std::string a = dir.file("a.gguf"), b = dir.file("b.gguf");
    ASSERT_EQ(run_offgrid("gen-model -o " + q(a) + " --seed 1").status, 0);
    ASSERT_EQ(run_offgrid("gen-model -o " + q(b) + " --seed 1 --type q8_0 --weight-scale 1.5").status, 0);
    std::vector<int> toks;
    for (int i = 0; i < 48; ++i) toks.push_back(1 + (i * 37 + 11) % 200);
    std::string ids;
    for (int t : toks) ids += std::to_string(t) + " ";
    std::ofstream(dir.file("ids.txt"), std::ios::binary) << ids << "\n";
    const std::string base = dir.file("base.kld");
    const CmdResult r0 = run_offgrid("perplexity -m " + q(a) + " -f " + q(dir.file("ids.txt")) +
                                     " --ids -c 48 -ctk f32 -ctv f32 --kl-divergence-base " + q(base));
    ASSERT_EQ(r0.status, 0) << r0.err;
    const CmdResult r1 = run_offgrid("perplexity -m " + q(b) + " -ctk f32 -ctv f32 --kl-divergence-base " + q(base) +
                                     " --kl-divergence");
    ASSERT_EQ(r1.status, 0) << r1.err;

    const auto ra = replay_rows(dir, a, toks), rb = replay_rows(dir, b, toks);
    ASSERT_EQ(ra.size(), toks.size());
    ASSERT_EQ(rb.size(), toks.size());
    std::vector<double> kld;
    double nll_a = 0, nll_b = 0;
    size_t same = 0;
    for (size_t i = 0; i + 1 < toks.size(); ++i) {
        const auto p = log_softmax(ra[i]), qd = log_softmax(rb[i]);
        double k = 0;
        for (size_t v = 0; v < p.size(); ++v) k += std::exp(p[v]) * (p[v] - qd[v]);
        kld.push_back(k);
        nll_a -= p[static_cast<size_t>(toks[i + 1])];
        nll_b -= qd[static_cast<size_t>(toks[i + 1])];
        same += std::max_element(p.begin(), p.end()) - p.begin() == std::max_element(qd.begin(), qd.end()) - qd.begin();
    }
    const double n = static_cast<double>(kld.size());
    double mean = 0;
    for (double k : kld) mean += k / n;
    ASSERT_GT(mean, 1e-3) << "the two models should differ";
    EXPECT_NEAR(field(r1.out, "Mean    KLD"), mean, 2e-6 + 1e-4 * mean);
    EXPECT_NEAR(field(r1.out, "Maximum KLD"), *std::max_element(kld.begin(), kld.end()), 2e-6);
    EXPECT_NEAR(field(r1.out, "Mean PPL\\(base\\)"), std::exp(nll_a / n), 1e-4 * std::exp(nll_a / n));
    EXPECT_NEAR(field(r1.out, "Mean PPL\\(Q\\)"), std::exp(nll_b / n), 1e-4 * std::exp(nll_b / n));
    EXPECT_NEAR(field(r1.out, "Same top p"), 100.0 * static_cast<double>(same) / n, 1e-3);

    // The base against itself: no divergence, every top token the same.
    const CmdResult self = run_offgrid("perplexity -m " + q(a) + " -ctk f32 -ctv f32 --kl-divergence-base " + q(base) +
                                       " --kl-divergence");
    ASSERT_EQ(self.status, 0) << self.err;
    EXPECT_NEAR(field(self.out, "Maximum KLD"), 0.0, 1e-6);
    EXPECT_NEAR(field(self.out, "Same top p"), 100.0, 1e-9);
}

TEST(KlDivergence, RefusesAMissingOrForeignBase) {
    TempDir dir;
    expect_one_line_error(run_offgrid("perplexity --kl-divergence"), "--kl-divergence-base");
    std::ofstream(dir.file("x.kld"), std::ios::binary) << "not a base file at all, just text";
    expect_one_line_error(run_offgrid("perplexity --kl-divergence --kl-divergence-base " + q(dir.file("x.kld"))),
                          "not a base file");
}

}  // namespace
}  // namespace offgrid::test
