#!/bin/bash
# The commands besides replay under a launcher: `bench` under mpirun -np N measures over the pipeline (rank 0
# prints the table once, every rank names its layers and prints its forward and message seconds); `run` with
# ngram-simple drafting prints the one-process text; `run --spec-type draft-mtp` and `serve` are refused with one
# line naming what works, before anything is loaded.
#
# usage: launcher_commands.sh OFFGRID MPIEXEC NP
set -u
offgrid=$1 mpiexec=$2 np=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d /tmp/offgrid-launcher.XXXXXX)
# Open MPI's session directory under the test's own: two mpiruns started at once (ctest -j) race to
# create the shared /tmp/ompi.HOST.UID and one of them fails orte_init.
export OMPI_MCA_orte_tmpdir_base=$work
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
"$offgrid" gen-model -o tiny.gguf > /dev/null || fail "gen-model"
launch() { timeout 120 "$mpiexec" --oversubscribe -np "$np" "$offgrid" "$@"; }

# bench: one table, one header line and one figures line per rank.
launch bench -m tiny.gguf -d 0,32 -p 16 -n 8 -t 1 --mode sparse > bench.out 2> bench.err || { cat bench.err; fail "bench under mpirun"; }
[ "$(grep -c '^| sparse |' bench.out)" = 2 ] || { cat bench.out; fail "bench: expected the two result rows once"; }
for r in $(seq 0 $((np - 1))); do
    grep -q "^bench: rank $r of $np runs layers " bench.err || { cat bench.err; fail "bench: rank $r does not name its layers"; }
    grep -Eq "^bench: rank $r of $np: [0-9]+ ubatches, forward [0-9.]+ s, messages [0-9.]+ s" bench.err ||
        { cat bench.err; fail "bench: rank $r does not print its figures"; }
done

# run with n-gram drafting: the text of one process.
"$offgrid" run -m tiny.gguf -p "hello world" -n 24 --temp 0 --spec-type ngram-simple > one.txt 2> /dev/null || fail "run, one process"
launch run -m tiny.gguf -p "hello world" -n 24 --temp 0 --spec-type ngram-simple > piped.txt 2> run.err ||
    { cat run.err; fail "run --spec-type ngram-simple under mpirun"; }
cmp -s one.txt piped.txt || fail "run --spec-type ngram-simple: the text differs from one process"

# Refusals: one line naming what works, a non-zero status.
launch run -m tiny.gguf -p "hi" -n 4 --spec-type draft-mtp > /dev/null 2> mtp.err && fail "draft-mtp under mpirun was not refused"
grep -q "^offgrid run: --spec-type draft-mtp: not available under an MPI launcher.*ngram-simple or none" mtp.err ||
    { cat mtp.err; fail "draft-mtp: not the refusal line"; }
launch serve -m tiny.gguf --port 0 > /dev/null 2> serve.err && fail "serve under mpirun was not refused"
grep -q "^offgrid serve: serve does not run under an MPI launcher yet.*use \`offgrid run\`, \`replay\` or \`bench\`" serve.err ||
    { cat serve.err; fail "serve: not the refusal line"; }
echo "ok: bench, run (ngram-simple), and the refusals of draft-mtp and serve under mpirun -np $np"
