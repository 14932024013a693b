#!/usr/bin/env bash
# GPU-sharing soak on a real GPU (issue 24): 6 PyTorch training jobs (tests/sched/share_train.py)
# holding 25-60% of the GPU each, run natively alone first (their losses), then all six under
# `cudaw run --share`, started together and then staggered (2-10 s apart). Every job must exit 0
# with losses identical to its solo run and ballast intact; cudawd's log must show no failed
# allocation. Exit 0: all held; 1: a job failed or differed; 77: no GPU.
# Usage: examples/pytorch/share_soak.sh <cudaw build dir> <out dir>
# Environment: JOB_SECONDS (20: GPU work per job), SEED (1: sizes and delays), PYTHON, MODES
# ("together staggered"), MODE_TIMEOUT (900: a mode still running then is stopped: its jobs are
# killed, cudawd's table and each job's last lines printed; the soak fails). While a mode runs,
# `cudaw-ctl sched` is appended to <out dir>/<mode>.snap every 10 s.
set -u
B=$(cd "${1:?usage: share_soak.sh <build dir> <out dir>}" && pwd)
OUT=${2:?out dir}
mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
TRAIN="$HERE/../../tests/sched/share_train.py"
export CUDAW_RUN_DIR=/tmp/cudaw-share-soak
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 77)" || exit 77
total_gib=$("$PY" -c "import torch; print('%.1f' % (torch.cuda.get_device_properties(0).total_memory / 2**30))")
RANDOM=${SEED:-1}
gib=(); delay=()
for j in 1 2 3 4 5 6; do
  pct=$((25 + RANDOM % 36))
  gib+=("$("$PY" -c "print('%.1f' % ($total_gib * $pct / 100 - 1.0))")") # ~1 GiB: model, context
  delay+=($((2 + RANDOM % 9)))
done
echo "GPU ${total_gib} GiB; ballast GiB per job: ${gib[*]}; staggered delays: ${delay[*]} s"
steps=$(timeout 120 "$PY" "$TRAIN" --calibrate "${JOB_SECONDS:-20}" 2>&1 | awk '/^STEPS/ {print $2}')
[ -n "$steps" ] || { echo "calibration failed"; exit 1; }

fail=0
t_solo=$(date +%s.%N)
for j in 1 2 3 4 5 6; do
  timeout 300 "$PY" "$TRAIN" --seed $j --steps "$steps" --ballast-gib "${gib[$((j-1))]}" \
    --record "$OUT/solo$j.loss" > "$OUT/solo$j.log" 2>&1 || { echo "solo job $j failed"; fail=1; }
done

solo_s=$(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t_solo }")
echo "solo runs, one after another: $solo_s s"
for mode in ${MODES:-together staggered}; do
  rm -rf "$CUDAW_RUN_DIR"; mkdir -p "$CUDAW_RUN_DIR"
  t_mode=$(date +%s.%N)
  "$B/bin/cudawd" --metrics-file "$OUT/$mode.prom" > "$OUT/$mode.cudawd.log" 2>&1 &
  daemon=$!
  sleep 0.5
  pids=()
  for j in 1 2 3 4 5 6; do
    [ "$mode" = staggered ] && [ $j -gt 1 ] && sleep "${delay[$((j-1))]}"
    CUDAW_LOG_FILE="$OUT/$mode$j.cudawlog" timeout 1200 "$B/bin/cudaw" run --share -- \
      "$PY" "$TRAIN" --seed $j --steps "$steps" --ballast-gib "${gib[$((j-1))]}" \
      --check "$OUT/solo$j.loss" > "$OUT/$mode$j.log" 2>&1 &
    pids+=($!)
  done
  # Snapshots, and the mode's deadline.
  ( while sleep 10; do
      { echo "== $(date +%T)"; "$B/bin/cudaw-ctl" sched 2>&1; } >> "$OUT/$mode.snap"
    done ) &
  watcher=$!
  ( sleep "${MODE_TIMEOUT:-900}"
    echo "$mode: not done after ${MODE_TIMEOUT:-900} s: stopping it. cudawd's table:"
    "$B/bin/cudaw-ctl" sched 2>&1
    for j in 1 2 3 4 5 6; do echo "-- job $j:"; tail -3 "$OUT/$mode$j.log"; done
    kill "${pids[@]}" 2>/dev/null ) &
  deadline=$!
  for j in 1 2 3 4 5 6; do
    wait "${pids[$((j-1))]}"; rc=$?
    ok=$(grep -c "^check: ok" "$OUT/$mode$j.log")
    intact=$(grep -c "intact" "$OUT/$mode$j.log")
    echo "$mode job $j (${gib[$((j-1))]} GiB): rc=$rc losses identical=$ok ballast intact=$intact"
    [ $rc -eq 0 ] && [ "$ok" -eq 1 ] && [ "$intact" -eq 1 ] || fail=1
  done
  kill "$watcher" "$deadline" 2>/dev/null; wait "$watcher" "$deadline" 2>/dev/null
  mode_s=$(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t_mode }")
  echo "$mode: all six done in $mode_s s; one after another natively: $solo_s s (ratio $(awk "BEGIN { printf \"%.2f\", $mode_s / $solo_s }"))"
  "$B/bin/cudaw-ctl" sched
  "$B/bin/cudaw-ctl" --json sched > "$OUT/$mode.json"
  grep -E "swapped|failed|UNSCHEDULED" "$OUT/$mode.cudawd.log" "$OUT"/$mode*.cudawlog | tail -40
  if grep -q "OutOfMemory\|out of memory" "$OUT"/$mode[1-6].log; then
    echo "$mode: an allocation failed"; fail=1
  fi
  # cudawd's own count of allocations whose error went back to a program: must be 0 for all.
  failed=$(grep -o '"failed_allocations":[0-9]*' "$OUT/$mode.json" | grep -vc ':0$')
  retries=$(grep -o '"alloc_retries":[0-9]*' "$OUT/$mode.json" | awk -F: '{s += $2} END {print s + 0}')
  echo "$mode: programs with failed allocations: $failed; granted allocations retried: $retries"
  [ "$failed" -eq 0 ] || fail=1
  kill "$daemon"; wait "$daemon" 2>/dev/null
done
[ $fail -eq 0 ] && echo "share soak: all 12 runs identical to solo, 0 failed allocations"
exit $fail
