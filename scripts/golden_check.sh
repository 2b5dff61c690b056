#!/usr/bin/env bash
# Replays every (model, workload) pair of the golden set with `offgrid replay` and compares each record with
# the reference using the golden set's own comparer: one line per pair, then a summary. Needs ../shared.
#   scripts/golden_check.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
golden=$(cd ../shared/golden 2>/dev/null && pwd) || { echo "golden_check: ../shared/golden is absent" >&2; exit 2; }
offgrid=$(cd "$build" && pwd)/offgrid
[ -x "$offgrid" ] || { echo "golden_check: $offgrid is not built (scripts/setup.sh build)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
g++ -O2 -std=c++17 -o "$work/logrec_cmp" "$golden/logrec_cmp.cpp"

pass=0 fail=0
for expected in "$golden"/expected/*.bin; do
    pair=$(basename "$expected" .bin)
    model=${pair%%__*}
    workload=${pair#*__}
    run="$work/$pair"
    mkdir "$run"
    # Workloads write their state files into the working directory: each pair gets a fresh one.
    if ! (cd "$run" && "$offgrid" replay "$golden/models/$model.gguf" "$golden/workloads/$workload.txt" \
            -b out.bin -o out.txt 2> err.txt); then
        echo "$pair: replay failed: $(tail -n 1 "$run/err.txt")"
        fail=$((fail + 1))
        continue
    fi
    if verdict=$("$work/logrec_cmp" "$expected" "$run/out.bin" -q); then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
    fi
    echo "$pair: $(grep -o 'max_abs=[^ ]*' <<< "$verdict") $(grep -o 'argmax_mismatch=[0-9]*' <<< "$verdict") $(grep -o 'verdict=[A-Z]*' <<< "$verdict")"
done
echo "golden_check: $pass matched, $fail differ"
[ "$fail" -eq 0 ]
