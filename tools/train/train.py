#!/usr/bin/env python3
"""Trains the built-in qwen4exp on the corpus (next token, NextN t+2 head, DSA-style indexer KL).

  train.py --run DIR [--resume] [--steps N] [--batch B] [--ctx T] [--threads 2]
           [--ckpt NAME] [--from-ckpt PATH --phase-start S --lr PEAK]

DIR holds vocab.json and corpus/{train,heldout}.txt (see README.md); the tokenised corpus, checkpoints
(DIR/NAME, ckpt.pt by default, written atomically every --ckpt-every steps) and the log go there too. --resume
continues from DIR/NAME with its optimiser state, step and data position.

A further phase starts from another checkpoint with --from-ckpt PATH (weights, optimiser state, step) and a
cosine schedule of its own: warm-up from step --phase-start, peak --lr, decay to --lr-floor x --lr at --steps.
When the training tokens differ from those the checkpoint was trained on, the data position (the window
sampler's state) starts afresh. An interrupted phase resumes with the same command plus --resume.
"""
import argparse
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import config  # noqa: E402
import qwen4exp_torch as qt  # noqa: E402


def tokenised(run, split, tok):
    path = os.path.join(run, f"{split}.u16.npy")
    if not os.path.exists(path):
        with open(os.path.join(run, "corpus", f"{split}.txt"), encoding="utf-8") as fh:
            docs = fh.read().split("\n\n")
        ids = []
        for d in docs:
            ids.extend(tok.encode(d + "\n"))
            ids.append(tok.eot)
        np.save(path + ".tmp.npy", np.array(ids, dtype=np.uint16))
        os.replace(path + ".tmp.npy", path)
    return np.load(path)


def data_fingerprint(ids):
    """Identifies a token file cheaply: its length and a sum over a fixed stride."""
    return [int(len(ids)), int(ids[::997].astype(np.int64).sum())]


def learning_rate(step, a):
    """Cosine from --lr (after a linear warm-up) down to --lr-floor x --lr, over the steps --phase-start..--steps."""
    t = step - a.phase_start
    warm = min(1.0, (t + 1) / a.warmup)
    return a.lr * warm * (a.lr_floor + (1 - a.lr_floor) * 0.5 * (1 + math.cos(math.pi * t / (a.steps - a.phase_start))))


def build(tok, state=None):
    meta = config.metadata(tok.n_vocab, tok.eot)
    tensors = config.init_tensors(tok.n_vocab) if state is None else {k.replace("~", "."): v for k, v in state.items()}
    m = qt.Qwen4Exp(config.meta_dict(meta), tensors, tok.n_vocab)
    return m, meta


def losses(model, batch, mtp_weight=0.3, balance_weight=0.01, mtp_rows=512):
    x, y1, y2 = batch[:, :-2], batch[:, 1:-1], batch[:, 2:]
    logits, X = model(x, indexer_loss=True)
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y1.reshape(-1))
    kl = torch.stack(model.indexer_kl).mean() if model.indexer_kl else torch.zeros(())
    # The NextN head trains on the first rows of the first sequence only: a third of the step's cost otherwise.
    n = min(mtp_rows, x.shape[1])
    mlog = model.mtp(X[:1, :n], y1[:1, :n])
    ce2 = F.cross_entropy(mlog.reshape(-1, mlog.shape[-1]), y2[:1, :n].reshape(-1))
    bal = torch.stack(model.balance).mean()
    return ce, ce2, kl, bal, ce + mtp_weight * ce2 + balance_weight * bal + kl


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--ckpt", default="ckpt.pt", help="checkpoint file name in --run (written, and read by --resume)")
    ap.add_argument("--from-ckpt", help="start a new phase from this checkpoint (ignored with --resume)")
    ap.add_argument("--phase-start", type=int, default=0, help="step where this phase's cosine schedule begins")
    ap.add_argument("--lr-floor", type=float, default=0.1, help="the schedule's final lr as a fraction of --lr")
    a = ap.parse_args()
    if not a.phase_start < a.steps:
        ap.error("--phase-start must be below --steps")
    torch.set_num_threads(a.threads)
    tok = bpe.Tokenizer.load(os.path.join(a.run, "vocab.json"))
    train_ids = tokenised(a.run, "train", tok)
    held_ids = tokenised(a.run, "heldout", tok)
    ckpt_path = os.path.join(a.run, a.ckpt)
    fingerprint = data_fingerprint(train_ids)
    step, rng_state, ck = 0, None, None
    if a.resume or a.from_ckpt:
        ck = torch.load(ckpt_path if a.resume else a.from_ckpt)
        model, meta = build(tok, ck["model"])
        step, rng_state = ck["step"], ck["rng"]
        if ck.get("data") != fingerprint:
            print(f"training tokens differ from the checkpoint's: data position reset at step {step}", flush=True)
            rng_state = np.random.default_rng(1234 + step).bit_generator.state
    else:
        model, meta = build(tok)
    decay = [p for n, p in model.p.items() if p.dim() >= 2 and "norm" not in n]
    rest = [p for n, p in model.p.items() if not (p.dim() >= 2 and "norm" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    if ck is not None:
        opt.load_state_dict(ck["opt"])
    rng = np.random.default_rng(1234)
    if rng_state is not None:
        rng.bit_generator.state = rng_state
    n_params = sum(p.numel() for p in model.p.values())
    print(f"params {n_params} train tokens {len(train_ids)} heldout tokens {len(held_ids)} start step {step}",
          flush=True)
    L = a.ctx + 2
    t_last, tok_count = time.time(), 0
    while step < a.steps:
        lr = learning_rate(step, a)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = rng.integers(0, len(train_ids) - L, a.batch)
        batch = torch.from_numpy(np.stack([train_ids[s:s + L].astype(np.int64) for s in starts]))
        ce, ce2, kl, bal, loss = losses(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tok_count += a.batch * a.ctx
        if step % 10 == 0:
            dt = time.time() - t_last
            print(f"step {step} lr {lr:.2e} ce {ce.item():.4f} mtp {ce2.item():.4f} idx_kl {kl.item():.4f} "
                  f"bal {bal.item():.3f} tok/s {tok_count / dt:.0f}", flush=True)
            t_last, tok_count = time.time(), 0
        if step % a.eval_every == 0 or step == a.steps:
            model.eval()
            with torch.no_grad():
                hs = np.random.default_rng(7).integers(0, len(held_ids) - L, 4)
                hb = torch.from_numpy(np.stack([held_ids[s:s + L].astype(np.int64) for s in hs]))
                hce = losses(model, hb)[0].item()
            model.train()
            print(f"eval step {step} heldout_ce {hce:.4f} ppl {math.exp(hce):.2f}", flush=True)
        if step % a.ckpt_every == 0 or step == a.steps:
            state = {"model": {k: v.detach().clone() for k, v in model.p.items()}, "opt": opt.state_dict(),
                     "step": step, "rng": rng.bit_generator.state, "data": fingerprint}
            torch.save(state, ckpt_path + ".tmp")
            os.replace(ckpt_path + ".tmp", ckpt_path)


if __name__ == "__main__":
    main()
