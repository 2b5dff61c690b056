#!/usr/bin/env python3
"""Quality checks of a model in the engine (the figures of docs/quality.md).

  eval.py ppl   --offgrid BIN --model GGUF --train-ids DIR/train.u16.npy --text FILE [-c 1024] [-- extra args]
      the engine's perplexity over FILE next to a unigram model's over the same scored tokens (the unigram
      counts come from the training tokens, add-one smoothed over the vocabulary)
  eval.py words --offgrid BIN [--model GGUF] [-n 64] [--dict /usr/share/dict/words]
      greedy continuations of fixed prompts; the share of their words found in the dictionary
  eval.py mtp   --model GGUF --ids DIR/heldout.u16.npy [-c 1024] [--chunks 4]
      (PyTorch) the NextN head on held-out text: its t+2 cross-entropy and top-1 accuracy, the trunk's, and
      how often the head's greedy draft equals the trunk's greedy token one step later (the acceptance of a
      one-token greedy draft, teacher-forced)
"""
import argparse
import math
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_test  # noqa: E402  (the GGUF's tokenizer in Python)

# Written before looking at any output; none of them is a line of the corpus.
PROMPTS = ["The old man", "Once upon a time", "In the morning we", "She opened the door and", "The city was",
           "My friend told me that", "Water is", "When the king heard", "The best way to learn",
           "A list can be", "They walked along the river", "I think that"]


def engine_ppl(offgrid, model, text, ctx, extra):
    out = subprocess.run([offgrid, "perplexity", "-m", model, "-f", text, "-c", str(ctx)] + extra, check=True,
                         capture_output=True, text=True).stdout
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+) \((\d+) scored", out)
    return float(m.group(1)), float(m.group(2)), int(m.group(3))


def unigram_ppl(train_ids, tokens, ctx, n_vocab):
    counts = np.bincount(train_ids.astype(np.int64), minlength=n_vocab).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    scored = [t for b in range(0, len(tokens), ctx) for t in tokens[b + 1:b + ctx] if len(tokens[b:b + ctx]) >= 2]
    return math.exp(-float(np.mean(logp[np.array(scored)]))), len(scored)


def cmd_ppl(a, extra):
    tok = tokenizer_test.tokenizer_from_gguf(a.model)
    with open(a.text, encoding="utf-8") as fh:
        tokens = tok.encode(fh.read())
    ppl, err, n = engine_ppl(a.offgrid, a.model, a.text, a.ctx, extra)
    uni, n2 = unigram_ppl(np.load(a.train_ids), tokens, a.ctx, tok.n_vocab)
    print(f"{os.path.basename(a.text)}: {len(tokens)} tokens, engine ppl {ppl:.3f} +/- {err:.3f} over {n} tokens, "
          f"unigram ppl {uni:.3f} over {n2} tokens, ratio {ppl / uni:.4f}")


def cmd_words(a):
    with open(a.dict, encoding="utf-8", errors="replace") as fh:
        words = {w.strip().lower() for w in fh if w.strip()}
    total = found = 0
    for p in PROMPTS:
        args = [a.offgrid, "run", "-p", p, "-n", str(a.n), "--temp", "0"] + (["-m", a.model] if a.model else [])
        env = dict(os.environ)
        env.pop("OFFGRID_BUILTIN", None)
        text = subprocess.run(args, check=True, capture_output=True, text=True, env=env).stdout
        ws = re.findall(r"[A-Za-z]+", text)
        ok = [w for w in ws if w.lower() in words]
        total += len(ws)
        found += len(ok)
        print(f"{p!r} -> {text.strip()!r}\n    {len(ok)}/{len(ws)} dictionary words")
    print(f"dictionary words: {found}/{total} = {100.0 * found / max(total, 1):.1f} %")


def cmd_mtp(a):
    import torch
    import gguf_np
    import qwen4exp_torch as qt
    meta, ten = gguf_np.read(a.model)
    m = qt.Qwen4Exp(meta, ten, ten["token_embd.weight"].shape[0])
    ids = np.load(a.ids).astype(np.int64)
    stats = np.zeros(5)
    with torch.no_grad():
        for c in range(a.chunks):
            x = torch.from_numpy(ids[c * a.ctx:(c + 1) * a.ctx])[None]
            logits, X = m(x)
            d = m.mtp(X[:, :-1], x[:, 1:])                       # row t predicts token t+2
            lp = torch.log_softmax(logits[0, :-1], -1)
            lq = torch.log_softmax(d[0, :-1], -1)
            stats += [-lp.gather(1, x[0, 1:, None]).mean().item(), -lq.gather(1, x[0, 2:, None]).mean().item(),
                      (lp.argmax(-1) == x[0, 1:]).float().mean().item(), (lq.argmax(-1) == x[0, 2:]).float().mean().item(),
                      (lq.argmax(-1) == logits[0, 1:-1].argmax(-1)).float().mean().item()]
    s = stats / a.chunks
    print(f"trunk ce {s[0]:.4f} top-1 {100 * s[2]:.1f} %; NextN (t+2) ce {s[1]:.4f} top-1 {100 * s[3]:.1f} %; "
          f"draft = trunk greedy {100 * s[4]:.1f} % ({a.chunks} x {a.ctx} tokens)")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("ppl")
    p.add_argument("--offgrid", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--train-ids", required=True)
    p.add_argument("--text", required=True)
    p.add_argument("-c", "--ctx", type=int, default=1024)
    w = sub.add_parser("words")
    w.add_argument("--offgrid", required=True)
    w.add_argument("--model")
    w.add_argument("-n", type=int, default=64)
    w.add_argument("--dict", default="/usr/share/dict/words")
    t = sub.add_parser("mtp")
    t.add_argument("--model", required=True)
    t.add_argument("--ids", required=True)
    t.add_argument("-c", "--ctx", type=int, default=1024)
    t.add_argument("--chunks", type=int, default=4)
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    return cmd_ppl(a, extra) if a.cmd == "ppl" else cmd_words(a) if a.cmd == "words" else cmd_mtp(a)


if __name__ == "__main__":
    sys.exit(main())
