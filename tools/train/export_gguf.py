#!/usr/bin/env python3
"""Writes a training checkpoint as a qwen4exp GGUF with its tokenizer and NextN block.

  export_gguf.py --run DIR --out model.gguf [--type f16|q8_0|f32] [--ckpt NAME]

Matrices take the chosen type; vectors, the GDN conv kernels, the routers and the PLE conv stay F32 (the
engine's rule for ssm_conv1d, and small enough not to matter).
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import config  # noqa: E402
import gguf_np  # noqa: E402

TYPES = {"f32": gguf_np.T_F32, "f16": gguf_np.T_F16, "q8_0": gguf_np.T_Q8_0}
KEEP_F32 = ("ssm_conv1d", "ple_conv1d", "ffn_gate_inp.weight", "norm")


def tensor_type(name, arr, wanted):
    if arr.ndim < 2 or any(k in name for k in KEEP_F32):
        return gguf_np.T_F32
    if wanted == gguf_np.T_Q8_0 and arr.shape[-1] % 32 != 0:
        return gguf_np.T_F16
    return wanted


def export(state, tok, out, kind="f16", mtp=True):
    """mtp=False leaves the NextN block out (llama.cpp v0.5.0 refuses files that carry it)."""
    meta = config.metadata(tok.n_vocab, tok.eot, mtp=mtp) + tok.gguf_metadata()
    mtp_prefix = f"blk.{config.SHAPE['n_layer']}."
    tensors = []
    for k, v in state.items():
        name = k.replace("~", ".")
        if not mtp and name.startswith(mtp_prefix):
            continue
        a = v.detach().float().numpy() if isinstance(v, torch.Tensor) else np.asarray(v, dtype=np.float32)
        if name.endswith(".ssm_alog"):
            name, a = name[:-len("alog")] + "a", -np.exp(a)
        tensors.append((name, a.astype(np.float32), tensor_type(name, a, TYPES[kind])))
    gguf_np.write(out, meta, tensors)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--type", default="f16", choices=sorted(TYPES))
    ap.add_argument("--no-mtp", action="store_true", help="leave the NextN block out")
    ap.add_argument("--ckpt", default="ckpt.pt", help="checkpoint file name in --run")
    a = ap.parse_args()
    tok = bpe.Tokenizer.load(os.path.join(a.run, "vocab.json"))
    ck = torch.load(os.path.join(a.run, a.ckpt))
    export(ck["model"], tok, a.out, a.type, mtp=not a.no_mtp)
    print(f"{a.out}: step {ck['step']}, {os.path.getsize(a.out)} bytes")


if __name__ == "__main__":
    main()
