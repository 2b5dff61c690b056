#include "model/glm5next/generator.h"

#include <cstdint>
#include <memory>

#include "common/error.h"
#include "model/common/gen_support.h"
#include "models/model_generator.h"
#include "runtime/byte_vocab.h"

namespace offgrid::model::glm5next {

void write_model_file(GenConfig config, const std::string & path) {
    config.n_vocab = static_cast<uint32_t>(runtime::byte_vocab_spec().tokens.size());
    generate_model(config, runtime::byte_vocab_metadata()).write_file(path);  // atomic
}

namespace {

using tools::GenOption;
using Kind = GenOption::Kind;

// The numeric overrides: each sets one field of GenConfig.
struct Field {
    const char * flag;
    uint32_t GenConfig::*u32 = nullptr;
    float GenConfig::*f32 = nullptr;
    double lo = 0, hi = 0;
};

const std::vector<Field> & fields() {
    static const std::vector<Field> f{
        {"--n-ctx", &GenConfig::n_ctx, nullptr, 1, 1 << 22},
        {"--n-embd", &GenConfig::n_embd, nullptr, 1, 16384},
        {"--n-head", &GenConfig::n_head, nullptr, 1, 256},
        {"--kda-head-dim", &GenConfig::kda_head_dim, nullptr, 1, 512},
        {"--conv", &GenConfig::conv_kernel, nullptr, 2, 64},
        {"--q-lora", &GenConfig::q_lora_rank, nullptr, 1, 8192},
        {"--kv-lora", &GenConfig::kv_lora_rank, nullptr, 1, 8192},
        {"--key-mla", &GenConfig::key_mla, nullptr, 1, 1024},
        {"--value-mla", &GenConfig::value_mla, nullptr, 1, 1024},
        {"--idx-heads", &GenConfig::idx_heads, nullptr, 1, 256},
        {"--idx-dim", &GenConfig::idx_dim, nullptr, 1, 1024},
        {"--top-k", &GenConfig::top_k, nullptr, 1, 1 << 24},
        {"--kpool", &GenConfig::kpool, nullptr, 2, 1024},
        {"--sinkhorn", &GenConfig::sinkhorn_iterations, nullptr, 1, 1000},
        {"--n-ff", &GenConfig::n_ff, nullptr, 1, 1 << 20},
        {"--n-dense", &GenConfig::n_dense, nullptr, 0, 256},
        {"--n-expert", &GenConfig::n_expert, nullptr, 1, 1024},
        {"--n-expert-used", &GenConfig::n_expert_used, nullptr, 1, 1024},
        {"--n-ff-exp", &GenConfig::n_ff_exp, nullptr, 1, 1 << 20},
        {"--weight-scale", nullptr, &GenConfig::weight_scale, 1e-6f, 1e6f},
    };
    return f;
}

class Model final : public tools::GeneratedModel {
public:
    explicit Model(GenConfig c) : c_(std::move(c)) {}
    std::string describe() const override { return glm5next::describe(c_); }
    void write(const std::string & path) const override { write_model_file(c_, path); }

private:
    GenConfig c_;
};

class Generator final : public tools::ModelGenerator {
public:
    std::string arch() const override { return "glm5-next"; }
    const std::vector<std::string> & presets() const override { return gen_preset_names(); }
    const std::vector<GenOption> & options() const override {
        static const std::vector<GenOption> o = [] {
            std::vector<GenOption> out{{"--layers", Kind::Text}};
            for (const char * f : {"--dense-selection", "--no-clamp", "--softplus-decay", "--mtp"}) {
                out.push_back({f, Kind::Flag});
            }
            for (const Field & f : fields()) out.push_back({f.flag, f.u32 ? Kind::Integer : Kind::Real, f.lo, f.hi});
            return out;
        }();
        return o;
    }
    std::string usage() const override {
        return "--arch glm5-next (presets tiny = the spec's section 7 configuration, tiny-dense = tiny with top_k 131072,\n"
               "small); overrides:\n"
               "  --layers STR  one letter per trunk layer: K (KDA), D (DSA, full indexer), S (DSA, shared indexer)\n"
               "  --n-ctx N  --n-embd N  --n-head N  --kda-head-dim N  --conv N  --q-lora N  --kv-lora N  --key-mla N\n"
               "  --value-mla N  --idx-heads N  --idx-dim N  --top-k N  --kpool N  --sinkhorn N  --n-ff N  --n-dense N\n"
               "  --n-expert N  --n-expert-used N  --n-ff-exp N  --weight-scale X\n"
               "  --dense-selection (top_k 131072)  --no-clamp (no swiglu_clamp keys)  --softplus-decay (no\n"
               "  kda.gate_lower_bound)  --mtp (append a NextN block)\n";
    }
    std::unique_ptr<tools::GeneratedModel> configure(const tools::GenRequest & r) const override {
        GenConfig c = gen_preset(r.preset);
        std::string layers;
        bool dense = false, no_clamp = false, softplus = false, mtp = false;
        for (const tools::GenSetting & s : r.settings) {
            if (s.flag == "--layers") layers = s.text;
            else if (s.flag == "--dense-selection") dense = true;
            else if (s.flag == "--no-clamp") no_clamp = true;
            else if (s.flag == "--softplus-decay") softplus = true;
            else if (s.flag == "--mtp") mtp = true;
            for (const Field & f : fields()) {
                if (s.flag != f.flag) continue;
                if (f.u32) c.*f.u32 = static_cast<uint32_t>(s.integer);
                else c.*f.f32 = static_cast<float>(s.real);
            }
        }
        if (r.seed) c.seed = *r.seed;
        if (!r.weight_type.empty()) c.weight_type = common::gen_weight_type(r.weight_type);
        if (!layers.empty()) {
            c.layer_kinds.clear();
            c.indexer_types.clear();
            for (const char ch : layers) {
                if (ch != 'K' && ch != 'D' && ch != 'S') throw Error("--layers: letters K, D or S only");
                c.layer_kinds.push_back(ch == 'K' ? 0 : 1);
                c.indexer_types.push_back(ch == 'S' ? 0 : 1);
            }
        }
        if (dense) c.top_k = 131072;
        if (no_clamp) c.clamp = false;
        if (softplus) c.bounded_decay = false;
        if (mtp) c.nextn = true;
        validate(c);
        c.n_vocab = static_cast<uint32_t>(runtime::byte_vocab_spec().tokens.size());  // the file's vocabulary
        return std::make_unique<Model>(std::move(c));
    }
};

}  // namespace

const tools::ModelGenerator & generator() {
    static const Generator g;
    return g;
}

}  // namespace offgrid::model::glm5next
