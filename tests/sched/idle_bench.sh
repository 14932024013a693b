#!/usr/bin/env bash
# Description: an idle cudawd gives its memory back (issue 30, "Idle cudawd"), on a real GPU.
# Two jobs of GIB GiB (pool_bench_job.cu) take turns through cudawd's host-memory pool (cudawd's
# defaults: --host-memory, --pool-release 60, --idle-exit 600), their data verified. After both
# exit: 60 s later (plus 5) cudawd's RSS is at most 256 MiB, its pool's memfd holds no pages (seen
# through /proc/<pid>/fd, not cudawd's word) and MemAvailable is back within 1 GiB of what it was
# before cudawd started. Then a second cudawd in another run dir: the two pools' sizes in the
# host-wide ledger stay within the budget (50% of MemTotal). `cudaw-ctl sched --stop` stops both
# (and the trap any cudawd left, so that nothing skews the next benchmark). Exit 0, 1 when a
# criterion fails, 77 without a GPU.
# Usage: tests/sched/idle_bench.sh <cudaw build dir> [GIB (16)] [out dir]
# Environment: JOB (tests/sched/sched_pool_bench_job of the build), RELEASE (60 s).
set -u
B=$(cd "${1:?usage: idle_bench.sh <build dir> [GIB] [out dir]}" && pwd)
GIB=${2:-16}
OUT=${3:-/tmp/cudaw-idle-bench}
JOB=${JOB:-"$B/tests/sched/sched_pool_bench_job"}
RELEASE=${RELEASE:-60}
[ -x "$JOB" ] || { echo "no $JOB (built with nvcc only)"; exit 1; }
"$JOB" --ceiling 1 > /dev/null 2>&1; [ $? -eq 77 ] && { echo "skipped: no GPU"; exit 77; }
rm -rf "$OUT"; mkdir -p "$OUT/run" "$OUT/run2"
daemons=()
trap 'for p in "${daemons[@]}"; do kill "$p" 2>/dev/null; done' EXIT
fail=0
meminfo() { awk -v k="$1:" '$1 == k { print $2 * 1024 }' /proc/meminfo; }
mib() { echo $(( $1 / 1048576 )); }
pool_bytes() { # the pages the kernel holds for cudawd pid's pool memfd (-1: none)
  local f
  for f in /proc/"$1"/fd/*; do
    if readlink "$f" 2>/dev/null | grep -q "memfd:cudawd-pool"; then
      echo $(( $(stat -L -c %b "$f") * $(stat -L -c %B "$f") )); return
    fi
  done
  echo -1
}
wait_for() { # file pattern seconds
  local end=$((SECONDS + $3))
  until grep -q "$2" "$1" 2>/dev/null; do
    [ $SECONDS -lt $end ] || return 1
    sleep 0.1
  done
}

before=$(meminfo MemAvailable)
export CUDAW_RUN_DIR="$OUT/run"
"$B/bin/cudawd" --device-memory "$((GIB * 3 / 2 + 1))G" --quantum 3 --min-run 0.5 \
  --pool-release "$RELEASE" --verbose > "$OUT/cudawd.log" 2>&1 &
daemon=$!; daemons+=("$daemon")
wait_for "$OUT/cudawd.log" "listening on" 30 || { echo "cudawd did not start"; cat "$OUT/cudawd.log"; exit 1; }
echo "before cudawd: MemAvailable $(mib "$before") MiB; at start its pool holds $(pool_bytes "$daemon") bytes"
CUDAW_SHARE=1 CUDAW_LOG=info "$B/bin/cudaw" run -- "$JOB" "$GIB" "$OUT/stop" > "$OUT/a.out" 2> "$OUT/a.log" &
pa=$!
wait_for "$OUT/a.out" READY 600 || { echo "job A did not start"; tail "$OUT/a.log"; exit 1; }
wait_for "$OUT/a.log" "host-memory pool: .* page-locked" 900 || { echo "job A never page-locked its window"; tail "$OUT/a.log"; exit 1; }
CUDAW_SHARE=1 CUDAW_LOG=info "$B/bin/cudaw" run -- "$JOB" "$GIB" "$OUT/stop" > "$OUT/b.out" 2> "$OUT/b.log" &
pb=$!
wait_for "$OUT/cudawd.log" "pid $pa swapped in" 900 || { echo "job A was not swapped out and back in"; tail -20 "$OUT/cudawd.log"; exit 1; }
peak=$(pool_bytes "$daemon")
during=$(meminfo MemAvailable)
touch "$OUT/stop"
wait $pa; ra=$?
wait $pb; rb=$?
left=$SECONDS
grep -q VERIFIED "$OUT/a.out" && [ $ra -eq 0 ] || { echo "job A's data NOT verified"; fail=1; }
grep -q VERIFIED "$OUT/b.out" && [ $rb -eq 0 ] || { echo "job B's data NOT verified"; fail=1; }
grep -o "[0-9.]* [KMGT]iB straight into cudawd's pool" "$OUT/a.log" | head -1 | sed 's/^/job A: /'
echo "while the jobs ran: pool $(mib "$peak") MiB faulted in, MemAvailable $(mib "$during") MiB"
sleep $((RELEASE + 5))
rss=$(awk '$1 == "VmRSS:" { print $2 * 1024 }' /proc/"$daemon"/status)
held=$(pool_bytes "$daemon")
after=$(meminfo MemAvailable)
echo "$((SECONDS - left)) s after the last job: cudawd RSS $(mib "$rss") MiB, pool $held bytes, MemAvailable $(mib "$after") MiB (before cudawd: $(mib "$before"))"
[ "$rss" -le $((256 << 20)) ] || { echo "FAIL: cudawd's RSS over 256 MiB"; fail=1; }
[ "$held" -eq 0 ] || { echo "FAIL: the pool still holds $(mib "$held") MiB"; fail=1; }
[ $((after + (1 << 30))) -ge "$before" ] || { echo "FAIL: MemAvailable not back within 1 GiB"; fail=1; }
grep "given back to the kernel" "$OUT/cudawd.log" | tail -1

# Two cudawds on one host: their ledger entries (sizes claimed) within 50% of MemTotal.
CUDAW_RUN_DIR="$OUT/run2" "$B/bin/cudawd" --verbose > "$OUT/cudawd2.log" 2>&1 &
daemon2=$!; daemons+=("$daemon2")
wait_for "$OUT/cudawd2.log" "listening on" 30 || { echo "the second cudawd did not start"; cat "$OUT/cudawd2.log"; exit 1; }
total=$(meminfo MemTotal)
sizes=0
for p in "$daemon" "$daemon2"; do
  [ -f /dev/shm/cudawd-pool.$p ] && sizes=$((sizes + $(awk '{ print $1 }' /dev/shm/cudawd-pool.$p)))
done
echo "two cudawds: pools of $(mib "$sizes") MiB together, budget $(mib $((total / 2))) MiB"
grep -m1 "host-memory pool" "$OUT/cudawd2.log"
[ "$sizes" -le $((total / 2)) ] || { echo "FAIL: the two pools exceed the budget"; fail=1; }
for dir in "$OUT/run" "$OUT/run2"; do
  CUDAW_RUN_DIR="$dir" "$B/bin/cudaw-ctl" sched --stop || fail=1
done
wait "$daemon"; wait "$daemon2"
[ -e "$OUT/run/cudawd.sock" ] && { echo "FAIL: the socket was left behind"; fail=1; }
echo "logs in $OUT"
exit $fail
