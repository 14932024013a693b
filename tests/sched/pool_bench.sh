#!/usr/bin/env bash
# Description: cudawd's host-memory pool on a real GPU (issue 20, for sharing). One job of GIB
# GiB (pool_bench_job.cu, one allocation) is swapped out by cudawd for a second job of the same
# size and swapped back in when the second one's turn is over, once with --host-memory off (the
# image goes into fresh host pages) and once with a pool (the image goes into the range cudawd
# lends, page-locked ahead of time). Prints each swap's time and GB/s against the pinned D2H /
# H2D ceilings measured in the same run (pinned cudaMemcpyAsync, 1 GiB buffer), and whether the
# data was verified after the resume. Exit 0, 1 when a job fails or the pool was not used, 77
# without a GPU.
# Usage: tests/sched/pool_bench.sh <cudaw build dir> [GIB (16)] [out dir]
# Environment: JOB (tests/sched/sched_pool_bench_job of the build), QUANTUM (3 s).
set -u
B=$(cd "${1:?usage: pool_bench.sh <build dir> [GIB] [out dir]}" && pwd)
GIB=${2:-16}
OUT=${3:-/tmp/cudaw-pool-bench}
JOB=${JOB:-"$B/tests/sched/sched_pool_bench_job"}
QUANTUM=${QUANTUM:-3}
[ -x "$JOB" ] || { echo "no $JOB (built with nvcc only)"; exit 1; }
mkdir -p "$OUT"
calc() { awk "BEGIN { printf \"%.2f\", $1 }"; }

ceiling=$("$JOB" --ceiling "$GIB" 2>&1)
rc=$?
[ $rc -eq 77 ] && { echo "$ceiling"; exit 77; }
read -r d2h h2d < <(echo "$ceiling" | awk '/^CEILING/ { print $2, $3 }')
[ -n "${d2h:-}" ] || { echo "ceiling measurement failed: $ceiling"; exit 1; }
echo "pinned ceilings over $GIB GiB: D2H $d2h GB/s, H2D $h2d GB/s"

wait_for() { # file pattern seconds
  local end=$((SECONDS + $3))
  until grep -q "$2" "$1" 2>/dev/null; do
    [ $SECONDS -lt $end ] || return 1
    sleep 0.1
  done
}

fail=0
run_case() { # label host-memory
  local label=$1 dir="$OUT/$1" pa pb daemon
  rm -rf "$dir"; mkdir -p "$dir/run"
  export CUDAW_RUN_DIR="$dir/run"
  # Room for one job and a half: the second job's allocation makes cudawd swap the first out.
  "$B/bin/cudawd" --device-memory "$((GIB * 3 / 2 + 1))G" --quantum "$QUANTUM" --min-run 0.5 \
    --host-memory "$2" --verbose > "$dir/cudawd.log" 2>&1 &
  daemon=$!
  wait_for "$dir/cudawd.log" "listening on" 30 || { echo "$label: cudawd did not start"; cat "$dir/cudawd.log"; exit 1; }
  CUDAW_SHARE=1 CUDAW_LOG=info "$B/bin/cudaw" run -- "$JOB" "$GIB" "$dir/stop" > "$dir/a.out" 2> "$dir/a.log" &
  pa=$!
  wait_for "$dir/a.out" READY 600 || { echo "$label: job A did not start"; cat "$dir/a.log"; exit 1; }
  if [ "$2" != off ]; then
    local t0=$SECONDS
    wait_for "$dir/a.log" "host-memory pool: .* page-locked" 900 ||
      { echo "$label: job A never finished page-locking the pool"; tail "$dir/a.log"; exit 1; }
    echo "$label: job A page-locked the pool within $((SECONDS - t0)) s of its READY"
  fi
  CUDAW_SHARE=1 CUDAW_LOG=info "$B/bin/cudaw" run -- "$JOB" "$GIB" "$dir/stop" > "$dir/b.out" 2> "$dir/b.log" &
  pb=$!
  wait_for "$dir/cudawd.log" "pid $pa swapped in" 900 ||
    { echo "$label: job A was not swapped out and back in"; tail -20 "$dir/cudawd.log"; exit 1; }
  touch "$dir/stop"
  wait $pa; local ra=$?
  wait $pb; local rb=$?
  kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null
  grep -q VERIFIED "$dir/a.out" && [ $ra -eq 0 ] || { echo "$label: job A's data NOT verified"; fail=1; }
  grep -q VERIFIED "$dir/b.out" && [ $rb -eq 0 ] || { echo "$label: job B's data NOT verified"; fail=1; }
  # cudawd: "pid P swapped out: X GiB in T s (G GB/s)", the program's own figures.
  local out in
  out=$(grep -m1 "pid $pa swapped out:" "$dir/cudawd.log" | sed 's/.*: \([0-9.]*\) GiB in \([0-9.]*\) s (\([0-9.]*\) GB\/s).*/\1 \2 \3/')
  in=$(grep -m1 "pid $pa swapped in:" "$dir/cudawd.log" | sed 's/.*: \([0-9.]*\) GiB in \([0-9.]*\) s (\([0-9.]*\) GB\/s).*/\1 \2 \3/')
  read -r og os ogb <<< "$out"
  read -r ig is igb <<< "$in"
  local pool_line
  pool_line=$(grep -m1 "pausing -> paused" "$dir/a.log" | grep -o "[0-9.]* [KMGT]iB straight into cudawd's pool" || true)
  printf '%-9s swap-out %6.2f GiB in %7.3f s = %6.2f GB/s = %5.2fx D2H | swap-in %7.3f s = %6.2f GB/s = %5.2fx H2D | %s\n' \
    "$label" "$og" "$os" "$ogb" "$(calc "$ogb / $d2h")" "$is" "$igb" "$(calc "$igb / $h2d")" \
    "${pool_line:-nothing in a pool}"
  grep -m1 "pausing -> paused" "$dir/a.log" | sed 's/^/    job A: /'
  grep -m1 "resume: resuming -> running" "$dir/a.log" | sed 's/^/    job A: /'
  if [ "$2" != off ] && [ -z "$pool_line" ]; then echo "$label: the pool was NOT used"; fail=1; fi
  eval "${label}_out=$ogb ${label}_in=$igb"
}

run_case nopool off
run_case pool "$((GIB + GIB / 8 + 2))G"
echo "pool vs no pool: swap-out $(calc "$pool_out / $nopool_out")x, swap-in $(calc "$pool_in / $nopool_in")x"
echo "logs in $OUT"
exit $fail
