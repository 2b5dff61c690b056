#!/usr/bin/env python3
"""Decode (and optionally prompt) speed of offgrid against llama.cpp on one GGUF, in rounds that alternate the
two engines, so that each ratio compares runs made a few seconds apart.

On a shared machine the memory bus a decode step streams from can change speed from one minute to the next;
running one engine's repetitions and then the other's can compare two different buses. Here each round runs
llama-bench once and `offgrid bench` once (the order swapped every round), and prints the round's ratio beside
the bus that `offgrid bench` measured before and after its run (an in-process read of 1 GiB with the same
threads). The summary gives the median and range of the rounds' ratios.

usage: compare_paired.py OFFGRID MODEL.gguf [--rounds 5] [--threads 2] [--depth 0] [--prompt]
                         [--act-quant int8] [--llama-bench PATH]
llama-bench is taken from LLAMACPP_DIR (default ~/.cache/offgrid-llamacpp) as the llama.cpp setup script builds
it. Needs nothing else; rerun when the load average is above about 0.5.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run_json(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"compare_paired: {' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout)


def llama_round(args, llama_bench):
    cmd = [llama_bench, "-m", args.model, "-n", "32", "-d", str(args.depth), "-t", str(args.threads), "-r", "1",
           "-o", "json", "-p", "512" if args.prompt else "0"]
    rows = run_json(cmd)
    tg = next(r["avg_ts"] for r in rows if r["n_gen"] > 0)
    pp = next((r["avg_ts"] for r in rows if r["n_prompt"] > 0), None)
    return pp, tg


def offgrid_round(args):
    cmd = [args.offgrid, "bench", "-m", args.model, "-d", str(args.depth), "-p", "512" if args.prompt else "0",
           "-n", "32", "-t", str(args.threads), "--mode", "sparse", "--json"]
    if args.act_quant:
        cmd += ["--act-quant", args.act_quant]
    j = run_json(cmd)
    r = j["results"][0]
    pp = r["prompt_tokens_per_second"] if args.prompt else None
    return pp, r["gen_tokens_per_second"], j["bus_before_bytes_per_second"] / 1e9, j["bus_after_bytes_per_second"] / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("offgrid")
    ap.add_argument("model")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--depth", type=int, default=0)
    ap.add_argument("--prompt", action="store_true", help="pp512 too (each round then takes about half a minute more)")
    ap.add_argument("--act-quant", default="", help="offgrid's activations (int8 for the speed path)")
    ap.add_argument("--llama-bench", default="")
    args = ap.parse_args()
    llama_bench = args.llama_bench or os.path.join(
        os.environ.get("LLAMACPP_DIR", os.path.expanduser("~/.cache/offgrid-llamacpp")), "build", "bin", "llama-bench")
    if not os.access(llama_bench, os.X_OK):
        sys.exit(f"compare_paired: no llama-bench at {llama_bench} (run the llama.cpp setup script)")

    with open("/proc/loadavg") as f:
        print(f"# load before: {' '.join(f.read().split()[:3])}")
    print(f"# {args.model}, depth {args.depth}, {args.threads} threads, offgrid activations "
          f"{args.act_quant or 'default'}")
    head = "| round | first | tg32 llama.cpp | tg32 offgrid | ratio |"
    rule = "|---:|---|---:|---:|---:|"
    if args.prompt:
        head += " pp512 llama.cpp | pp512 offgrid | ratio |"
        rule += "---:|---:|---:|"
    print(head + " bus before / after offgrid (GB/s) |")
    print(rule + "---|")
    tg_ratios, pp_ratios = [], []
    for i in range(args.rounds):
        llama_first = i % 2 == 0
        if llama_first:
            lpp, ltg = llama_round(args, llama_bench)
            opp, otg, b0, b1 = offgrid_round(args)
        else:
            opp, otg, b0, b1 = offgrid_round(args)
            lpp, ltg = llama_round(args, llama_bench)
        tg_ratios.append(otg / ltg)
        row = f"| {i + 1} | {'llama.cpp' if llama_first else 'offgrid'} | {ltg:.1f} | {otg:.1f} | {otg / ltg:.2f} |"
        if args.prompt:
            pp_ratios.append(opp / lpp)
            row += f" {lpp:.1f} | {opp:.1f} | {opp / lpp:.2f} |"
        print(row + f" {b0:.1f} / {b1:.1f} |", flush=True)
    with open("/proc/loadavg") as f:
        print(f"# load after: {' '.join(f.read().split()[:3])}")
    print(f"decode ratio: median {statistics.median(tg_ratios):.2f}, range {min(tg_ratios):.2f}-{max(tg_ratios):.2f} "
          f"over {len(tg_ratios)} rounds")
    if pp_ratios:
        print(f"prompt ratio: median {statistics.median(pp_ratios):.2f}, range {min(pp_ratios):.2f}-"
              f"{max(pp_ratios):.2f}")


if __name__ == "__main__":
    main()
