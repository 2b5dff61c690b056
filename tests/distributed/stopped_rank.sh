#!/bin/bash
# A rank that stops answering ends the job with a clear error within the timeout, never a hang, and no output
# file appears: mpirun -np 2 replays a long script, rank 1 gets SIGSTOP, rank 0 must end everything within
# --rank-timeout (3 s) plus the launcher's own shutdown.
#
# usage: stopped_rank.sh OFFGRID MPIEXEC
set -u
offgrid=$1 mpiexec=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d /tmp/offgrid-stopped.XXXXXX)
# Open MPI's session directory under the test's own: two mpiruns started at once (ctest -j) race to
# create the shared /tmp/ompi.HOST.UID and one of them fails orte_init.
export OMPI_MCA_orte_tmpdir_base=$work
stopped=""
cleanup() {
    [ -n "$stopped" ] && kill -KILL "$stopped" 2> /dev/null
    rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
"$offgrid" gen-model -o tiny.gguf > /dev/null || exit 1
{
    echo "set n_ctx 512"
    for i in $(seq 1 400); do echo "decode-each 0 rand(50,$i)"; echo "clear"; done
} > long.txt

"$mpiexec" --oversubscribe -np 2 "$offgrid" replay tiny.gguf long.txt -b out.bin --rank-timeout 3 > stdout.txt 2> stderr.txt &
launcher=$!
# Rank 1: the child of the launcher whose environment says so.
for _ in $(seq 1 200); do
    for pid in $(pgrep -P "$launcher"); do
        if tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then stopped=$pid; fi
    done
    [ -n "$stopped" ] && break
    sleep 0.05
done
if [ -z "$stopped" ]; then
    echo "FAIL: rank 1's process not found"
    kill "$launcher"
    exit 1
fi
sleep 1  # let the replay begin
kill -STOP "$stopped"
start=$(date +%s)
for _ in $(seq 1 600); do
    kill -0 "$launcher" 2> /dev/null || break
    sleep 0.1
done
elapsed=$(( $(date +%s) - start ))
if kill -0 "$launcher" 2> /dev/null; then
    echo "FAIL: the job still runs ${elapsed} s after rank 1 stopped"
    kill "$launcher"
    exit 1
fi
wait "$launcher"
status=$?
cat stderr.txt | head -5
fails=0
[ "$status" -ne 0 ] || { echo "FAIL: exit status 0"; fails=1; }
grep -Eq "rank 0 of 2: (waiting for .* from|sending .* to) rank 1: no answer within 3 s; ending all ranks" stderr.txt ||
    { echo "FAIL: no line naming the silent rank"; fails=1; }
[ ! -e out.bin ] || { echo "FAIL: a partial out.bin was written"; fails=1; }
ls -a | grep -q '\.tmp' && { echo "FAIL: a temporary file was left: $(ls -a)"; fails=1; }
echo "the job ended ${elapsed} s after rank 1 stopped (status $status)"
exit $fails
