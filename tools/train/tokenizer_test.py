#!/usr/bin/env python3
"""The engine tokenises text exactly as tools/train/bpe.py does, with the vocabulary stored in a GGUF.

  tokenizer_test.py --offgrid build/offgrid --model models/offgrid-speaks.gguf [--text FILE ...]

The Python side rebuilds its merge table from the GGUF (tokens and merges), so the check covers the file the
engine reads. Exits 77 (ctest's skip) with a message when python3-regex or the model is missing.
"""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import bpe
    import gguf_np
except ImportError as e:
    print(f"SKIP: {e} (install python3-regex and python3-numpy)")
    sys.exit(77)

SAMPLES = [
    "In the beginning God created the heaven and the earth.\n\nAnd the earth was without form, and void;",
    "It's what they'll do: I'd say we've 12,345 reasons -- don't you?  Yes!\r\n\tTabs\tand  spaces   ",
    "def f(x):\n    return {'a': [1, 2.5e-3]}  # comment\n\n\n>>> print(f'{x!r:>10}')\n",
    "Unicode: café, naïve, Straße, \u00e9\u0301, 日本語, emoji \U0001F600, mixed123abc, ALLCAPS, CamelCase.",
    "",
    " leading space and trailing newline\n",
    "aaaaaaa eeeeeeee ssssss lllll ===== ----- !!!!! ????? ........ ________ 0000000 1111 ~~~~",
    "IT'S WE'LL THEY'RE I'M YOU'VE SHE'D -- It'S mIxEd 'quoted' \"double\" (paren) [brack] {brace}",
    "thee thou thy thine hath doth saith unto shall shalt wilt begat Israel Jerusalem LORD lord Lord",
    "    indented\n\tand tabbed\n\n\n  \n trailing \r\n crlf and lone \r cr",
]


def tokenizer_from_gguf(path):
    meta, _ = gguf_np.read(path)
    texts = meta["tokenizer.ggml.tokens"]
    index = {t: i for i, t in enumerate(texts)}
    merges = []
    for m in meta["tokenizer.ggml.merges"]:
        sp = m.index(" ", 1)
        merges.append((index[m[:sp]], index[m[sp + 1:]]))
    tok = bpe.Tokenizer(merges)
    if tok.token_texts() != texts:
        raise SystemExit("FAIL: the GGUF's token list is not the one bpe.py builds from its merges")
    return tok


def engine_ids(offgrid, model, text):
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as fh:
        fh.write(text.encode("utf-8"))
    try:
        out = subprocess.run([offgrid, "tokenize", "-m", model, "-f", fh.name, "--ids", "--no-special"],
                             check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(fh.name)
    return [int(x) for x in out.split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--offgrid", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", nargs="*", default=[])
    a = ap.parse_args()
    if not os.path.isfile(a.model):
        print(f"SKIP: {a.model} is absent")
        return 77
    tok = tokenizer_from_gguf(a.model)
    samples = list(SAMPLES)
    for path in a.text:
        with open(path, encoding="utf-8") as fh:
            samples.append(fh.read())
    ok = True
    for s in samples:
        want, got = tok.encode(s), engine_ids(a.offgrid, a.model, s)
        same = want == got
        ok &= same
        print(f"{'ok  ' if same else 'FAIL'} {len(s)} chars, {len(want)} tokens: {s[:40]!r}")
        if not same:
            at = next((i for i, (x, y) in enumerate(zip(want, got)) if x != y), min(len(want), len(got)))
            print(f"     first difference at token {at}: python {want[at:at + 5]} engine {got[at:at + 5]}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
