// The generator registry (tools/models/model_generator.h): every registered architecture's generator writes a
// model the library loads as that architecture, through the same interface the CLI uses.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <unistd.h>

#include "models/model_generator.h"
#include "offgrid/context.h"
#include "offgrid/error.h"
#include "offgrid/gguf.h"

namespace fs = std::filesystem;
using namespace offgrid;
using namespace offgrid::tools;

namespace {

std::string temp_file(const std::string & name) {
    return (fs::temp_directory_path() / ("offgrid_gen_" + name + "_" + std::to_string(::getpid()) + ".gguf")).string();
}

std::string slurp(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(ModelGenerators, NamesAreUniqueAndFound) {
    ASSERT_GE(model_generators().size(), 2u);
    std::set<std::string> names;
    for (const ModelGenerator * g : model_generators()) {
        EXPECT_TRUE(names.insert(g->arch()).second) << g->arch() << " is registered twice";
        EXPECT_EQ(find_model_generator(g->arch()), g);
    }
    EXPECT_EQ(find_model_generator("no-such-architecture"), nullptr);
    EXPECT_EQ(model_generator_names(), [] {
        std::string s;
        for (const ModelGenerator * g : model_generators()) s += (s.empty() ? "" : ", ") + g->arch();
        return s;
    }());
}

TEST(ModelGenerators, OptionsDoNotShadowTheCommonFlagsOrEachOther) {
    const std::set<std::string> common{"-o", "--output", "--arch", "--preset", "--seed", "--type", "-h", "--help"};
    for (const ModelGenerator * g : model_generators()) {
        std::set<std::string> seen;
        for (const GenOption & o : g->options()) {
            EXPECT_EQ(common.count(o.flag), 0u) << g->arch() << " " << o.flag;
            EXPECT_TRUE(seen.insert(o.flag).second) << g->arch() << " lists " << o.flag << " twice";
            if (o.kind == GenOption::Kind::Integer || o.kind == GenOption::Kind::Real) {
                EXPECT_LE(o.lo, o.hi) << o.flag;
            }
        }
        EXPECT_NE(g->usage().find("--arch " + g->arch()), std::string::npos) << g->arch();
    }
}

// Each generator's tiny preset loads as its own architecture, with the byte-level vocabulary attached.
TEST(ModelGenerators, TinyPresetLoadsAsItsArchitecture) {
    for (const ModelGenerator * g : model_generators()) {
        SCOPED_TRACE(g->arch());
        bool has_tiny = false;
        for (const std::string & p : g->presets()) has_tiny = has_tiny || p == "tiny";
        EXPECT_TRUE(has_tiny);
        const std::string path = temp_file(g->arch());
        const auto m = g->configure(GenRequest{});
        EXPECT_FALSE(m->describe().empty());
        m->write(path);
        const auto model = Model::load(path);
        EXPECT_EQ(model->architecture(), g->arch());
        const gguf::GgufInfo info = gguf::GgufInfo::read(path);
        bool vocab = false;
        for (const gguf::KeyValue & kv : info.metadata) vocab = vocab || kv.key == "tokenizer.ggml.tokens";
        EXPECT_TRUE(vocab);
        fs::remove(path);
    }
}

TEST(ModelGenerators, SettingsApplyAndBadOnesAreRefusedByName) {
    const ModelGenerator * g = model_generators().front();
    GenRequest seeded;
    seeded.seed = 7;
    const std::string a = temp_file("seed1"), b = temp_file("seed7");
    g->configure(GenRequest{})->write(a);
    g->configure(seeded)->write(b);
    EXPECT_EQ(fs::file_size(a), fs::file_size(b));
    EXPECT_NE(slurp(a), slurp(b)) << "the seed does not reach the weights";
    fs::remove(a);
    fs::remove(b);

    GenRequest bad_type;
    bad_type.weight_type = "q4";
    try {
        g->configure(bad_type);
        FAIL() << "an unknown weight type was accepted";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("--type"), std::string::npos) << e.what();
    }
    GenRequest bad_preset;
    bad_preset.preset = "no-such-preset";
    EXPECT_THROW(g->configure(bad_preset), Error);
}
