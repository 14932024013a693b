#!/usr/bin/env bash
# Description: an idle cudawd gives its memory back (issue 30, "Idle cudawd"), on a real GPU.
# Two jobs of GIB GiB (pool_bench_job.cu) take turns through cudawd's host-memory pool (cudawd's
# defaults: --host-memory, --pool-release 60, --idle-exit 600), their data verified. Meanwhile a
# second cudawd in another run dir has two jobs of GIB/2 GiB take turns through its own pool:
# while both pools hold images, their claims in the host-wide ledger and the pages they hold
# (the memfds' blocks, seen through /proc, not cudawd's word) stay within the budget (50% of
# MemTotal) together, sampled every 0.2 s; the second pool must have held pages (else the step
# checked nothing). After all four jobs exit: 60 s later (plus 5) each cudawd's RSS is at most
# 256 MiB, its pool's memfd holds no pages, and MemAvailable is back within 1 GiB of what it was
# before the cudawds started. `cudaw-ctl sched --stop` stops both (and the trap any cudawd left,
# so that nothing skews the next benchmark). Exit 0, 1 when a criterion fails, 77 without a GPU.
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
# On any exit: the jobs are told to stop (they wait for the file) and the cudawds are killed.
trap 'touch "$OUT/stop"; for p in "${daemons[@]}"; do kill "$p" 2>/dev/null; done' EXIT
fail=0
meminfo() { echo $(( $(awk -v k="$1:" '$1 == k { print $2 }' /proc/meminfo) * 1024 )); }
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

ledger_claim() { # the claim of cudawd pid's entry in the host-wide ledger (0: none)
  awk '{ print $1; exit }' /dev/shm/cudawd-pool."$1" 2>/dev/null || echo 0
}
# start_cudawd DIR LOG DEVICE_MIB: a cudawd on run dir DIR; sets $daemon_pid.
start_cudawd() {
  CUDAW_RUN_DIR="$1" "$B/bin/cudawd" --device-memory "$3M" --quantum 3 --min-run 0.5 \
    --pool-release "$RELEASE" --verbose > "$2" 2>&1 &
  daemon_pid=$!; daemons+=("$daemon_pid")
  wait_for "$2" "listening on" 30 || { echo "cudawd ($1) did not start"; cat "$2"; exit 1; }
}
# start_job DIR NAME GIB: a job under the cudawd of run dir DIR; sets $job_pid.
start_job() {
  CUDAW_RUN_DIR="$1" CUDAW_SHARE=1 CUDAW_LOG=info "$B/bin/cudaw" run -- "$JOB" "$3" "$OUT/stop" \
    > "$OUT/$2.out" 2> "$OUT/$2.log" &
  job_pid=$!
}
# verified NAME RC: the job said VERIFIED and exited 0.
verified() {
  grep -q VERIFIED "$OUT/$1.out" && [ "$2" -eq 0 ] || { echo "job $1's data NOT verified"; fail=1; }
}

before=$(meminfo MemAvailable)
total=$(meminfo MemTotal)
budget=$((total / 2))
start_cudawd "$OUT/run" "$OUT/cudawd.log" $((GIB * 1536 + 256))
daemon=$daemon_pid
echo "before cudawd: MemAvailable $(mib "$before") MiB; at start its pool holds $(pool_bytes "$daemon") bytes"
start_job "$OUT/run" a "$GIB"; pa=$job_pid
wait_for "$OUT/a.out" READY 600 || { echo "job A did not start"; tail "$OUT/a.log"; exit 1; }
wait_for "$OUT/a.log" "host-memory pool: .* page-locked" 900 || { echo "job A never page-locked its window"; tail "$OUT/a.log"; exit 1; }
start_job "$OUT/run" b "$GIB"; pb=$job_pid
wait_for "$OUT/cudawd.log" "pid $pa swapped in" 900 || { echo "job A was not swapped out and back in"; tail -20 "$OUT/cudawd.log"; exit 1; }
peak=$(pool_bytes "$daemon")
during=$(meminfo MemAvailable)

