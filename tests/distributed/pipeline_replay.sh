#!/bin/bash
# The layer pipeline gives one process's results bit for bit: every golden workload on every golden model (and on
# a tiny glm5-next file) replayed by one process and by mpirun -np N; the LOGREC records, the text logs and every
# state file the script writes must be byte-identical (cmp). Then a state file saved under one split is restored
# under another (and under one process) and continues identically.
#
# usage: pipeline_replay.sh OFFGRID MPIEXEC NP SHARED_DIR
# Exit 77 (skipped) when SHARED_DIR/golden is absent.
set -u
offgrid=$1 mpiexec=$2 np=$3 shared=$4
golden=$shared/golden
if [ ! -d "$golden/workloads" ]; then
    echo "skipped: $golden/workloads is absent"
    exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d /tmp/offgrid-pipeline.XXXXXX)
# Open MPI's session directory under the test's own: two mpiruns started at once (ctest -j) race to
# create the shared /tmp/ompi.HOST.UID and one of them fails orte_init.
export OMPI_MCA_orte_tmpdir_base=$work
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

run_mpi() {  # DIR NP SPLIT ARGS...: replay under mpirun in DIR
    local dir=$1 n=$2 split=$3
    shift 3
    (cd "$dir" && timeout 300 "$mpiexec" --oversubscribe -np "$n" "$offgrid" replay "$@" --split "$split" \
        --rank-timeout 60 > stdout.txt 2> stderr.txt)
}

# Splits to try for NP ranks over L layers: auto, and one uneven explicit split.
uneven_split() {  # L NP
    local L=$1 n=$2
    if [ "$n" -eq 2 ]; then echo "0-0,1-$((L - 1))"; else echo "0-0,1-$((L - 2)),$((L - 1))-$((L - 1))"; fi
}

"$offgrid" gen-model -o "$work/glm5-tiny.gguf" --arch glm5-next > /dev/null || { echo "FAIL: gen-model glm5-next"; exit 1; }
models=()
for m in "$golden"/models/tiny-*.gguf "$golden"/models/long-*.gguf "$work/glm5-tiny.gguf"; do models+=("$m"); done

checked=0
declare -A per_model
for model in "${models[@]}"; do
    name=$(basename "$model" .gguf)
    layers=$("$offgrid" gguf-info "$model" | awk '/\.block_count/ {print $3}')
    for wl in "$golden"/workloads/*.txt; do
        # A golden workload names the models it is for; the glm5-next file takes every workload it can run.
        if [ "$name" != glm5-tiny ] && ! grep -q "^# models:.* $name\b" "$wl" && ! grep -q "^# models: $name\b" "$wl"; then
            continue
        fi
        base=$name.$(basename "$wl" .txt)
        one=$work/$base.one
        mkdir -p "$one"
        if ! (cd "$one" && "$offgrid" replay "$model" "$wl" -b out.bin -o out.txt > stdout.txt 2> stderr.txt); then
            if [ "$name" = glm5-tiny ]; then rm -rf "$one"; continue; fi  # settings the tiny file cannot take
            fail "$base: one process: $(tail -1 "$one/stderr.txt")"
            continue
        fi
        for split in auto "$(uneven_split "$layers" "$np")"; do
            dir=$work/$base.np$np.${split//[,-]/_}
            mkdir -p "$dir"
            if ! run_mpi "$dir" "$np" "$split" "$model" "$wl" -b out.bin -o out.txt; then
                fail "$base: -np $np --split $split: $(grep -m1 offgrid "$dir/stderr.txt")"
                continue
            fi
            # Each rank ran its own range: the ranks' lines name the split's ranges in rank order.
            want=$(seq 0 $((np - 1)) | sed 's/^/rank /')
            got=$(grep -o 'rank [0-9]* of [0-9]* runs layers' "$dir/stderr.txt" | cut -d' ' -f1-2 | sort -n -k2)
            [ "$got" = "$want" ] || fail "$base: -np $np: not every rank reported its layers"
            for f in "$one"/*; do
                b=$(basename "$f")
                case $b in stdout.txt|stderr.txt) continue ;; esac
                cmp -s "$f" "$dir/$b" || fail "$base: -np $np --split $split: $b differs from one process"
            done
            checked=$((checked + 1))
            per_model[$name]=$(( ${per_model[$name]:-0} + 1 ))
        done
    done
done
for m in "${!per_model[@]}"; do echo "$m: ${per_model[$m]} replays"; done

# A state saved under one split restores under another and under one process.
model=$golden/models/tiny-r1.gguf
cat > "$work/save.txt" <<'WL'
set n_seq_max 2
set n_ctx 512
decode 0 rand(20,1)
decode 1 rand(9,2)
save-all all.state
save-state 1 one.state
WL
cat > "$work/load.txt" <<'WL'
set n_seq_max 2
set n_ctx 512
load-all all.state
decode 0 rand(6,3)
load-state 0 one.state
decode 0 rand(5,4)
gen 0 4
WL
mkdir -p "$work/xs.save" "$work/xs.one"
run_mpi "$work/xs.save" "$np" auto "$model" "$work/save.txt" || fail "cross-split save: $(grep -m1 offgrid "$work/xs.save/stderr.txt")"
cp "$work"/xs.save/*.state "$work/xs.one/"
(cd "$work/xs.one" && "$offgrid" replay "$model" "$work/load.txt" -b out.bin > /dev/null 2>&1) || fail "cross-split: one process load"
for n in 2 3; do
    d=$work/xs.np$n
    mkdir -p "$d"
    cp "$work"/xs.save/*.state "$d/"
    run_mpi "$d" "$n" "$(uneven_split 4 "$n")" "$model" "$work/load.txt" -b out.bin || fail "cross-split: -np $n load"
    cmp -s "$work/xs.one/out.bin" "$d/out.bin" || fail "cross-split: a state saved by $np ranks restored on $n ranks differs from one process"
done

# offgrid run: the same sampled text and the same state file as one process.
"$offgrid" gen-model -o "$work/qwen-tiny.gguf" > /dev/null || fail "gen-model qwen4exp"
mkdir -p "$work/run.one" "$work/run.np"
run_args=(-m "$work/qwen-tiny.gguf" -p "The pipeline passes the hidden state" -n 24 --temp 0.8 -s 7 -c 256 -ub 5)
(cd "$work/run.one" && "$offgrid" run "${run_args[@]}" --state-save s.state > out.txt 2> err.txt) || fail "run: one process"
(cd "$work/run.np" && timeout 300 "$mpiexec" --oversubscribe -np "$np" "$offgrid" run "${run_args[@]}" --state-save s.state \
    --rank-timeout 60 > out.txt 2> err.txt) || fail "run: -np $np: $(grep -m1 offgrid "$work/run.np/err.txt")"
cmp -s "$work/run.one/out.txt" "$work/run.np/out.txt" || fail "run: -np $np prints other text than one process"
cmp -s "$work/run.one/s.state" "$work/run.np/s.state" || fail "run: -np $np saves another state than one process"
[ -s "$work/run.one/out.txt" ] || fail "run: no text"

echo "$checked replays under -np $np compared with one process, $failures failures"
[ "${per_model[glm5-tiny]:-0}" -gt 0 ] || fail "no workload ran on glm5-next"
[ "$checked" -gt 0 ] && [ "$failures" -eq 0 ]
