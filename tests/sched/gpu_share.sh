#!/usr/bin/env bash
# GPU-sharing acceptance and benchmark on a real GPU (issue 12): three PyTorch training jobs that
# each hold ~55% of the GPU (share_train.py: an MLP plus a ballast tensor), first natively one
# after another (the solo runs: loss sequences and time), then all three at once under
# `cudaw run --share` with cudawd at its default quantum: each job's losses must be identical to
# its solo run. Prints the total times, every swap's size and rate, each job's GPU time, and what
# unified-memory oversubscription (the nvshare approach) costs on the same GPU.
# Usage: tests/sched/gpu_share.sh <cudaw build dir> <out dir>
# Environment: BALLAST_GIB (40), JOB_SECONDS (35: GPU work per job), QUANTUM (cudawd's default).
set -u
B=$(cd "${1:?usage: gpu_share.sh <build dir> <out dir>}" && pwd)
OUT=${2:?out dir}
mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
TRAIN="$HERE/share_train.py"
GIB=${BALLAST_GIB:-40}
export CUDAW_RUN_DIR=/tmp/cudaw-share-run
rm -rf "$CUDAW_RUN_DIR"
now() { date +%s.%N; }
elapsed() { "$PY" -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }

cal=$(timeout 90 "$PY" "$TRAIN" --calibrate "${JOB_SECONDS:-35}" 2>&1 | grep '^STEPS')
steps=$(echo "$cal" | awk '{print $2}')
echo "calibration: $cal"
[ -n "$steps" ] || { echo "calibration failed"; exit 1; }

# 1. Solo runs, one after another, natively.
t0=$(now)
for j in 1 2 3; do
  timeout 100 "$PY" "$TRAIN" --seed $j --steps "$steps" --ballast-gib "$GIB" \
    --record "$OUT/solo$j.loss" > "$OUT/solo$j.log" 2>&1
  echo "solo job $j: rc=$? $(grep -E '^times' "$OUT/solo$j.log")"
done
t_seq=$(elapsed "$t0" "$(now)")
echo "one after another (native): ${t_seq} s"

# 2. The three at once under cudaw run --share.
quantum=()
[ -n "${QUANTUM:-}" ] && quantum=(--quantum "$QUANTUM")
mkdir -p "$CUDAW_RUN_DIR"
"$B/bin/cudawd" "${quantum[@]}" --metrics-file "$OUT/metrics.prom" > "$OUT/cudawd.log" 2>&1 &
daemon=$!
sleep 0.5
t0=$(now)
pids=()
for j in 1 2 3; do
  CUDAW_LOG_FILE="$OUT/shared$j.cudawlog" timeout 300 "$B/bin/cudaw" run --share -- \
    "$PY" "$TRAIN" --seed $j --steps "$steps" --ballast-gib "$GIB" --check "$OUT/solo$j.loss" \
    > "$OUT/shared$j.log" 2>&1 &
  pids+=($!)
done
( while kill -0 $daemon 2>/dev/null; do
    echo "--- $(date +%T)"; "$B/bin/cudaw-ctl" sched 2>&1
    nvidia-smi --query-gpu=memory.used --format=csv,noheader; sleep 2
  done ) > "$OUT/sched_timeline.log" 2>&1 &
watcher=$!
for j in 1 2 3; do
  wait "${pids[$((j - 1))]}"
  echo "shared job $j: rc=$? $(grep -E '^check|^ballast' "$OUT/shared$j.log" | tr '\n' ' ')"
done
t_shared=$(elapsed "$t0" "$(now)")
echo "all three under cudaw run --share: ${t_shared} s; ratio to one after another: $("$PY" -c "import sys; print('%.3f' % (float(sys.argv[1]) / float(sys.argv[2])))" "$t_shared" "$t_seq")"
"$B/bin/cudaw-ctl" sched
"$B/bin/cudaw-ctl" --json sched > "$OUT/sched_final.json"
cat "$OUT/sched_final.json"
kill $daemon; wait $daemon 2>/dev/null; kill $watcher 2>/dev/null
echo "swaps (cudawd log; pinned copy ceilings on this H100: D2H 55 GB/s, H2D 49-55 GB/s):"
grep -E "swapped|failed" "$OUT/cudawd.log"
grep -h -iE "warn|error" "$OUT"/shared*.cudawlog 2>/dev/null | sort | uniq -c | head -10
for j in 1 2 3; do echo "shared job $j: $(grep -E '^times' "$OUT/shared$j.log")"; done

# 3. The nvshare approach's mechanism: unified memory beyond the device.
if [ -x "$B/tests/sched/sched_um_oversub" ]; then
  echo "unified-memory oversubscription (native, no cudaw):"
  timeout 120 "$B/tests/sched/sched_um_oversub" 1.1 2 2>&1
fi
