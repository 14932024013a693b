#!/usr/bin/env bash
# Description: the disk tier on a real GPU (issue 30, notebook_bench): six PyTorch "notebooks"
# (examples/pytorch/notebook.py) of 20-30 GiB each share one GPU under
# `cudaw run --share --spill-dir DIR`. Each computes for COMPUTE s, then idles for IDLE s, ROUNDS
# times: together far more than the host holds, so cudawd moves the idle ones' images to disk.
# Targets, each printed with its figure:
#   - every notebook's checksum is the one of its solo run (run natively first, without idling);
#   - no compute phase waits longer than TURN + 1.3 x (size / disk read + size / H2D), where the
#     wait is the phase's time shared less its time solo, the disk read rate is measured here
#     (O_DIRECT reads of a file in the spill directory) and H2D is the pinned ceiling
#     (ckpt_mem_helper ceiling), both in this run;
#   - MemAvailable, sampled every 0.5 s while they run, never drops below 4 GiB.
# cudawd (the one `cudaw run --share` started in this run's own run dir) is stopped by pid when
# this ends, failures included. Exit 0: all targets met; 1: one missed or a notebook failed;
# 77: no GPU.
# Usage: tests/sched/notebook_bench.sh <cudaw build dir> [out dir]
# Environment: SIZES ("20 22 24 26 28 30" GiB), COMPUTE (5 s), IDLE (60 s), ROUNDS (3), TURN (the
# longest another notebook may hold the GPU before a waiting one's turn: COMPUTE), SPILL_DIR
# (<out dir>/spill; must be on a disk), PYTHON (python3), MIN_AVAILABLE_GIB (4), CUDAWD_ARGS
# (start cudawd here with these options, e.g. --device-memory 81559M; default: the one
# `cudaw run --share` starts).
set -u
B=$(cd "${1:?usage: notebook_bench.sh <build dir> [out dir]}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${2:-/tmp/cudaw-notebook-bench}
SIZES=${SIZES:-"20 22 24 26 28 30"}
COMPUTE=${COMPUTE:-5}
IDLE=${IDLE:-60}
ROUNDS=${ROUNDS:-3}
TURN=${TURN:-$COMPUTE}
PY=${PYTHON:-python3}
NB="$SRC/examples/pytorch/notebook.py"
MIN_AVAIL=${MIN_AVAILABLE_GIB:-4}
HELPER="$B/tests/gpu/ckpt_mem_helper"
calc() { awk "BEGIN { printf \"%.2f\", $1 }"; }
# cudawd's lines with the time they were written (bash's clock): a wait over its bound is read
# against the spills, reads and swaps around it.
stamp() { while IFS= read -r line; do printf '%s %s\n' "${EPOCHREALTIME:-$(date +%s.%N)}" "$line"; done; }

[ -x "$HELPER" ] || { echo "no $HELPER (built with nvcc only)"; exit 1; }
ceiling=$("$HELPER" ceiling 2>&1)
h2d=$(echo "$ceiling" | awk '$1 == "d2h" { print $4 }')
if [ -z "$h2d" ]; then
  echo "skipped: no GPU: ${ceiling#skipped: no GPU }" | head -1
  exit 77
fi
"$PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null ||
  { echo "skipped: no PyTorch with CUDA for $PY"; exit 77; }
rm -rf "$OUT"; mkdir -p "$OUT/run"
SPILL_DIR=${SPILL_DIR:-$OUT/spill}
mkdir -p "$SPILL_DIR"
export CUDAW_RUN_DIR="$OUT/run"

pids=(); sampler=""; daemon=""
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null
  if [ -n "$daemon" ] && kill -0 "$daemon" 2>/dev/null; then
    kill "$daemon"
    for _ in $(seq 50); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$daemon" 2>/dev/null
  fi
}
trap cleanup EXIT

# The disk's read rate where the images go: 8 GiB written, then read back with O_DIRECT (no page
# cache on either side).
dd if=/dev/zero of="$SPILL_DIR/probe" bs=64M count=128 oflag=direct status=none ||
  { echo "cannot write to $SPILL_DIR"; exit 1; }
t0=$(date +%s.%N)
dd if="$SPILL_DIR/probe" of=/dev/null bs=64M iflag=direct status=none
disk=$(calc "8 * 1.073741824 / ($(date +%s.%N) - $t0)")
rm -f "$SPILL_DIR/probe"
steps=$("$PY" "$NB" calibrate "$COMPUTE" 2>/dev/null | awk '/^STEPS/ { print $2 }')
[ -n "$steps" ] || { echo "calibration failed"; exit 1; }
echo "disk read $disk GB/s, pinned H2D $h2d GB/s; notebooks of $SIZES GiB, $steps steps" \
     "(~$COMPUTE s) then $IDLE s idle, $ROUNDS times; turn $TURN s"

fail=0
# Solo, natively and without idling: the checksums and each phase's time alone.
i=0
for gib in $SIZES; do
  i=$((i + 1))
  "$PY" "$NB" "$gib" "$steps" 0 "$ROUNDS" > "$OUT/solo$i.log" 2>&1 ||
    { echo "notebook $i ($gib GiB) failed solo"; tail -3 "$OUT/solo$i.log"; exit 1; }
done