# Two cudawds on one host, both pools in use: a second cudawd's jobs C and D (GIB/2 each) take
# turns through its pool while A and B go on through the first's.
half=$(( GIB / 2 > 0 ? GIB / 2 : 1 ))
start_cudawd "$OUT/run2" "$OUT/cudawd2.log" $((half * 1536 + 256))
daemon2=$daemon_pid
start_job "$OUT/run2" c "$half"; pc=$job_pid
wait_for "$OUT/c.out" READY 600 || { echo "job C did not start"; tail "$OUT/c.log"; exit 1; }
start_job "$OUT/run2" d "$half"; pd=$job_pid
max_pages=0; max_claims=0; max_second=0; end=$((SECONDS + 900))
until grep -q "pid $pc swapped in" "$OUT/cudawd2.log"; do
  [ $SECONDS -lt $end ] || { echo "job C was not swapped out and back in"; tail -20 "$OUT/cudawd2.log"; exit 1; }
  p1=$(pool_bytes "$daemon"); p2=$(pool_bytes "$daemon2")
  [ "$p1" -lt 0 ] && p1=0; [ "$p2" -lt 0 ] && p2=0
  pages=$((p1 + p2)); claims=$(( $(ledger_claim "$daemon") + $(ledger_claim "$daemon2") ))
  [ $pages -gt $max_pages ] && max_pages=$pages
  [ $claims -gt $max_claims ] && max_claims=$claims
  [ "$p2" -gt $max_second ] && max_second=$p2
  sleep 0.2
done
echo "two cudawds at once: at most $(mib $max_pages) MiB of pool pages and $(mib $max_claims) MiB claimed together (the second's pool: up to $(mib $max_second) MiB); budget $(mib $budget) MiB"
grep -m1 "host-memory pool" "$OUT/cudawd2.log"
[ $max_second -gt 0 ] || { echo "FAIL: the second cudawd's pool never held pages: the step checked nothing"; fail=1; }
[ $max_pages -le $budget ] || { echo "FAIL: the two pools' pages exceed the budget"; fail=1; }
[ $max_claims -le $budget ] || { echo "FAIL: the two pools' claims exceed the budget"; fail=1; }

touch "$OUT/stop"
for j in "a $pa" "b $pb" "c $pc" "d $pd"; do
  set -- $j
  wait "$2"; verified "$1" $?
done
left=$SECONDS
grep -o "[0-9.]* [KMGT]iB straight into cudawd's pool" "$OUT/a.log" | head -1 | sed 's/^/job A: /'
echo "while the jobs ran: pool $(mib "$peak") MiB faulted in, MemAvailable $(mib "$during") MiB"
sleep $((RELEASE + 5))
after=$(meminfo MemAvailable)
for p in "$daemon" "$daemon2"; do
  rss=$(( $(awk '$1 == "VmRSS:" { print $2 }' /proc/"$p"/status) * 1024 ))
  held=$(pool_bytes "$p")
  echo "$((SECONDS - left)) s after the last job: cudawd $p: RSS $(mib "$rss") MiB, pool $held bytes"
  [ "$rss" -le $((256 << 20)) ] || { echo "FAIL: cudawd $p's RSS over 256 MiB"; fail=1; }
  [ "$held" -le 0 ] || { echo "FAIL: cudawd $p's pool still holds $(mib "$held") MiB"; fail=1; }
done
echo "MemAvailable $(mib "$after") MiB (before the cudawds: $(mib "$before"))"
[ $((after + (1 << 30))) -ge "$before" ] || { echo "FAIL: MemAvailable not back within 1 GiB"; fail=1; }
grep "given back to the kernel" "$OUT/cudawd.log" | tail -1
for dir in "$OUT/run" "$OUT/run2"; do
  CUDAW_RUN_DIR="$dir" "$B/bin/cudaw-ctl" sched --stop || fail=1
done
wait "$daemon"; wait "$daemon2"
[ -e "$OUT/run/cudawd.sock" ] && { echo "FAIL: the socket was left behind"; fail=1; }
echo "logs in $OUT"
exit $fail
