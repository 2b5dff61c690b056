#!/usr/bin/env bash
# KL divergence of each llama.cpp weight type against the F32 file, for offgrid and for llama.cpp's
# llama-perplexity on the same files (docs/quality.md).
#   tools/train/kld_table.sh F32_NO_MTP.gguf TEXT OUTDIR [OFFGRID] [TYPES...]
# F32_NO_MTP.gguf: export_gguf.py --type f32 --no-mtp (llama.cpp v0.5.0 refuses files with a NextN block).
# Needs llama.cpp built by ../shared/tools/llamacpp/setup.sh. Both engines score the second half of each
# 1024-token chunk (llama.cpp's rule; offgrid --half). Runs at nice 19.
set -euo pipefail
base=$1
text=$2
out=$3
offgrid=${4:-build/offgrid}
shift 4 || true
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(Q8_0 Q6_K Q5_K_M Q4_K_M Q4_0 Q3_K_M Q2_K)
L=${LLAMACPP_DIR:-$HOME/.cache/offgrid-llamacpp}/build/bin
Q=$(dirname "$0")/../../../shared/tools/llamacpp/quantize.sh
n="nice -n 19"
mkdir -p "$out"
$n "$offgrid" perplexity -m "$base" -f "$text" -c 1024 --half -t 2 --kl-divergence-base "$out/offgrid.kld" \
    > "$out/offgrid-base.txt" 2>/dev/null
$n "$L/llama-perplexity" -m "$base" -f "$text" -c 1024 -t 2 --kl-divergence-base "$out/llama.kld" \
    > "$out/llama-base.txt" 2>&1
for t in "${types[@]}"; do
    q="$out/model-$t.gguf"
    [ -f "$q" ] || $n sh "$Q" "$base" "$q" "$t" > "$out/quantize-$t.txt" 2>&1
    $n "$offgrid" perplexity -m "$q" --kl-divergence-base "$out/offgrid.kld" --kl-divergence -t 2 \
        > "$out/offgrid-$t.txt" 2>/dev/null
    $n "$L/llama-perplexity" -m "$q" -f "$text" -c 1024 -t 2 --kl-divergence-base "$out/llama.kld" \
        --kl-divergence > "$out/llama-$t.txt" 2>&1
    o=$(grep "Mean    KLD" "$out/offgrid-$t.txt" | awk '{print $3}')
    l=$(grep -E "Mean +KLD" "$out/llama-$t.txt" | awk '{print $3}')
    os=$(grep "Same top p" "$out/offgrid-$t.txt" | awk '{print $4}')
    ls=$(grep -E "^Same top p" "$out/llama-$t.txt" | awk '{print $4}')
    od=$(grep "Mean PPL(Q)-PPL(base)" "$out/offgrid-$t.txt" | awk '{print $4}')
    ld=$(grep "Mean PPL(Q)-PPL(base)" "$out/llama-$t.txt" | awk '{print $4}')
    echo "$t offgrid_kld=$o llama_kld=$l offgrid_same_top=$os llama_same_top=$ls offgrid_dppl=$od llama_dppl=$ld size=$(stat -c %s "$q")"
done
