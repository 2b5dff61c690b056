#!/usr/bin/env python3
"""The PyTorch qwen4exp against the engine: logits of `offgrid replay` equal qwen4exp_torch's within 1e-4.

  reference_test.py --offgrid build/offgrid [--shared ../shared]

Cases: the golden models on their single-sequence workloads (also checked against the golden records), and
a random model of the shipped shape (QSA ratio 4, top_k 256) over 1200 tokens, so that whole-pool selection
plus tail (spec 5.5) decides most rows. Exits 77 (ctest's skip code) with a message when torch is missing;
the golden cases are skipped with a message when ../shared is absent.
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:  # the engine's tests must not need torch
    print(f"SKIP: {e} (install python3-torch to run the PyTorch reference test)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import config  # noqa: E402
import gguf_np  # noqa: E402
import qwen4exp_torch as qt  # noqa: E402

ATOL = 1e-4
GOLDEN = [("tiny-dense", "01_smoke"), ("tiny-dense", "02_seq_batch"), ("tiny-r1", "02_seq_batch"),
          ("tiny-nople-r1", "02_seq_batch"), ("long-r1", "01_smoke"), ("long-r1", "14_long_chunks")]


def read_logrec(path):
    with open(path, "rb") as fh:
        d = fh.read()
    if d[:8] != b"LOGREC01":
        raise ValueError(path + ": not a LOGREC01 record")
    V = struct.unpack_from("<i", d, 8)[0]
    rows, o = [], 16
    while o < len(d):
        _, seq, pos, tok = struct.unpack_from("<4i", d, o)
        o += 16
        rows.append((seq, pos, tok, np.frombuffer(d, dtype="<f4", count=V, offset=o)))
        o += 4 * V
    return rows


def replay(offgrid, model, script_text, workdir):
    script = os.path.join(workdir, "script.txt")
    with open(script, "w") as fh:
        fh.write(script_text)
    out = os.path.join(workdir, "out.bin")
    subprocess.run([offgrid, "replay", model, script, "-b", out], check=True, cwd=workdir,
                   stdout=subprocess.DEVNULL)
    return read_logrec(out)


def torch_logits(meta, tensors, tokens):
    m = qt.Qwen4Exp(meta, tensors, tensors["token_embd.weight"].shape[0]).double()
    with torch.no_grad():
        logits, _ = m(torch.tensor([tokens]))
    return logits[0].numpy()


def compare(label, rows, logits):
    got = np.stack([r[3] for r in rows]).astype(np.float64)
    diff = float(np.abs(got - logits).max())
    same_argmax = bool((got.argmax(-1) == logits.argmax(-1)).all())
    ok = diff <= ATOL and same_argmax
    print(f"{'ok  ' if ok else 'FAIL'} {label}: {len(rows)} rows, max |diff| {diff:.3g}, argmax "
          f"{'equal' if same_argmax else 'DIFFERS'}")
    return ok


def single_sequence_tokens(rows):
    if [r[1] for r in rows] != list(range(len(rows))) or any(r[0] != 0 for r in rows):
        raise ValueError("expected one sequence with a row for every position")
    return [r[2] for r in rows]


def shipped_shape_case(offgrid, workdir):
    """A random model of the shipped shape; zero-initialised tensors get noise so every path carries signal."""
    n_vocab, eos = 512, 511
    meta_list = config.metadata(n_vocab, eos)
    tensors = config.init_tensors(n_vocab, seed=5)
    rng = np.random.default_rng(6)
    for k, v in tensors.items():
        if k.endswith(".ssm_alog"):
            continue
        tensors[k] = (v + rng.standard_normal(v.shape).astype(np.float32) * (0.05 if "norm" not in k else 0.2))
    for k in [k for k in tensors if k.endswith(".ssm_alog")]:
        tensors[k[:-len("alog")] + "a"] = -np.exp(tensors.pop(k))
    # The engine needs a tokenizer: a byte-free toy vocabulary is enough for replay (ids only).
    tok_meta = [("tokenizer.ggml.model", "gpt2"), ("tokenizer.ggml.pre", "qwen2"),
                ("tokenizer.ggml.tokens", [f"t{i}" for i in range(n_vocab)]),
                ("tokenizer.ggml.merges", []), ("tokenizer.ggml.eos_token_id", ("u32", eos))]
    path = os.path.join(workdir, "shipped-shape.gguf")
    gguf_np.write(path, meta_list + tok_meta, [(k, v, gguf_np.T_F32) for k, v in tensors.items()])
    tokens = [int(t) for t in rng.integers(0, n_vocab - 1, 1200)]
    tokens[500] = eos
    script = "set fa off\nset type_k f32\nset type_v f32\nset n_ctx 2048\n"
    script += "decode-chunks 300 0 " + " ".join(map(str, tokens)) + "\n"
    rows = replay(offgrid, path, script, workdir)
    meta, ten = gguf_np.read(path)
    return compare("shipped shape (ratio 4, top_k 256), 1200 tokens", rows, torch_logits(meta, ten, tokens))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--offgrid", required=True)
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared"))
    a = ap.parse_args()
    a.offgrid = os.path.abspath(a.offgrid)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        ok &= shipped_shape_case(a.offgrid, tmp)
        golden = os.path.join(a.shared, "golden")
        if not os.path.isdir(golden):
            print(f"SKIP golden cases: {golden} is absent")
        for model, workload in GOLDEN if os.path.isdir(golden) else []:
            with open(os.path.join(golden, "workloads", workload + ".txt")) as fh:
                script = fh.read()
            path = os.path.join(golden, "models", model + ".gguf")
            rows = replay(a.offgrid, path, script, tmp)
            expected = read_logrec(os.path.join(golden, "expected", f"{model}__{workload}.bin"))
            meta, ten = gguf_np.read(path)
            logits = torch_logits(meta, ten, single_sequence_tokens(rows))
            ok &= compare(f"{model} {workload} vs offgrid", rows, logits)
            ok &= compare(f"{model} {workload} vs golden record", expected, logits)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
