#include "model/qwen4exp/hparams.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <optional>

#include "common/error.h"
#include "model/common/gguf_access.h"

namespace offgrid::model::qwen4exp {

namespace {

using common::Keys;
using gguf::Value;
using gguf::ValueType;

const gguf::TensorInfo & require_tensor(const gguf::Reader & r, const std::string & name) {
    const gguf::TensorInfo * t = r.find_tensor(name);
    if (!t) throw Error(r.path() + ": tensor " + name + ": missing");
    return *t;
}

}  // namespace

uint32_t Hparams::n_attn_layers() const {
    return static_cast<uint32_t>(std::count(is_recurrent.begin(), is_recurrent.end(), false));
}

uint32_t Hparams::n_recr_layers() const {
    return static_cast<uint32_t>(std::count(is_recurrent.begin(), is_recurrent.end(), true));
}

Hparams load_hparams(const gguf::Reader & r, uint32_t borrowed_vocab) {
    Hparams hp;
    const std::string & arch = r.get_string("general.architecture");
    if (arch != "qwen4exp") {
        throw Error(r.path() + ": key general.architecture: \"" + arch + "\" is not supported (expected qwen4exp)");
    }
    const Keys k(r, arch + ".");

    hp.n_ctx_train = k.u32("context_length");
    hp.n_embd = k.positive("embedding_length");
    const uint32_t n_layer_all = k.u32("block_count");
    if (n_layer_all < 1 || n_layer_all > 512) k.fail("block_count", "must be in 1..512");
    const uint32_t n_nextn = k.u32_opt("nextn_predict_layers").value_or(0);
    if (n_nextn >= n_layer_all) k.fail("nextn_predict_layers", "leaves no trunk layer");
    hp.n_layer = n_layer_all - n_nextn;
    hp.n_nextn = n_nextn;

    if (borrowed_vocab > 0 && !r.find_tensor("token_embd.weight")) {
        hp.n_vocab = borrowed_vocab;  // an MTP-only file without its own tables
    } else {
        const gguf::TensorInfo & embd = require_tensor(r, "token_embd.weight");
        if (embd.ne.size() != 2 || embd.ne[1] <= 0 || embd.ne[1] > INT32_MAX) {
            throw Error(r.path() + ": tensor token_embd.weight: expected 2 dimensions {n_embd, n_vocab}");
        }
        hp.n_vocab = static_cast<uint32_t>(embd.ne[1]);
    }

    // Attention shapes.
    hp.n_head = k.uniform("attention.head_count", n_layer_all, false).value_or(0);
    if (hp.n_head == 0) k.fail("attention.head_count", "missing or 0");
    hp.n_head_kv = k.uniform("attention.head_count_kv", n_layer_all, false).value_or(hp.n_head);
    if (hp.n_head_kv == 0 || hp.n_head % hp.n_head_kv != 0) {
        k.fail("attention.head_count_kv", "must divide attention.head_count");
    }
    const uint32_t key_len = k.u32_opt("attention.key_length").value_or(hp.n_embd / hp.n_head);
    const uint32_t value_len = k.u32_opt("attention.value_length").value_or(hp.n_embd / hp.n_head);
    if (key_len == 0 || key_len != value_len) k.fail("attention.value_length", "must equal attention.key_length (> 0)");
    hp.head_dim = key_len;
    hp.n_rot = k.u32_opt("rope.dimension_count").value_or(hp.head_dim);
    if (hp.n_rot == 0 || hp.n_rot % 2 != 0 || hp.n_rot > hp.head_dim) {
        k.fail("rope.dimension_count", "must be even, > 0 and at most the head size");
    }
    hp.rope_freq_base = k.f32_opt("rope.freq_base").value_or(10000.0f);
    if (!(hp.rope_freq_base > 0.0f) || !std::isfinite(hp.rope_freq_base)) k.fail("rope.freq_base", "must be > 0");
    if (const Value * st = k.find("rope.scaling.type")) {
        if (st->type != ValueType::STRING) k.fail("rope.scaling.type", "expected a string");
        if (st->s == "yarn") k.fail("rope.scaling.type", "yarn is not supported");
        if (st->s == "linear") {
            const float factor = k.f32_opt("rope.scaling.factor").value_or(1.0f);
            if (!(factor > 0.0f) || !std::isfinite(factor)) k.fail("rope.scaling.factor", "must be > 0");
            hp.rope_freq_scale = 1.0f / factor;
        } else if (st->s != "none" && !st->s.empty()) {
            k.fail("rope.scaling.type", "\"" + st->s + "\" is not supported");
        }
    }
    hp.rope_attn_factor = k.f32_opt("rope.scaling.attn_factor").value_or(1.0f);
    {
        auto s = k.ints("rope.dimension_sections");
        if (!s) k.fail("rope.dimension_sections", "missing");
        if (s->size() == 1) s->resize(4, (*s)[0]);
        if (s->size() < 4) k.fail("rope.dimension_sections", "needs 4 entries");
        int64_t sum = 0;
        for (int i = 0; i < 4; ++i) {
            if ((*s)[i] < 0 || (*s)[i] > 65536) k.fail("rope.dimension_sections", "entry out of range");
            hp.rope_sections[i] = static_cast<int>((*s)[i]);
            sum += (*s)[i];
        }
        if (sum <= 0) k.fail("rope.dimension_sections", "sections sum to 0");
    }
    hp.rms_eps = k.f32("attention.layer_norm_rms_epsilon");
    if (!(hp.rms_eps >= 0.0f) || !std::isfinite(hp.rms_eps)) k.fail("attention.layer_norm_rms_epsilon", "must be >= 0");

    // MoE.
    hp.n_expert = k.u32_opt("expert_count").value_or(0);
    if (hp.n_expert == 0 || hp.n_expert > 1024) k.fail("expert_count", "must be in 1..1024");
    hp.n_expert_used = k.uniform("expert_used_count", n_layer_all, true).value_or(0);
    if (hp.n_expert_used == 0 || hp.n_expert_used > hp.n_expert) k.fail("expert_used_count", "must be in 1..expert_count");
    for (const char * key : {"expert_group_count", "expert_group_used_count"}) {
        if (k.u32_opt(key).value_or(0) > 1) k.fail(key, "expert groups are not supported");
    }
    const std::optional<uint32_t> n_ff = k.uniform("feed_forward_length", n_layer_all, true);
    hp.n_ff_exp = k.uniform("expert_feed_forward_length", n_layer_all, true)
                      .value_or(n_ff ? *n_ff / hp.n_expert_used : 0);
    hp.n_ff_shexp = k.u32_opt("expert_shared_feed_forward_length").value_or(n_ff.value_or(0));
    if (hp.n_ff_exp == 0) k.fail("expert_feed_forward_length", "missing or 0");
    if (hp.n_ff_shexp == 0) k.fail("expert_shared_feed_forward_length", "missing or 0");

    // Gated DeltaNet.
    hp.ssm_d_conv = k.positive("ssm.conv_kernel");
    hp.ssm_d_inner = k.positive("ssm.inner_size");
    hp.ssm_d_state = k.positive("ssm.state_size");
    hp.ssm_n_v_heads = k.positive("ssm.time_step_rank");
    hp.ssm_n_k_heads = k.positive("ssm.group_count");
    if (hp.ssm_n_v_heads % hp.ssm_n_k_heads != 0) k.fail("ssm.group_count", "must divide ssm.time_step_rank");
    if (static_cast<uint64_t>(hp.ssm_d_state) * hp.ssm_n_v_heads != hp.ssm_d_inner) {
        k.fail("ssm.inner_size", "must equal ssm.state_size * ssm.time_step_rank");
    }

    // Hyper-connections.
    hp.hc = k.u32("hyper_connection.count");
    if (hp.hc <= 1) k.fail("hyper_connection.count", "must be > 1");
    hp.hc_lr = k.positive("hyper_connection.low_rank");

    // Indexer.
    hp.idx_heads = k.positive("attention.indexer.head_count");
    hp.idx_dim = k.positive("attention.indexer.key_length");
    hp.idx_top_k = k.positive("attention.indexer.top_k");

    // Layer types.
    hp.is_recurrent.assign(hp.n_layer, false);
    if (auto rl = k.per_layer("attention.recurrent_layers", n_layer_all)) {
        for (uint32_t i = 0; i < hp.n_layer; ++i) hp.is_recurrent[i] = (*rl)[i] != 0;
    } else {
        const uint32_t interval = k.u32_opt("full_attention_interval").value_or(4);
        if (interval == 0) k.fail("full_attention_interval", "must be > 0");
        for (uint32_t i = 0; i < hp.n_layer; ++i) hp.is_recurrent[i] = (i + 1) % interval != 0;
    }
    hp.compress_ratio.assign(hp.n_layer, 0);
    if (auto cr = k.per_layer("attention.compress_ratios", n_layer_all)) {
        for (uint32_t i = 0; i < hp.n_layer; ++i) {
            if ((*cr)[i] < 0 || (*cr)[i] > 65536) k.fail("attention.compress_ratios", "entry out of range");
            hp.compress_ratio[i] = static_cast<uint32_t>((*cr)[i]);
        }
    }
    for (uint32_t i = 0; i < hp.n_layer; ++i) {
        if (!hp.is_qsa(i)) continue;
        // k-pool semantics: one pool size for the whole memory, and a budget of whole pools. Unlike the
        // k-pool reference we accept r = 1 (one-cell pools, no tail), which the golden models use.
        if (hp.kpool != 0 && hp.compress_ratio[i] != hp.kpool) {
            k.fail("attention.compress_ratios", "QSA layers must share one compress ratio");
        }
        hp.kpool = hp.compress_ratio[i];
    }
    if (hp.kpool > 0) {
        if (hp.idx_top_k % hp.kpool != 0) {
            k.fail("attention.indexer.top_k", "must be a multiple of the compress ratio " + std::to_string(hp.kpool));
        }
        if (hp.idx_dim < hp.n_rot) k.fail("attention.indexer.key_length", "must be >= rope.dimension_count");
    }

    // PLE.
    if (auto layers = k.ints("ple.layers")) {
        if (layers->size() != 1) k.fail("ple.layers", "must hold exactly one layer");
        const int64_t pl = (*layers)[0];
        if (pl < 0 || pl >= hp.n_layer) k.fail("ple.layers", "layer " + std::to_string(pl) + " out of range");
        if (!hp.is_recurrent[pl]) k.fail("ple.layers", "layer " + std::to_string(pl) + " is not a Gated DeltaNet layer");
        hp.has_ple = true;
        hp.ple_layer = static_cast<uint32_t>(pl);
        hp.ple_ngram = k.u32("ple.ngram_size");
        if (hp.ple_ngram < 2 || hp.ple_ngram > 8) k.fail("ple.ngram_size", "must be in 2..8");
        hp.ple_heads_per_ngram = k.u32("ple.heads_per_ngram");
        const uint64_t n_heads = static_cast<uint64_t>(hp.ple_ngram - 1) * hp.ple_heads_per_ngram;
        if (n_heads < 1 || n_heads > 64) k.fail("ple.heads_per_ngram", "gives a head count outside 1..64");
        hp.ple_conv_kernel = k.positive("ple.conv_kernel");
        hp.ple_eos = k.u32("ple.eos_token_id");
        hp.ple_dim = k.positive("embedding_length_per_layer_input");
        if (n_heads * hp.ple_dim != hp.n_embd) {
            k.fail("embedding_length_per_layer_input", "times the PLE head count must equal embedding_length");
        }
        // The PLE arrays are u64 in the file (the converter casts int64 checkpoint values), so the full unsigned
        // range must load: hash multipliers at or above 2^63 are ordinary.
        auto u64s = [&](std::string_view name, size_t need) {
            const Value * raw = k.find(name);
            if (!raw) k.fail(name, "missing");
            const std::vector<Value> scalar{raw->type == ValueType::ARRAY ? Value{} : *raw};
            const std::vector<Value> & elems = raw->type == ValueType::ARRAY ? raw->array : scalar;
            if (elems.size() < need) k.fail(name, "has " + std::to_string(elems.size()) + " entries, needs " + std::to_string(need));
            std::vector<uint64_t> out;
            for (size_t i = 0; i < need; ++i) {
                const Value & e = elems[i];
                switch (e.type) {
                    case ValueType::U8: case ValueType::U16: case ValueType::U32: case ValueType::U64:
                        out.push_back(e.u);
                        break;
                    case ValueType::I8: case ValueType::I16: case ValueType::I32: case ValueType::I64:
                        if (e.i < 0) k.fail(name, "negative entry");
                        out.push_back(static_cast<uint64_t>(e.i));
                        break;
                    default:
                        k.fail(name, std::string("expected integers, found ") + gguf::value_type_name(e.type));
                }
            }
            return out;
        };
        hp.ple_multipliers = u64s("ple.layer_multipliers", hp.ple_ngram);
        hp.ple_offsets = u64s("ple.head_offsets", n_heads);
        hp.ple_vocab_sizes = u64s("ple.head_vocab_sizes", n_heads);
        for (size_t h = 0; h < n_heads; ++h) {
            if (hp.ple_vocab_sizes[h] == 0) k.fail("ple.head_vocab_sizes", "entry " + std::to_string(h) + " is 0");
            if (hp.ple_offsets[h] > INT32_MAX || hp.ple_vocab_sizes[h] > INT32_MAX - hp.ple_offsets[h]) {
                k.fail("ple.head_offsets", "offset + vocab size of head " + std::to_string(h) + " exceeds INT32_MAX");
            }
        }
    }
    return hp;
}

}  // namespace offgrid::model::qwen4exp
