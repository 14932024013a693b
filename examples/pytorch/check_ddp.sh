#!/usr/bin/env bash
# Runs examples/pytorch/ddp.py (torch.distributed, NCCL, 2 ranks on 2 GPUs) natively and under
# cudaw and compares every rank's per-step losses bit for bit; then again under cudaw with group
# pauses mid-training (cudaw-ctl checkpoint --group / resume --group over both ranks), which must
# not change a bit either, and reports what each rank kept on its GPU while paused.
# Usage: check_ddp.sh <cudaw build or install dir (bin/cudaw, bin/cudaw-ctl)> [work dir]
# STEPS (default 40), PAUSES (default 3). Needs two GPUs (exit 77 otherwise). Multicast stays off.
set -u
BUILD=$(cd "${1:?usage: check_ddp.sh <cudaw build dir> [work dir]}" && pwd)
WORK=${2:-$(mktemp -d)}
mkdir -p "$WORK"
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
CUDAW="$BUILD/bin/cudaw"
CTL="$BUILD/bin/cudaw-ctl"
DDP="$HERE/ddp.py"
STEPS=${STEPS:-40}
PAUSES=${PAUSES:-3}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDAW_RUN_DIR=${CUDAW_RUN_DIR:-$WORK/run}
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "${n:-0}" -ge 2 ] || { echo "skipped: fewer than two GPUs (${n:-0})"; exit 77; }
failures=0
result() { echo "RESULT $1: $2"; [ "$2" = ok ] || failures=$((failures + 1)); }
checked() { [ "$(grep -c "check: ok" "$1")" -eq 2 ]; }
used_by() { nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
            awk -F', ' -v p="$1" '$1==p{print $2}'; }

# 1. Native, then under cudaw: identical losses on both ranks.
"$PY" "$DDP" --steps "$STEPS" --port 29531 --record "$WORK/native" > "$WORK/native.log" 2>&1 \
  || { result "native run" "FAILED (see $WORK/native.log)"; tail -20 "$WORK/native.log"; exit 1; }
CUDAW_LOG=info "$CUDAW" run -- "$PY" "$DDP" --steps "$STEPS" --port 29532 --check "$WORK/native" \
  > "$WORK/cudaw.log" 2>&1
if checked "$WORK/cudaw.log"; then result "DDP under cudaw (2 ranks, NCCL)" ok
else result "DDP under cudaw (2 ranks, NCCL)" FAILED; grep -E "check|Error|error" "$WORK/cudaw.log" | tail -20; fi

# 2. Group pauses mid-training: both ranks held, drained, checkpointed, resumed together.
mkdir -p "$WORK/pids"; rm -f "$WORK/pids"/*
CUDAW_LOG=info "$CUDAW" run -- "$PY" "$DDP" --steps "$STEPS" --port 29533 --step-delay 0.2 \
  --pid-dir "$WORK/pids" --check "$WORK/native" > "$WORK/group.log" 2>&1 &
job=$!
for _ in $(seq 900); do grep -q "step 3 " "$WORK/group.log" && break; sleep 0.1; done
ranks="$(cat "$WORK/pids/rank0.pid" 2>/dev/null) $(cat "$WORK/pids/rank1.pid" 2>/dev/null)"
echo "ranks: $ranks"
paused_ok=0
for i in $(seq "$PAUSES"); do
  before="$(for p in $ranks; do echo -n "$(used_by "$p") "; done)"
  t0=$(date +%s.%N)
  "$CTL" checkpoint --group $ranks > "$WORK/pause$i.out" 2>&1; rc=$?
  t1=$(date +%s.%N)
  cat "$WORK/pause$i.out"
  states="$(for p in $ranks; do "$CTL" status "$p" 2>&1 | head -1; done)"
  echo "$states"
  sleep 1
  during="$(for p in $ranks; do echo -n "$(used_by "$p") "; done)"
  echo "pause $i: group checkpoint exit $rc in $(echo "$t1 - $t0" | bc) s; GPU MiB per rank before: $before, while paused: $during (empty: not listed)"
  "$CTL" resume --group $ranks; rrc=$?
  [ $rc -eq 0 ] && [ $rrc -eq 0 ] && [ "$(echo "$states" | grep -c ': paused')" -eq 2 ] && paused_ok=$((paused_ok + 1))
  sleep 2
done
( sleep 300; kill -9 $job 2>/dev/null ) & watchdog=$!
wait $job
kill $watchdog 2>/dev/null
if checked "$WORK/group.log" && [ $paused_ok -eq "$PAUSES" ]; then
  result "DDP with $PAUSES group pauses mid-training" ok
else
  result "DDP with $PAUSES group pauses mid-training" "FAILED ($paused_ok of $PAUSES pauses ok)"
  grep -E "check|Error|error|cudaw\[" "$WORK/group.log" | tail -30
fi
# User buffers registered with NCCL (exported vmem memory) are not safe to pause: say so if seen.
if grep -q "was exported to another process" "$WORK/cudaw.log" "$WORK/group.log"; then
  result "no vmem memory exported to peers (NCCL user-buffer registration)" \
    "FAILED (cudaw warned: see docs/multi_gpu.md)"
fi
echo "checks: $failures failed"
exit $((failures > 0))
