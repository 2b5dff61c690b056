// Greedy output with speculation equals plain decoding on every golden model (../shared/golden/models), 50
// prompts each, for both draft types. The golden models carry no MTP block, so draft-mtp runs on an MTP-only
// file generated to their width, stream count and vocabulary (random drafts: almost every round rolls back).
#include <gtest/gtest.h>

#include <filesystem>

#include "model/qwen4exp/model.h"
#include "spec/spec_helpers.h"

namespace offgrid::spec_test {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> golden_models() {
    std::vector<std::string> out;
    const fs::path dir = fs::path(OFFGRID_SHARED_DIR) / "golden" / "models";
    if (!fs::is_directory(dir)) return out;
    for (const auto & e : fs::directory_iterator(dir))
        if (e.path().extension() == ".gguf") out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    return out;
}

TEST(GoldenIdentity, FiftyPromptsBothDraftTypesEveryGoldenModel) {
    const auto models = golden_models();
    if (models.empty()) GTEST_SKIP() << "no golden models at " << OFFGRID_SHARED_DIR << "/golden/models (../shared absent)";
    for (const std::string & path : models) {
        const auto model = Model::load(path);
        const auto & q = dynamic_cast<const model::qwen4exp::Model &>(model->impl());
        // A draft head of the golden model's width, streams and vocabulary.
        model::qwen4exp::GenConfig side = mtp_config();
        side.n_embd = q.hparams().n_embd;
        side.hc = q.hparams().hc;
        side.n_vocab = q.hparams().n_vocab;
        side.ple = false;
        side.mtp_only = true;
        const std::string side_path = temp_path("golden_side");
        model::qwen4exp::generate_model(side).write_file(side_path);
        SpecParams mtp = spec_of(SpecType::DraftMtp, 3);
        mtp.draft_model = side_path;
        const SpecParams ngram = spec_of(SpecType::NgramSimple, 4);
        GenOptions o;
        o.n_predict = 10;
        o.n_ctx = 256;
        uint64_t rounds = 0, drafted = 0;
        for (int i = 0; i < 50; ++i) {
            const std::vector<int32_t> prompt = prompt_of(i, 4 + (i * 7) % 40, model->n_vocab());
            const std::vector<int32_t> plain = generate_plain(model, prompt, o);
            for (const SpecParams & sp : {mtp, ngram}) {
                SpecStats st;
                EXPECT_EQ(generate_spec(model, {prompt}, sp, o, &st)[0], plain)
                    << fs::path(path).filename() << " prompt " << i << " " << spec_type_name(sp.type);
                rounds += st.rounds;
                drafted += st.drafted;
            }
        }
        fs::remove(side_path);
        EXPECT_GT(drafted, 0u);
        std::printf("%s: %llu rounds, %llu draft tokens verified\n", fs::path(path).filename().c_str(),
                    (unsigned long long)rounds, (unsigned long long)drafted);
    }
}

}  // namespace
}  // namespace offgrid::spec_test
