#!/usr/bin/env python3
"""Writes tests/runtime/data/split_vectors.txt: random texts split by the qwen2 / qwen35 pre-tokenizer regular
expressions, as a real regex engine (the `regex` module, python3-regex) splits them. The C++ splitters are
hand-written scans, so this is an independent reference for them.

Usage: python3 tools/gen_split_vectors.py > tests/runtime/data/split_vectors.txt

Line format: PRE TEXT_HEX PIECE_HEX|PIECE_HEX|...  (UTF-8 bytes in hex; '-' for an empty text / no pieces).
Code points that no alternative matches become pieces of their own, as in llama.cpp.
The pieces below only use characters whose categories are the same in Unicode 14 (our tables) and later.
"""
import random
import sys

import regex

PATTERNS = {
    'qwen2': r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
             r"|\s+(?!\S)|\s+",
    'qwen35': r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+",
}

PIECES = ["a", "Z", "word", " ", "  ", "\t", "\n", "\r\n", "\r", "'s", "'LL", "'", "'re", "'Ve", "7", "42", "!",
          "...", "(", "\u00e9", "e\u0301", "\u0301", "\u6211", "\U0001F999", "\u3000", "\u00a0", "\u00bd",
          "\uff5e", "\u1780", "\u17b6", "\u200b", "\x0b", "\x1c", "-", "$", "\u00df", "\u0130", "\u2028", "\u0085"]


def split(pattern, text):
    pieces, pos = [], 0
    for m in pattern.finditer(text):
        pieces.extend(text[pos:m.start()])
        pieces.append(m.group())
        pos = m.end()
    pieces.extend(text[pos:])
    return pieces


def main():
    rng = random.Random(20261130)
    texts = [''.join(rng.choice(PIECES) for _ in range(rng.randint(0, 10))) for _ in range(300)]
    out = sys.stdout
    for name, source in PATTERNS.items():
        pattern = regex.compile(source)
        for text in texts:
            pieces = split(pattern, text)
            out.write('%s %s %s\n' % (name, text.encode().hex() or '-',
                                      '|'.join(p.encode().hex() for p in pieces) or '-'))


if __name__ == '__main__':
    main()
