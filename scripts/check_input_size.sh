#!/bin/sh
# Time and peak memory of refusing a 200 MB prompt file (run, embed) and of perplexity --chunks on it.
# Usage: scripts/check_input_size.sh [BUILD_DIR]   (default build). The figures go to docs/cli.md; the test suite
# (tests/cli/input_size_test.cpp) checks the behaviour and the memory, never the time.
set -eu
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (Debian package time)"; exit 1; }
B=${1:-build}/offgrid
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$B" gen-model -o "$T/m.gguf" > /dev/null
line='the quick brown fox jumps over the lazy dog, again and again'
i=0; : > "$T/block.txt"
while [ $i -lt 17000 ]; do echo "$line" >> "$T/block.txt"; i=$((i + 1)); done
i=0; : > "$T/big.txt"
while [ $(stat -c %s "$T/big.txt") -lt 200000000 ]; do cat "$T/block.txt" >> "$T/big.txt"; done
echo "prompt file: $(stat -c %s "$T/big.txt") bytes"
measure() {
    name=$1; shift
    /usr/bin/time -f "$name: %e s, peak RSS %M KiB, exit %x" "$B" "$@" > /dev/null 2> "$T/err.txt" || true
    tail -n 1 "$T/err.txt"
}
measure "run -c 4096" run -m "$T/m.gguf" -f "$T/big.txt" -n 1 -c 4096
measure "embed -c 4096" embed -m "$T/m.gguf" -f "$T/big.txt" -c 4096
measure "perplexity -c 512 --chunks 4" perplexity -m "$T/m.gguf" -f "$T/big.txt" -c 512 --chunks 4
