// `offgrid gen-model`: writes a deterministic random-weight GGUF file of any registered architecture
// (tools/models/model_generator.h) from a preset and overrides.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "args/cli_args.h"
#include "command.h"
#include "models/model_generator.h"

namespace offgrid::cli {

namespace {

std::string usage() {
    const std::vector<const tools::ModelGenerator *> & gens = tools::model_generators();
    std::string u = "usage: offgrid gen-model -o FILE [--arch ";
    u += tools::model_generator_names("|");
    u += "] [--preset NAME] [--seed N]\n"
         "                         [--type f32|f16|bf16|q8_0] [overrides...]\n"
         "\n"
         "Writes a GGUF file with deterministic random weights and the embedded byte-level vocabulary.\n"
         "The same arguments always give the same bytes.\n"
         "\n"
         "  -o, --output FILE     file to write (through a temporary file renamed into place)\n"
         "  --arch NAME           the architecture (default ";
    u += gens.front()->arch();
    u += ")\n"
         "  --preset NAME         the architecture's preset (default tiny; listed below)\n"
         "  --seed N              weight seed (default 1)\n"
         "  --type T              type of the large matrices: f32 (default), f16, bf16, q8_0; norms, small\n"
         "                        vectors, the router and conv kernels stay f32\n";
    for (const tools::ModelGenerator * g : gens) {
        u += "\n";
        u += g->usage();
    }
    return u;
}

// One parsed override.
tools::GenSetting setting(const std::string & flag, int64_t integer = 0, double real = 0, std::string text = {}) {
    tools::GenSetting s;
    s.flag = flag;
    s.integer = integer;
    s.real = real;
    s.text = std::move(text);
    return s;
}

// The value of the last `flag VALUE` pair among the arguments (the parser reads them again later).
std::optional<std::string> last_value(const std::vector<std::string> & args, const char * flag) {
    std::optional<std::string> v;
    for (size_t i = 0; i + 1 < args.size(); ++i) {
        if (args[i] == flag) v = args[i + 1];
    }
    return v;
}

int gen_model_main(const std::vector<std::string> & args) {
    return tools::run_with_usage("gen-model", [&]() -> int {
        // The architecture and the preset come first, so that overrides apply on top of the preset whatever their
        // order, and the architecture decides which overrides exist.
        const std::string arch = last_value(args, "--arch").value_or(tools::model_generators().front()->arch());
        const tools::ModelGenerator * gen = tools::find_model_generator(arch);
        if (!gen) {
            throw tools::UsageError("--arch: '" + arch + "' is not one of " + tools::model_generator_names());
        }
        tools::GenRequest request;
        request.preset = last_value(args, "--preset").value_or("tiny");
        bool known_preset = false;
        std::string preset_list;
        for (const std::string & p : gen->presets()) {
            known_preset = known_preset || p == request.preset;
            preset_list += (preset_list.empty() ? "" : ", ") + p;
        }
        if (!known_preset) {
            throw tools::UsageError("--preset: unknown preset '" + request.preset + "' (" + preset_list + ")");
        }

        std::string output, ignored;
        int64_t seed = 0;
        tools::ArgParser p;
        p.text({"-o", "--output"}, &output);
        p.text({"--preset"}, &ignored);
        p.text({"--arch"}, &ignored);
        p.integer({"--seed"}, &seed, 0, INT64_MAX);
        p.text({"--type"}, &request.weight_type);
        for (const tools::GenOption & o : gen->options()) {
            const std::string flag = o.flag;
            std::vector<tools::GenSetting> * out = &request.settings;
            switch (o.kind) {
            case tools::GenOption::Kind::Flag:
                p.custom_flag({flag.c_str()}, [=] { out->push_back(setting(flag)); });
                break;
            case tools::GenOption::Kind::Integer:
                p.custom({flag.c_str()}, [=](const std::string & v) {
                    out->push_back(setting(flag, tools::parse_integer(flag, v, static_cast<int64_t>(o.lo), static_cast<int64_t>(o.hi))));
                });
                break;
            case tools::GenOption::Kind::Real:
                p.custom({flag.c_str()}, [=](const std::string & v) {
                    out->push_back(setting(flag, 0, tools::parse_real(flag, v, static_cast<float>(o.lo), static_cast<float>(o.hi))));
                });
                break;
            case tools::GenOption::Kind::Text:
                p.custom({flag.c_str()}, [=](const std::string & v) { out->push_back(setting(flag, 0, 0, v)); });
                break;
            }
        }
        if (!p.parse(args)) {
            std::fputs(usage().c_str(), stdout);
            return 0;
        }
        if (output.empty()) throw tools::UsageError("-o FILE is required");
        if (p.given("--seed")) request.seed = static_cast<uint64_t>(seed);
        std::unique_ptr<tools::GeneratedModel> model;
        try {
            model = gen->configure(request);
        } catch (const Error & e) {
            throw tools::UsageError(e.what());
        }
        model->write(output);
        std::printf("wrote %s: %s\n", output.c_str(), model->describe().c_str());
        return 0;
    });
}

}  // namespace

OFFGRID_COMMAND("gen-model", "write a deterministic random-weight GGUF model of a registered architecture", gen_model_main);

}  // namespace offgrid::cli
