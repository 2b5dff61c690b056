#!/usr/bin/env python3
"""Byte-level BPE: training, encoding and the GGUF `gpt2` tokenizer metadata the engine reads.

The pre-tokenizer is the engine's `qwen2` split (src/runtime/unicode_split.h), so training, this encoder and the
engine see the same words. Ids: the 256 bytes first (in byte order), then one token per merge in merge order,
then the end-of-text control token. Token texts use GPT-2's byte-to-character table.

  bpe.py train --text train.txt --vocab 4096 --out vocab.json
  bpe.py encode --vocab vocab.json --text FILE          # prints ids, one line
"""
import argparse
import collections
import heapq
import json
import sys

import regex

QWEN2_SPLIT = regex.compile(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
EOT = "<|endoftext|>"


def byte_chars():
    """GPT-2's printable stand-in character for every byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_CHARS = byte_chars()


def words_of(text):
    return [w.encode("utf-8") for w in QWEN2_SPLIT.findall(text)]


def train(text, vocab_size):
    counts = collections.Counter(words_of(text))
    words = [list(w) for w in counts]
    freq = [counts[bytes(w)] for w in words]
    pair_count = collections.Counter()
    where = collections.defaultdict(set)
    for i, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += freq[i]
            where[(a, b)].add(i)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    n_merges = vocab_size - 256 - 1
    while len(merges) < n_merges and heap:
        c, p = heapq.heappop(heap)
        if pair_count.get(p, 0) != -c or c == 0:
            continue  # stale entry
        new_id = 256 + len(merges)
        merges.append(p)
        changed = collections.Counter()
        for i in list(where[p]):
            w = words[i]
            for a, b in zip(w, w[1:]):
                changed[(a, b)] -= freq[i]
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == p[0] and w[j + 1] == p[1]:
                    out.append(new_id)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for a, b in zip(out, out[1:]):
                changed[(a, b)] += freq[i]
                where[(a, b)].add(i)
        del where[p]
        for q, d in changed.items():
            if d:
                pair_count[q] += d
                if pair_count[q] > 0:
                    heapq.heappush(heap, (-pair_count[q], q))
        pair_count.pop(p, None)
    return merges


class Tokenizer:
    def __init__(self, merges):
        self.merges = [tuple(m) for m in merges]
        self.rank = {m: r for r, m in enumerate(self.merges)}
        self.pieces = [bytes([b]) for b in range(256)]
        for a, b in self.merges:
            self.pieces.append(self.pieces[a] + self.pieces[b])
        self.eot = len(self.pieces)
        self.cache = {}

    @property
    def n_vocab(self):
        return self.eot + 1

    def encode_word(self, w):
        got = self.cache.get(w)
        if got is not None:
            return got
        ids = list(w)
        while len(ids) > 1:
            best, at = None, -1
            for j in range(len(ids) - 1):  # lowest rank first, leftmost on equal rank
                r = self.rank.get((ids[j], ids[j + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, j
            if best is None:
                break
            ids[at:at + 2] = [256 + best]
        self.cache[w] = ids
        return ids

    def encode(self, text):
        out = []
        for w in words_of(text):
            out.extend(self.encode_word(w))
        return out

    def decode(self, ids):
        return b"".join(self.pieces[i] for i in ids if i != self.eot).decode("utf-8", errors="replace")

    def token_texts(self):
        return ["".join(BYTE_CHARS[b] for b in p) for p in self.pieces] + [EOT]

    def gguf_metadata(self):
        """(key, value) pairs for the GGUF writer; lists of str are string arrays, lists of int are i32 arrays."""
        texts = self.token_texts()
        merges = [texts[a] + " " + texts[b] for a, b in self.merges]
        types = [1] * (self.n_vocab - 1) + [3]  # normal ..., control
        return [("tokenizer.ggml.model", "gpt2"), ("tokenizer.ggml.pre", "qwen2"),
                ("tokenizer.ggml.tokens", texts), ("tokenizer.ggml.token_type", ("i32", types)),
                ("tokenizer.ggml.merges", merges), ("tokenizer.ggml.eos_token_id", ("u32", self.eot)),
                ("tokenizer.ggml.add_bos_token", False)]

    def save(self, path):
        with open(path, "w") as fh:
            json.dump({"merges": self.merges}, fh)

    @staticmethod
    def load(path):
        with open(path) as fh:
            return Tokenizer(json.load(fh)["merges"])


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--text", required=True)
    t.add_argument("--vocab", type=int, default=4096)
    t.add_argument("--out", required=True)
    e = sub.add_parser("encode")
    e.add_argument("--vocab", required=True)
    e.add_argument("--text", required=True)
    a = ap.parse_args()
    if a.cmd == "train":
        with open(a.text, encoding="utf-8") as fh:
            text = fh.read()
        Tokenizer(train(text, a.vocab)).save(a.out)
    else:
        tok = Tokenizer.load(a.vocab)
        with open(a.text, encoding="utf-8") as fh:
            print(" ".join(map(str, tok.encode(fh.read()))))


if __name__ == "__main__":
    sys.exit(main())
