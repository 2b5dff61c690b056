// `offgrid gen-model`: writes a deterministic random-weight qwen4exp or glm5-next GGUF file from a preset and
// overrides.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/command.h"
#include "model/glm5next/gen_model.h"
#include "model/qwen4exp/gen_model.h"
#include "runtime/cli_args.h"
#include "runtime/default_model.h"

namespace offgrid::cli {

namespace {

constexpr const char * kUsage =
    "usage: offgrid gen-model -o FILE [--arch qwen4exp|glm5-next] [--preset NAME] [--seed N]\n"
    "                         [--type f32|f16|bf16|q8_0] [overrides...]\n"
    "\n"
    "Writes a qwen4exp GGUF file with deterministic random weights and the embedded byte-level vocabulary.\n"
    "The same arguments always give the same bytes.\n"
    "\n"
    "  -o, --output FILE     file to write (through a temporary file renamed into place)\n"
    "  --preset NAME         tiny (default; the built-in model of `offgrid run`), small, bench (a quick speed\n"
    "                        check, 128k context), scale (the speed figures' file: the real model's per-layer\n"
    "                        widths, 24 layers, 32 experts; 13 GB in bf16), bench-small (64k context)\n"
    "  --seed N              weight seed (default 1)\n"
    "  --type T              type of the large matrices: f32 (default), f16, bf16, q8_0; norms, small vectors,\n"
    "                        the router and conv kernels stay f32\n"
    "overrides (default: the preset's value):\n"
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
    "                        target's --mtp file give the same block)\n"
    "\n"
    "--arch glm5-next (presets tiny = the spec's section 7 configuration, tiny-dense = tiny with top_k 131072,\n"
    "small); overrides:\n"
    "  --layers STR  one letter per trunk layer: K (KDA), D (DSA, full indexer), S (DSA, shared indexer)\n"
    "  --n-ctx N  --n-embd N  --n-head N  --kda-head-dim N  --conv N  --q-lora N  --kv-lora N  --key-mla N\n"
    "  --value-mla N  --idx-heads N  --idx-dim N  --top-k N  --kpool N  --sinkhorn N  --n-ff N  --n-dense N\n"
    "  --n-expert N  --n-expert-used N  --n-ff-exp N  --weight-scale X\n"
    "  --dense-selection (top_k 131072)  --no-clamp (no swiglu_clamp keys)  --softplus-decay (no\n"
    "  kda.gate_lower_bound)  --mtp (append a NextN block)\n";

tensor::ElemType weight_type(const std::string & name) {
    if (name == "f32") return tensor::ElemType::F32;
    if (name == "f16") return tensor::ElemType::F16;
    if (name == "bf16") return tensor::ElemType::BF16;
    if (name == "q8_0") return tensor::ElemType::Q8_0;
    throw runtime::UsageError("--type: '" + name + "' is not one of f32, f16, bf16, q8_0");
}

int gen_glm5next(const std::vector<std::string> & args, const std::string & preset) {
    model::glm5next::GenConfig c;
    try {
        c = model::glm5next::gen_preset(preset);
    } catch (const Error & e) {
        throw runtime::UsageError(std::string("--preset: ") + e.what());
    }
    std::string output, type_name, ignored, layers;
    bool dense = false, no_clamp = false, softplus = false, mtp = false;
    int64_t seed = static_cast<int64_t>(c.seed);
    runtime::ArgParser p;
    p.text({"-o", "--output"}, &output);
    p.text({"--preset"}, &ignored);
    p.text({"--arch"}, &ignored);
    p.integer({"--seed"}, &seed, 0, INT64_MAX);
    p.text({"--type"}, &type_name);
    p.text({"--layers"}, &layers);
    p.flag({"--dense-selection"}, &dense);
    p.flag({"--no-clamp"}, &no_clamp);
    p.flag({"--softplus-decay"}, &softplus);
    p.flag({"--mtp"}, &mtp);
    auto u32 = [&](const char * name, uint32_t * field, int64_t lo, int64_t hi) {
        p.custom({name}, [=](const std::string & v) { *field = static_cast<uint32_t>(runtime::parse_integer(name, v, lo, hi)); });
    };
    u32("--n-ctx", &c.n_ctx, 1, 1 << 22);
    u32("--n-embd", &c.n_embd, 1, 16384);
    u32("--n-head", &c.n_head, 1, 256);
    u32("--kda-head-dim", &c.kda_head_dim, 1, 512);
    u32("--conv", &c.conv_kernel, 2, 64);
    u32("--q-lora", &c.q_lora_rank, 1, 8192);
    u32("--kv-lora", &c.kv_lora_rank, 1, 8192);
    u32("--key-mla", &c.key_mla, 1, 1024);
    u32("--value-mla", &c.value_mla, 1, 1024);
    u32("--idx-heads", &c.idx_heads, 1, 256);
    u32("--idx-dim", &c.idx_dim, 1, 1024);
    u32("--top-k", &c.top_k, 1, 1 << 24);
    u32("--kpool", &c.kpool, 2, 1024);
    u32("--sinkhorn", &c.sinkhorn_iterations, 1, 1000);
    u32("--n-ff", &c.n_ff, 1, 1 << 20);
    u32("--n-dense", &c.n_dense, 0, 256);
    u32("--n-expert", &c.n_expert, 1, 1024);
    u32("--n-expert-used", &c.n_expert_used, 1, 1024);
    u32("--n-ff-exp", &c.n_ff_exp, 1, 1 << 20);
    p.custom({"--weight-scale"}, [&](const std::string & v) { c.weight_scale = runtime::parse_real("--weight-scale", v, 1e-6f, 1e6f); });
    if (!p.parse(args)) {
        std::fputs(kUsage, stdout);
        return 0;
    }
    if (output.empty()) throw runtime::UsageError("-o FILE is required");
    c.seed = static_cast<uint64_t>(seed);
    if (!type_name.empty()) c.weight_type = weight_type(type_name);
    if (!layers.empty()) {
        c.layer_kinds.clear();
        c.indexer_types.clear();
        for (const char ch : layers) {
            if (ch != 'K' && ch != 'D' && ch != 'S') throw runtime::UsageError("--layers: letters K, D or S only");
            c.layer_kinds.push_back(ch == 'K' ? 0 : 1);
            c.indexer_types.push_back(ch == 'S' ? 0 : 1);
        }
    }
    if (dense) c.top_k = 131072;
    if (no_clamp) c.clamp = false;
    if (softplus) c.bounded_decay = false;
    if (mtp) c.nextn = true;
    try {
        model::glm5next::validate(c);
    } catch (const Error & e) {
        throw runtime::UsageError(e.what());
    }
    for (const auto & kv : runtime::byte_vocab_metadata()) {  // the file's vocabulary is the embedded one
        if (kv.key == "tokenizer.ggml.tokens") c.n_vocab = static_cast<uint32_t>(kv.value.array.size());
    }
    runtime::write_model_file(c, output);
    std::printf("wrote %s: %s\n", output.c_str(), model::glm5next::describe(c).c_str());
    return 0;
}

int gen_model_main(const std::vector<std::string> & args) {
    return runtime::run_with_usage("gen-model", [&]() -> int {
        std::string arch = "qwen4exp";
        for (size_t i = 0; i + 1 < args.size(); ++i) {
            if (args[i] == "--arch") arch = args[i + 1];
        }
        if (arch == "glm5-next") {
            std::string preset = "tiny";
            for (size_t i = 0; i + 1 < args.size(); ++i) {
                if (args[i] == "--preset") preset = args[i + 1];
            }
            return gen_glm5next(args, preset);
        }
        if (arch != "qwen4exp") throw runtime::UsageError("--arch: '" + arch + "' is not one of qwen4exp, glm5-next");
        // The preset comes first, so that overrides apply on top of it whatever their order.
        std::string preset = "tiny";
        for (size_t i = 0; i + 1 < args.size(); ++i) {
            if (args[i] == "--preset") preset = args[i + 1];
        }
        model::qwen4exp::GenConfig c;
        try {
            c = model::qwen4exp::gen_preset(preset);
        } catch (const Error & e) {
            throw runtime::UsageError(std::string("--preset: ") + e.what());
        }

        std::string output, type_name, ignored_preset;
        bool no_ple = false, mtp = false, mtp_only = false;
        int64_t seed = static_cast<int64_t>(c.seed);
        runtime::ArgParser p;
        p.text({"-o", "--output"}, &output);
        p.text({"--preset"}, &ignored_preset);
        p.text({"--arch"}, &ignored_preset);
        p.integer({"--seed"}, &seed, 0, INT64_MAX);
        p.text({"--type"}, &type_name);
        p.flag({"--no-ple"}, &no_ple);
        p.flag({"--mtp"}, &mtp);
        p.flag({"--mtp-only"}, &mtp_only);
        auto u32 = [&](const char * name, uint32_t * field, int64_t lo, int64_t hi) {
            p.custom({name}, [=](const std::string & v) { *field = static_cast<uint32_t>(runtime::parse_integer(name, v, lo, hi)); });
        };
        auto f32 = [&](const char * name, float * field, float lo, float hi) {
            p.custom({name}, [=](const std::string & v) { *field = runtime::parse_real(name, v, lo, hi); });
        };
        u32("--n-vocab", &c.n_vocab, 2, 1 << 20);
        u32("--n-ctx", &c.n_ctx, 1, 1 << 22);
        u32("--n-embd", &c.n_embd, 1, 65536);
        u32("--n-layer", &c.n_layer, 1, 512);
        u32("--attn-interval", &c.attn_interval, 1, 512);
        u32("--n-head", &c.n_head, 1, 1024);
        u32("--n-head-kv", &c.n_head_kv, 1, 1024);
        u32("--head-dim", &c.head_dim, 2, 1024);
        u32("--n-rot", &c.n_rot, 2, 1024);
        f32("--rope-base", &c.rope_base, 1e-3f, 1e12f);
        f32("--rms-eps", &c.rms_eps, 0.0f, 1.0f);
        u32("--n-expert", &c.n_expert, 1, 1024);
        u32("--n-expert-used", &c.n_expert_used, 1, 1024);
        u32("--n-ff-exp", &c.n_ff_exp, 1, 1 << 20);
        u32("--n-ff-shexp", &c.n_ff_shexp, 1, 1 << 20);
        u32("--ssm-conv", &c.ssm_d_conv, 1, 64);
        u32("--ssm-state", &c.ssm_d_state, 1, 1024);
        u32("--ssm-v-heads", &c.ssm_n_v_heads, 1, 1024);
        u32("--ssm-k-heads", &c.ssm_n_k_heads, 1, 1024);
        u32("--hc", &c.hc, 2, 64);
        u32("--hc-rank", &c.hc_lr, 1, 4096);
        u32("--qsa-ratio", &c.qsa_ratio, 0, 65536);
        u32("--top-k", &c.top_k, 1, 1 << 24);
        u32("--idx-heads", &c.idx_heads, 1, 1024);
        u32("--idx-dim", &c.idx_dim, 1, 4096);
        u32("--ple-ngram", &c.ple_ngram, 2, 8);
        u32("--ple-heads-per-ngram", &c.ple_heads_per_ngram, 1, 64);
        u32("--ple-conv", &c.ple_conv_kernel, 1, 64);
        u32("--ple-head-vocab", &c.ple_head_vocab, 1, 1 << 24);
        f32("--weight-scale", &c.weight_scale, 1e-6f, 1e6f);
        if (!p.parse(args)) {
            std::fputs(kUsage, stdout);
            return 0;
        }
        if (output.empty()) throw runtime::UsageError("-o FILE is required");
        c.seed = static_cast<uint64_t>(seed);
        if (!type_name.empty()) c.weight_type = weight_type(type_name);
        if (no_ple) c.ple = false;
        c.mtp = mtp || mtp_only;
        c.mtp_only = mtp_only;
        c = runtime::with_byte_vocab(c);
        try {
            model::qwen4exp::validate(c);
        } catch (const Error & e) {
            throw runtime::UsageError(e.what());
        }
        runtime::write_model_file(c, output);
        std::printf("wrote %s: %s\n", output.c_str(), model::qwen4exp::describe(c).c_str());
        return 0;
    });
}

}  // namespace

OFFGRID_COMMAND("gen-model", "write a deterministic random-weight qwen4exp or glm5-next GGUF model", gen_model_main);

}  // namespace offgrid::cli
