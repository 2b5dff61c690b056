#!/usr/bin/env python3
"""Checks of the training pipeline's pure parts: the corpus filter that keeps licence and evaluation text out,
and the learning-rate schedule of a training phase. Exit 77 (skip) when numpy or torch is missing for the
schedule part; the filter part needs only the standard library.
"""
import math
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "corpus"))
import debian_prose  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def filter_cases():
    licence = ("This program is distributed in the hope that it will be useful, but WITHOUT ANY WARRANTY; "
               "without even the implied warranty of fitness for a particular purpose.")
    forbidden = debian_prose.shingles("Lorem: " + licence.replace("WITHOUT ANY WARRANTY;", "with no promise;"))
    doc = "\n".join([
        "A line about packages that stays.",
        "This program is distributed in the",     # a forbidden run cut over two short lines
        "hope that it will be useful,",
        "Another line that stays, about the hope of users.",
        "Software comes WITHOUT ANY WARRANTY here, a licence marker.",
    ])
    kept, dropped = debian_prose.drop_overlaps(doc, forbidden)
    check(kept.split("\n") == ["A line about packages that stays.", "Another line that stays, about the hope of users."],
          f"drop_overlaps kept {kept!r}")
    check(dropped == 3, f"drop_overlaps dropped {dropped} lines, not 3")
    # Seven shared words are not a run of eight.
    kept, dropped = debian_prose.drop_overlaps("it is distributed in the hope that it may help", forbidden)
    check(dropped == 0, "a 7-word overlap was dropped")


def unwrap_cases():
    text = ("A paragraph of prose that was wrapped by the renderer at a fixed\n"
            "column, so its lines must be joined with spaces again.\n\n"
            "  $ apt-get install foo\n  $ foo --help\n")
    out = debian_prose.unwrap(text).split("\n")
    check(out[0].endswith("fixed column, so its lines must be joined with spaces again."), f"unwrap: {out[0]!r}")
    check(out[1:] == ["$ apt-get install foo", "$ foo --help"], f"unwrap kept code lines as {out[1:]!r}")


def schedule_cases():
    try:
        import train
    except ImportError as e:
        print(f"schedule checks skipped: {e}")
        return False
    a = types.SimpleNamespace(lr=1e-3, warmup=20, phase_start=1400, steps=2400, lr_floor=0.1)
    lr = [train.learning_rate(s, a) for s in range(1400, 2400)]
    check(abs(lr[0] - 1e-3 / 20) < 1e-12, f"first step of a phase: {lr[0]}")
    check(abs(max(lr) - 1e-3) < 1e-5, f"peak {max(lr)}")
    check(abs(lr[-1] - 1e-4) < 1e-6, f"last step {lr[-1]}")
    check(all(x >= y for x, y in zip(lr[20:], lr[21:])), "the cosine part does not decrease")
    # Phase 0 is the schedule the first run used: warm-up then cosine to 10 % over all steps.
    b = types.SimpleNamespace(lr=3e-3, warmup=40, phase_start=0, steps=1400, lr_floor=0.1)
    first = [3e-3 * min(1.0, (s + 1) / 40) * (0.1 + 0.45 * (1 + math.cos(math.pi * s / 1400))) for s in range(1400)]
    check(max(abs(train.learning_rate(s, b) - f) for s, f in enumerate(first)) < 1e-15, "phase 0 differs")
    import numpy as np
    ids = np.arange(5000, dtype=np.uint16)
    same = train.data_fingerprint(ids.copy())
    ids[1994] += 1                                   # a token on the fingerprint's stride
    check(train.data_fingerprint(ids) != same, "a changed token file keeps its fingerprint")
    check(train.data_fingerprint(ids[:-1]) != same, "a shorter token file keeps its fingerprint")
    return True


def main():
    filter_cases()
    unwrap_cases()
    ran = schedule_cases()
    if failures:
        return 1
    if not ran:
        print("SKIP: the schedule part needs python3-torch and python3-numpy")
        return 77
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
