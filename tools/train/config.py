"""The shipped model's shape: GGUF metadata and freshly initialised tensors for qwen4exp_torch.Qwen4Exp."""
import math

import numpy as np

ARCH = "qwen4exp"

SHAPE = dict(
    E=128, n_layer=4, attn_every=4, hc=2, hc_lr=16,
    H=4, Hkv=2, D=32, n_rot=16, sections=[3, 3, 2, 0],
    d_state=32, Hk=2, Hv=4, d_conv=4,
    Hi=4, Di=32, top_k=256, ratio=4,
    n_expert=8, n_used=2, n_ff_exp=256, n_ff_shexp=128,
    ple_n=3, ple_g=2, ple_kp=4, ple_vocab=[30011, 30013, 45061, 45077],
    ple_mult=[1, 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F],
    context_length=2048, eps=1e-6, rope_base=10000.0,
)


def metadata(n_vocab, eos, s=SHAPE, mtp=True):
    n_all = s["n_layer"] + (1 if mtp else 0)
    recr = [((i + 1) % s["attn_every"] != 0) for i in range(s["n_layer"])] + ([False] if mtp else [])
    ratios = [0 if r else s["ratio"] for r in recr[:s["n_layer"]]] + ([0] if mtp else [])
    hp = s["ple_n"] - 1
    offs = [int(sum(s["ple_vocab"][:h])) for h in range(hp * s["ple_g"])]
    a = lambda k: ARCH + "." + k
    return [
        ("general.architecture", ARCH), ("general.name", "offgrid-speaks"),
        (a("context_length"), s["context_length"]), (a("embedding_length"), s["E"]),
        (a("block_count"), n_all), (a("nextn_predict_layers"), 1 if mtp else 0),
        (a("expert_count"), s["n_expert"]), (a("expert_used_count"), s["n_used"]),
        (a("expert_feed_forward_length"), s["n_ff_exp"]), (a("expert_shared_feed_forward_length"), s["n_ff_shexp"]),
        (a("attention.head_count"), s["H"]), (a("attention.head_count_kv"), s["Hkv"]),
        (a("attention.key_length"), s["D"]), (a("attention.value_length"), s["D"]),
        (a("attention.layer_norm_rms_epsilon"), float(s["eps"])),
        (a("rope.dimension_count"), s["n_rot"]), (a("rope.freq_base"), float(s["rope_base"])),
        (a("rope.dimension_sections"), ("i32", s["sections"])),
        (a("ssm.conv_kernel"), s["d_conv"]), (a("ssm.inner_size"), s["d_state"] * s["Hv"]),
        (a("ssm.state_size"), s["d_state"]), (a("ssm.time_step_rank"), s["Hv"]), (a("ssm.group_count"), s["Hk"]),
        (a("hyper_connection.count"), s["hc"]), (a("hyper_connection.low_rank"), s["hc_lr"]),
        (a("attention.indexer.head_count"), s["Hi"]), (a("attention.indexer.key_length"), s["Di"]),
        (a("attention.indexer.top_k"), s["top_k"]),
        (a("attention.compress_ratios"), ("u32", ratios)),
        (a("attention.recurrent_layers"), recr),
        (a("ple.layers"), ("u32", [0])), (a("ple.ngram_size"), s["ple_n"]), (a("ple.heads_per_ngram"), s["ple_g"]),
        (a("ple.conv_kernel"), s["ple_kp"]), (a("ple.eos_token_id"), eos),
        (a("embedding_length_per_layer_input"), s["E"] // (hp * s["ple_g"])),
        (a("ple.layer_multipliers"), ("u64", s["ple_mult"])),
        (a("ple.head_offsets"), ("u64", offs)),
        (a("ple.head_vocab_sizes"), ("u64", s["ple_vocab"])),
    ]


def meta_dict(meta):
    """The reader's view of a metadata list (typed tuples unwrapped)."""
    return {k: (v[1] if isinstance(v, tuple) else v) for k, v in meta}


def init_tensors(n_vocab, s=SHAPE, mtp=True, seed=0):
    rng = np.random.default_rng(seed)
    E, hc = s["E"], s["hc"]
    n_all = s["n_layer"] + (1 if mtp else 0)
    std = 0.02
    out_std = std / math.sqrt(2 * n_all)
    nrm = lambda *shape, sd=std: (rng.standard_normal(shape) * sd).astype(np.float32)
    ones = lambda *shape: np.ones(shape, dtype=np.float32)
    t = {"token_embd.weight": nrm(n_vocab, E)}

    def hc_block(prefix, inject=True):
        t[prefix + "_norm.weight"] = ones(hc, E)
        t[prefix + "_down.weight"] = nrm(s["hc_lr"], hc * E)
        t[prefix + "_up.weight"] = np.zeros((hc * E, s["hc_lr"]), np.float32)
        if inject:
            t[prefix + "_inject.weight"] = np.zeros((hc, hc * E), np.float32)

    hc_block("output_hc", inject=False)
    hp = (s["ple_n"] - 1) * s["ple_g"]
    Dp = E // hp
    t["per_layer_token_embd.weight"] = nrm(sum(s["ple_vocab"]), Dp)
    H, Hkv, D = s["H"], s["Hkv"], s["D"]
    dk, Hk, Hv = s["d_state"], s["Hk"], s["Hv"]
    conv_dim = 2 * dk * Hk + dk * Hv
    for il in range(n_all):
        p = f"blk.{il}."
        hc_block(p + "hc_attn")
        hc_block(p + "hc_ffn")
        is_mtp = il == s["n_layer"]
        if is_mtp or (il + 1) % s["attn_every"] == 0:
            t[p + "attn_q.weight"] = nrm(2 * D * H, E)
            t[p + "attn_k.weight"] = nrm(D * Hkv, E)
            t[p + "attn_v.weight"] = nrm(D * Hkv, E)
            t[p + "attn_output.weight"] = nrm(E, D * H, sd=out_std)
            t[p + "attn_q_norm.weight"] = ones(D)
            t[p + "attn_k_norm.weight"] = ones(D)
            t[p + "indexer.q_proj.weight"] = nrm(s["Hi"] * s["Di"], E)
            t[p + "indexer.k_proj.weight"] = nrm(s["Di"], E)
            t[p + "indexer.q_norm.weight"] = ones(s["Di"])
            t[p + "indexer.k_norm.weight"] = ones(s["Di"])
        else:
            t[p + "attn_qkv.weight"] = nrm(conv_dim, E)
            t[p + "attn_gate.weight"] = nrm(dk * Hv, E)
            t[p + "ssm_conv1d.weight"] = (rng.uniform(-1, 1, (conv_dim, s["d_conv"])) / math.sqrt(s["d_conv"])).astype(np.float32)
            dt = np.exp(rng.uniform(math.log(1e-3), math.log(1e-1), Hv))
            t[p + "ssm_dt.bias"] = (dt + np.log(-np.expm1(-dt))).astype(np.float32)
            t[p + "ssm_alog"] = np.log(rng.uniform(1, 16, Hv)).astype(np.float32)
            t[p + "ssm_beta.weight"] = nrm(Hv, E)
            t[p + "ssm_alpha.weight"] = nrm(Hv, E)
            t[p + "ssm_norm.weight"] = ones(dk)
            t[p + "ssm_out.weight"] = nrm(E, dk * Hv, sd=out_std)
        if il == 0:
            t[p + "ple_key.weight"] = nrm(hc * E, E)
            t[p + "ple_value.weight"] = nrm(E, E, sd=out_std)
            for n in ("key", "query", "conv"):
                t[p + f"ple_norm_{n}.weight"] = ones(hc, E)
            t[p + "ple_conv1d.weight"] = nrm(hc * E, s["ple_kp"], sd=out_std)
        ne, nf, ns = s["n_expert"], s["n_ff_exp"], s["n_ff_shexp"]
        t[p + "ffn_gate_inp.weight"] = nrm(ne, E)
        t[p + "ffn_gate_exps.weight"] = nrm(ne, nf, E)
        t[p + "ffn_up_exps.weight"] = nrm(ne, nf, E)
        t[p + "ffn_down_exps.weight"] = nrm(ne, E, nf, sd=out_std)
        t[p + "ffn_gate_inp_shexp.weight"] = nrm(E)
        t[p + "ffn_gate_shexp.weight"] = nrm(ns, E)
        t[p + "ffn_up_shexp.weight"] = nrm(ns, E)
        t[p + "ffn_down_shexp.weight"] = nrm(E, ns, sd=out_std)
        if is_mtp:
            t[p + "nextn.enorm.weight"] = ones(E)
            t[p + "nextn.hnorm.weight"] = ones(hc * E)
            t[p + "nextn.eh_proj.weight"] = nrm(E, 2 * E)
            hc_block(p + "nextn.hc_head", inject=False)
    return t
