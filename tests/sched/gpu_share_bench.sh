#!/usr/bin/env bash
# GPU-time shares on a real GPU (issue 24, part 4): a compute-bound job (gpu_share_loop.cu, one
# kernel of ~KERNEL_MS ms at a time, synchronising every 16) measured
#   1. alone, natively and under cudaw without a share, alternately (RUNS times each): the
#      overhead of cudaw for an unlimited program = 1 - cudaw rate / native rate (target <= 1%);
#   2. two copies at once under cudaw, unlimited (reference: how the GPU splits by itself);
#   3. two copies at once with CUDAW_GPU_SHARE=70 and 30: each one's rate as a share of the native
#      solo rate (target: within 5 points of 70 and 30), and the GPU time cudaw measured for each
#      (cudaw-ctl limit <pid>, read mid-run).
# Prints every figure and exits 1 when a target is missed, 77 without a GPU.
# Usage: tests/sched/gpu_share_bench.sh <cudaw build dir> [out dir]
# Environment: SECONDS_EACH (10), RUNS (3), KERNEL_MS (2), SHARE_A (70), SHARE_B (30), JOB (the
# job program; tests/sched/sched_gpu_share_loop of the build).
# (cudaw run execs the job, so the pid of `cudaw run` is the job's.)
set -u
B=$(cd "${1:?usage: gpu_share_bench.sh <build dir> [out dir]}" && pwd)
OUT=${2:-/tmp/cudaw-gpu-share-bench}
mkdir -p "$OUT"
JOB=${JOB:-"$B/tests/sched/sched_gpu_share_loop"}
[ -x "$JOB" ] || { echo "no $JOB (built with nvcc only)"; exit 1; }
SECS=${SECONDS_EACH:-10}
RUNS=${RUNS:-3}
A=${SHARE_A:-70}
S_B=${SHARE_B:-30}
export CUDAW_RUN_DIR="$OUT/run"
rm -rf "$CUDAW_RUN_DIR"; mkdir -p "$CUDAW_RUN_DIR"
calc() { awk "BEGIN { printf \"%.2f\", $1 }"; }
rate_of() { awk '/^RATE/ { print $2 }' "$1"; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

cal=$("$JOB" --calibrate "${KERNEL_MS:-2}" 2>&1)
rc=$?
[ $rc -eq 77 ] && { echo "$cal"; exit 77; }
iters=$(echo "$cal" | awk '/^ITERS/ { print $2 }')
[ -n "$iters" ] || { echo "calibration failed: $cal"; exit 1; }
echo "kernel: $iters iterations per thread (~${KERNEL_MS:-2} ms alone); $SECS s per run"

# 1. Alone: native and under cudaw (no share), alternately.
native=(); wrapped=()
for r in $(seq 1 "$RUNS"); do
  "$JOB" "$SECS" "$iters" > "$OUT/native$r.log" 2>&1 || { cat "$OUT/native$r.log"; exit 1; }
  native+=("$(rate_of "$OUT/native$r.log")")
  "$B/bin/cudaw" run -- "$JOB" "$SECS" "$iters" > "$OUT/cudaw$r.log" 2>&1 ||
    { cat "$OUT/cudaw$r.log"; exit 1; }
  wrapped+=("$(rate_of "$OUT/cudaw$r.log")")
  echo "run $r: native ${native[-1]} kernels/s, under cudaw ${wrapped[-1]} kernels/s"
done
solo=$(median "${native[@]}")
under=$(median "${wrapped[@]}")
overhead=$(calc "100 * (1 - $under / $solo)")
echo "alone (median of $RUNS): native $solo kernels/s, under cudaw without a share $under; overhead ${overhead}% (target <= 1%)"

# 2 and 3. Two at once: unlimited, then limited A/B.
pair() { # label shareA shareB
  local label=$1 pa pb
  env ${2:+CUDAW_GPU_SHARE=$2} "$B/bin/cudaw" run -- "$JOB" "$SECS" "$iters" > "$OUT/${label}_a.log" 2>&1 &
  pa=$!
  env ${3:+CUDAW_GPU_SHARE=$3} "$B/bin/cudaw" run -- "$JOB" "$SECS" "$iters" > "$OUT/${label}_b.log" 2>&1 &
  pb=$!
  sleep $(calc "$SECS / 2")
  for p in $pa $pb; do "$B/bin/cudaw-ctl" limit "$p" 2>&1; done > "$OUT/${label}_measured.txt"
  wait $pa; local ra=$?; wait $pb; local rb=$?
  [ $ra -eq 0 ] && [ $rb -eq 0 ] || { echo "$label: a job failed"; cat "$OUT/${label}"_?.log; exit 1; }
}
pair free "" ""
fa=$(rate_of "$OUT/free_a.log"); fb=$(rate_of "$OUT/free_b.log")
echo "two at once, no shares: $fa and $fb kernels/s = $(calc "100 * $fa / $solo")% and $(calc "100 * $fb / $solo")% of alone"
pair limited "$A" "$S_B"
la=$(rate_of "$OUT/limited_a.log"); lb=$(rate_of "$OUT/limited_b.log")
pa=$(calc "100 * $la / $solo"); pb=$(calc "100 * $lb / $solo")
echo "two at once, shares $A/$S_B: $la and $lb kernels/s = ${pa}% and ${pb}% of alone (target $A and $S_B, within 5 points);"
echo "  of their sum: $(calc "100 * $la / ($la + $lb)")% and $(calc "100 * $lb / ($la + $lb)")%"
echo "  what cudaw measured mid-run:"; sed 's/^/    /' "$OUT/limited_measured.txt"

fail=0
awk "BEGIN { exit !($overhead <= 1.0) }" || { echo "MISSED: overhead ${overhead}% > 1%"; fail=1; }
awk "BEGIN { d = $pa - $A; exit !(d <= 5 && d >= -5) }" || { echo "MISSED: job A ${pa}% vs $A%"; fail=1; }
awk "BEGIN { d = $pb - $S_B; exit !(d <= 5 && d >= -5) }" || { echo "MISSED: job B ${pb}% vs $S_B%"; fail=1; }
[ $fail -eq 0 ] && echo "all targets met"
exit $fail
