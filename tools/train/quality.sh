#!/usr/bin/env bash
# The measurements of docs/quality.md for one model file.
#   tools/train/quality.sh MODEL RUN_DIR [OFFGRID]
# RUN_DIR is the training directory (corpus/heldout.txt, train.u16.npy). Runs at nice 19.
set -euo pipefail
model=$1
run=$2
offgrid=${3:-build/offgrid}
here=$(dirname "$0")
py=/usr/bin/python3
n="nice -n 19"

echo "== perplexity against a unigram model (-c 1024)"
$n $py "$here/eval.py" ppl --offgrid "$offgrid" --model "$model" --train-ids "$run/train.u16.npy" \
    --text "$run/corpus/heldout.txt" -c 1024
# The evaluation texts outside the corpus (tools/train/README.md); the FAQ is read decompressed.
faq=$(mktemp --suffix=.debian-faq.txt)
trap 'rm -f "$faq"' EXIT
zcat /usr/share/doc/debian/FAQ/debian-faq.en.txt.gz > "$faq"
for t in /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 /usr/share/common-licenses/MPL-2.0 "$faq"; do
    $n $py "$here/eval.py" ppl --offgrid "$offgrid" --model "$model" --train-ids "$run/train.u16.npy" \
        --text "$t" -c 1024
done

echo "== sparse selection against dense attention (budget top_k = 256 tokens)"
for c in 512 1024 2048; do
    s=$($n "$offgrid" perplexity -m "$model" -f "$run/corpus/heldout.txt" -c $c -t 2 | grep "Final estimate")
    d=$($n "$offgrid" perplexity -m "$model" -f "$run/corpus/heldout.txt" -c $c -t 2 --qsa-dense | grep "Final estimate")
    echo "c=$c sparse: $s"
    echo "c=$c dense:  $d"
done

echo "== greedy continuations"
$n $py "$here/eval.py" words --offgrid "$offgrid" --model "$model"
