#include "model/qwen4exp/generator.h"

#include <algorithm>
#include <cstdint>
#include <memory>

#include "common/error.h"
#include "model/common/gen_support.h"
#include "models/model_generator.h"
#include "runtime/byte_vocab.h"

namespace offgrid::model::qwen4exp {

GenConfig with_byte_vocab(GenConfig config) {
    const runtime::TokenizerSpec & spec = runtime::byte_vocab_spec();
    config.n_vocab = std::max(config.n_vocab, static_cast<uint32_t>(spec.tokens.size()));
    config.eos_token = static_cast<uint32_t>(spec.eos.value_or(0));
    return config;
}

void write_model_file(const GenConfig & config, const std::string & path) {
    const GenConfig c = with_byte_vocab(config);
    generate_model(c, runtime::byte_vocab_metadata(c.n_vocab)).write_file(path);  // atomic
}

namespace {

using tools::GenOption;
using Kind = GenOption::Kind;

// The overrides: each sets one field of GenConfig.
struct Field {
    const char * flag;
    uint32_t GenConfig::*u32 = nullptr;
    float GenConfig::*f32 = nullptr;
    double lo = 0, hi = 0;
};

const std::vector<Field> & fields() {
    static const std::vector<Field> f{
        {"--n-vocab", &GenConfig::n_vocab, nullptr, 2, 1 << 20},
        {"--n-ctx", &GenConfig::n_ctx, nullptr, 1, 1 << 22},
        {"--n-embd", &GenConfig::n_embd, nullptr, 1, 65536},
        {"--n-layer", &GenConfig::n_layer, nullptr, 1, 512},
        {"--attn-interval", &GenConfig::attn_interval, nullptr, 1, 512},
        {"--n-head", &GenConfig::n_head, nullptr, 1, 1024},
        {"--n-head-kv", &GenConfig::n_head_kv, nullptr, 1, 1024},
        {"--head-dim", &GenConfig::head_dim, nullptr, 2, 1024},
        {"--n-rot", &GenConfig::n_rot, nullptr, 2, 1024},
        {"--rope-base", nullptr, &GenConfig::rope_base, 1e-3f, 1e12f},
        {"--rms-eps", nullptr, &GenConfig::rms_eps, 0.0f, 1.0f},
        {"--n-expert", &GenConfig::n_expert, nullptr, 1, 1024},
        {"--n-expert-used", &GenConfig::n_expert_used, nullptr, 1, 1024},
        {"--n-ff-exp", &GenConfig::n_ff_exp, nullptr, 1, 1 << 20},
        {"--n-ff-shexp", &GenConfig::n_ff_shexp, nullptr, 1, 1 << 20},
        {"--ssm-conv", &GenConfig::ssm_d_conv, nullptr, 1, 64},
        {"--ssm-state", &GenConfig::ssm_d_state, nullptr, 1, 1024},
        {"--ssm-v-heads", &GenConfig::ssm_n_v_heads, nullptr, 1, 1024},
        {"--ssm-k-heads", &GenConfig::ssm_n_k_heads, nullptr, 1, 1024},
        {"--hc", &GenConfig::hc, nullptr, 2, 64},
        {"--hc-rank", &GenConfig::hc_lr, nullptr, 1, 4096},
        {"--qsa-ratio", &GenConfig::qsa_ratio, nullptr, 0, 65536},
        {"--top-k", &GenConfig::top_k, nullptr, 1, 1 << 24},
        {"--idx-heads", &GenConfig::idx_heads, nullptr, 1, 1024},
        {"--idx-dim", &GenConfig::idx_dim, nullptr, 1, 4096},
        {"--ple-ngram", &GenConfig::ple_ngram, nullptr, 2, 8},
        {"--ple-heads-per-ngram", &GenConfig::ple_heads_per_ngram, nullptr, 1, 64},
        {"--ple-conv", &GenConfig::ple_conv_kernel, nullptr, 1, 64},
        {"--ple-head-vocab", &GenConfig::ple_head_vocab, nullptr, 1, 1 << 24},
        {"--weight-scale", nullptr, &GenConfig::weight_scale, 1e-6f, 1e6f},
    };
    return f;
}

class Model final : public tools::GeneratedModel {
public:
    explicit Model(GenConfig c) : c_(std::move(c)) {}
    std::string describe() const override { return qwen4exp::describe(c_); }
    void write(const std::string & path) const override { write_model_file(c_, path); }

private:
    GenConfig c_;
};

class Generator final : public tools::ModelGenerator {
public:
    std::string arch() const override { return "qwen4exp"; }
    const std::vector<std::string> & presets() const override { return gen_preset_names(); }
    const std::vector<GenOption> & options() const override {
        static const std::vector<GenOption> o = [] {
            std::vector<GenOption> out;
            for (const char * f : {"--no-ple", "--mtp", "--mtp-only"}) out.push_back({f, Kind::Flag});
            for (const Field & f : fields()) out.push_back({f.flag, f.u32 ? Kind::Integer : Kind::Real, f.lo, f.hi});
            return out;
        }();
        return o;
    }
    std::string usage() const override {
        return "--arch qwen4exp (presets tiny = the random built-in model, OFFGRID_BUILTIN=tiny; small; bench (a quick\n"
               "speed check, 128k context); scale (the speed figures' file: the real model's per-layer widths, 24\n"
               "layers, 32 experts; 13 GB in bf16); bench-small (64k context)); overrides (default: the preset's):\n"
               "  --n-vocab N (rows of the embedding and the head; ids past the byte vocabulary are unused tokens)\n"
               "  --n-ctx N  --n-embd N  --n-layer N  --attn-interval N (every N-th layer is full attention)\n"
               "  --n-head N  --n-head-kv N  --head-dim N  --n-rot N  --rope-base X  --rms-eps X\n"
               "  --n-expert N  --n-expert-used N  --n-ff-exp N  --n-ff-shexp N\n"
               "  --ssm-conv N  --ssm-state N  --ssm-v-heads N  --ssm-k-heads N  --hc N  --hc-rank N\n"
               "  --qsa-ratio N (0 = dense attention)  --top-k N  --idx-heads N  --idx-dim N\n"
               "  --no-ple  --ple-ngram N  --ple-heads-per-ngram N  --ple-conv N  --ple-head-vocab N\n"
               "  --weight-scale X      multiplies the standard deviation of every random matrix (default 1)\n"
               "  --mtp                 append a NextN (MTP) draft block (--spec-type draft-mtp)\n"
               "  --mtp-only            write only that block (an MTP-only file for -md; same --seed and sizes as the\n"
               "                        target's --mtp file give the same block)\n";
    }
    std::unique_ptr<tools::GeneratedModel> configure(const tools::GenRequest & r) const override {
        GenConfig c = gen_preset(r.preset);
        bool no_ple = false, mtp = false, mtp_only = false;
        for (const tools::GenSetting & s : r.settings) {
            if (s.flag == "--no-ple") no_ple = true;
            else if (s.flag == "--mtp") mtp = true;
            else if (s.flag == "--mtp-only") mtp_only = true;
            for (const Field & f : fields()) {
                if (s.flag != f.flag) continue;
                if (f.u32) c.*f.u32 = static_cast<uint32_t>(s.integer);
                else c.*f.f32 = static_cast<float>(s.real);
            }
        }
        if (r.seed) c.seed = *r.seed;
        if (!r.weight_type.empty()) c.weight_type = common::gen_weight_type(r.weight_type);
        if (no_ple) c.ple = false;
        c.mtp = mtp || mtp_only;
        c.mtp_only = mtp_only;
        c = with_byte_vocab(c);
        validate(c);
        return std::make_unique<Model>(std::move(c));
    }
};

}  // namespace

const tools::ModelGenerator & generator() {
    static const Generator g;
    return g;
}

}  // namespace offgrid::model::qwen4exp