# MemAvailable every 0.5 s, the least kept.
( least=""
  while :; do
    a=$(awk '$1 == "MemAvailable:" { print $2 }' /proc/meminfo)
    if [ -z "$least" ] || [ "$a" -lt "$least" ]; then least=$a; echo "$least" > "$OUT/least_kb"; fi
    sleep 0.5
  done ) &
sampler=$!

# CUDAWD_ARGS: cudawd started here with those options (--device-memory 81559M: an H100's room on
# a larger GPU); the notebooks' `cudaw run --share` joins it.
if [ -n "${CUDAWD_ARGS:-}" ]; then
  "$B/bin/cudawd" --spill-dir "$SPILL_DIR" $CUDAWD_ARGS > >(stamp >> "$OUT/run/cudawd.log") 2>&1 &
  daemon=$!
  for _ in $(seq 50); do [ -S "$CUDAW_RUN_DIR/cudawd.sock" ] && break; sleep 0.1; done
  [ -S "$CUDAW_RUN_DIR/cudawd.sock" ] || { echo "cudawd $CUDAWD_ARGS did not start"; exit 1; }
fi
i=0
for gib in $SIZES; do
  i=$((i + 1))
  spill=(--spill-dir "$SPILL_DIR") # for the cudawd it starts; ours has it already
  [ -n "${CUDAWD_ARGS:-}" ] && spill=()
  CUDAW_LOG=info CUDAW_LOG_FILE="$OUT/cudaw$i.log" "$B/bin/cudaw" run --share \
    "${spill[@]}" -- "$PY" "$NB" "$gib" "$steps" "$IDLE" "$ROUNDS" \
    > "$OUT/shared$i.log" 2>&1 &
  pids+=($!)
  if [ $i -eq 1 ] && [ -z "$daemon" ]; then # the cudawd it starts: ours to stop at the end
    for _ in $(seq 100); do
      for p in $(pgrep -x cudawd); do
        tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "CUDAW_RUN_DIR=$CUDAW_RUN_DIR" &&
          daemon=$p
      done
      [ -n "$daemon" ] && break
      sleep 0.1
    done
    [ -n "$daemon" ] || { echo "cudawd did not start (see $OUT/run/cudawd.log)"; exit 1; }
  fi
  sleep 1
done
: > "$OUT/sched.json"
while :; do
  alive=0
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  [ $alive -eq 1 ] || break
  "$B/bin/cudaw-ctl" --json sched > "$OUT/sched.tmp" 2>/dev/null && mv "$OUT/sched.tmp" "$OUT/sched.json"
  sleep 1
done
i=0
for p in "${pids[@]}"; do
  i=$((i + 1))
  wait "$p" || { echo "notebook $i failed shared (rc $?)"; tail -3 "$OUT/shared$i.log"; fail=1; }
done
pids=()
"$B/bin/cudaw-ctl" sched > "$OUT/sched.txt" 2>&1

i=0
for gib in $SIZES; do
  i=$((i + 1))
  solo=$(awk -F= '/done checksum/ { print $2 }' "$OUT/solo$i.log")
  shared=$(awk -F= '/done checksum/ { print $2 }' "$OUT/shared$i.log")
  if [ -n "$solo" ] && [ "$solo" = "$shared" ]; then
    echo "notebook $i ($gib GiB): checksum $shared, identical to its solo run"
  else
    echo "notebook $i ($gib GiB): checksum '$shared' differs from its solo run's '$solo'"; fail=1
  fi
  bound=$(calc "$TURN + 1.3 * ($gib * 1.073741824 / $disk + $gib * 1.073741824 / $h2d)")
  for r in $(seq "$ROUNDS"); do
    alone=$(awk -v r="$r" '$2 == "round" && $3 == r { print $5 }' "$OUT/solo$i.log")
    took=$(awk -v r="$r" '$2 == "round" && $3 == r { print $5 }' "$OUT/shared$i.log")
    [ -n "$alone" ] && [ -n "$took" ] || { echo "  round $r: no time logged"; fail=1; continue; }
    wait_s=$(calc "$took - $alone")
    ok=$(awk "BEGIN { print ($wait_s <= $bound) }")
    echo "  round $r: waited $wait_s s (phase $took s shared, $alone s solo), bound $bound s:" \
         "$([ "$ok" = 1 ] && echo met || echo MISSED)"
    [ "$ok" = 1 ] || fail=1
  done
done
least_kb=$(cat "$OUT/least_kb" 2>/dev/null || echo 0)
least=$(calc "$least_kb / 1048576")
ok=$(awk "BEGIN { print ($least >= $MIN_AVAIL) }")
echo "least MemAvailable while they ran: $least GiB (target >= $MIN_AVAIL GiB):" \
     "$([ "$ok" = 1 ] && echo met || echo MISSED)"
[ "$ok" = 1 ] || fail=1
echo "cudawd (pid $daemon): $(grep -c 'spilled:' "$OUT/run/cudawd.log") spills," \
     "$(grep -c 'read back from disk ahead' "$OUT/run/cudawd.log") read-backs ahead of a turn," \
     "$(grep -c 'swapped in from disk' "$OUT/run/cudawd.log") resumes from disk," \
     "$(grep -c 'not swapping' "$OUT/run/cudawd.log") swaps refused for host room"
grep -E "spilling pid|read back from disk|not reading|not spilling|swapped in from disk|not swapping|failed" \
  "$OUT/run/cudawd.log" | sed 's/^/  /' | head -30
exit $fail
