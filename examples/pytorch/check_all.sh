#!/usr/bin/env bash
# Runs examples/pytorch/train.py natively and under cudaw and compares, on a machine with a GPU:
# eager, CUDA graph, torch.compile and the cudaMallocAsync backend (loss sequences identical), a
# pause by SIGUSR1 mid-training resumed by cudaw-ctl (identical losses, device memory given back
# while paused), and the overheads (step time, `import torch; torch.ones(1).cuda()`).
# Usage: check_all.sh <cudaw build or install dir (with bin/cudaw, bin/cudaw-ctl)> [work dir]
# PARTS (environment) picks what runs: "modes pause overhead" by default.
set -u
BUILD=$(cd "${1:?usage: check_all.sh <cudaw build dir> [work dir]}" && pwd)
WORK=${2:-$(mktemp -d)}
mkdir -p "$WORK"
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
CUDAW="$BUILD/bin/cudaw"
CTL="$BUILD/bin/cudaw-ctl"
TRAIN="$HERE/train.py"
STEPS=${STEPS:-40}
PARTS=${PARTS:-modes pause overhead}
failures=0
result() { echo "RESULT $1: $2"; [ "$2" = ok ] || failures=$((failures + 1)); }

# 1. Each mode, native then under cudaw: the loss sequences must be bit-identical.
for mode in eager graph compile async expandable; do
  [[ " $PARTS " == *" modes "* ]] || break
  args=(--steps "$STEPS"); envs=()
  case $mode in
    graph) args+=(--graph) ;;
    compile) args+=(--compile) ;;
    async) envs=(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync) ;;
    expandable) envs=(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) ;;
  esac
  env "${envs[@]}" "$PY" "$TRAIN" "${args[@]}" --record "$WORK/$mode.native" \
    > "$WORK/$mode.native.log" 2>&1 || { result "$mode native run" "FAILED (see $WORK/$mode.native.log)"; tail -5 "$WORK/$mode.native.log"; continue; }
  env "${envs[@]}" CUDAW_LOG=info CUDAW_LOG_FILE="$WORK/$mode.cudaw.cudawlog" "$CUDAW" run -- "$PY" "$TRAIN" "${args[@]}" \
    --check "$WORK/$mode.native" > "$WORK/$mode.cudaw.log" 2>&1
  # Identical losses prove nothing unless cudaw virtualised the job under the policy asked for.
  policy=${CUDAW_VMEM:-auto}; [ "$policy" = auto ] && policy="remap|translate"
  if ! grep -qE "vmem: policy ($policy)," "$WORK/$mode.cudaw.cudawlog"; then
    result "$mode under cudaw" "FAILED (cudaw's log shows no vmem under policy $policy)"
  elif grep -q "^check: ok" "$WORK/$mode.cudaw.log"; then result "$mode under cudaw" ok
  else result "$mode under cudaw" "FAILED"; tail -8 "$WORK/$mode.cudaw.log"; tail -5 "$WORK/$mode.cudaw.cudawlog" 2>/dev/null; fi
done

# 2. Pause by SIGUSR1 at a known step (a pause file holds the job between steps so the signal
#    lands while it runs nothing), check the memory is given back, resume with cudaw-ctl.
#    PAUSE_ALLOC_CONF sets PYTORCH_CUDA_ALLOC_CONF for it (e.g. expandable_segments:True).
if [[ " $PARTS " == *" pause "* ]]; then
[ -n "${PAUSE_ALLOC_CONF:-}" ] && export PYTORCH_CUDA_ALLOC_CONF=$PAUSE_ALLOC_CONF
pause_file="$WORK/hold"
"$PY" "$TRAIN" --steps "$STEPS" --record "$WORK/pause.native" > "$WORK/pause.native.log" 2>&1
touch "$pause_file"
CUDAW_LOG=info CUDAW_LOG_FILE="$WORK/pause.cudawlog" "$CUDAW" run -- "$PY" "$TRAIN" --steps "$STEPS" \
  --pause-file "$pause_file" --check "$WORK/pause.native" > "$WORK/pause.cudaw.log" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "^step 0 " "$WORK/pause.cudaw.log" && break; sleep 0.1; done
used_before=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | awk -F', ' -v p=$pid '$1==p{print $2}')
kill -USR1 $pid
state=""
for _ in $(seq 300); do state=$("$CTL" status $pid 2>&1); case $state in *paused*) break ;; esac; sleep 0.1; done
echo "status while paused: $state"
sleep 1
used_paused=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | awk -F', ' -v p=$pid '$1==p{print $2}')
echo "device memory of the job (nvidia-smi, MiB): before pause ${used_before:-?}, paused ${used_paused:-0 (not listed)}"
"$CTL" resume $pid; echo "cudaw-ctl resume: exit $?"
( sleep 120; kill -9 $pid 2>/dev/null ) & watchdog=$!
rm -f "$pause_file"
wait $pid
kill $watchdog 2>/dev/null
if grep -q "^check: ok" "$WORK/pause.cudaw.log" && [[ $state == *paused* ]]; then result "pause/resume mid-training" ok
else result "pause/resume mid-training" FAILED; tail -8 "$WORK/pause.cudaw.log"; tail -8 "$WORK/pause.cudawlog"; fi
unset PYTORCH_CUDA_ALLOC_CONF
fi

# 3. Overheads, alternating native and cudaw runs; medians.
if [[ " $PARTS " == *" overhead "* ]]; then
TIMEFORMAT=%R
median() { sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
for i in 1 2 3 4 5; do
  "$PY" "$TRAIN" --steps 60 --time 2>&1 | awk '/median step/{print $4}' >> "$WORK/step.native"
  "$CUDAW" run -- "$PY" "$TRAIN" --steps 60 --time 2>&1 | awk '/median step/{print $4}' >> "$WORK/step.cudaw"
  { time "$PY" -c "import torch; torch.ones(1).cuda()"; } 2>> "$WORK/start.native"
  { time "$CUDAW" run -- "$PY" -c "import torch; torch.ones(1).cuda()"; } 2>> "$WORK/start.cudaw"
done
sn=$(median < "$WORK/step.native"); sc=$(median < "$WORK/step.cudaw")
tn=$(median < "$WORK/start.native"); tc=$(median < "$WORK/start.cudaw")
echo "step time: native ${sn} ms, cudaw ${sc} ms, ratio $(awk -v a=$sc -v b=$sn 'BEGIN{printf "%.3f", a/b}') (goal <= 1.02)"
echo "start-up:  native ${tn} s, cudaw ${tc} s, ratio $(awk -v a=$tc -v b=$tn 'BEGIN{printf "%.3f", a/b}') (goal <= 1.10)"
fi
echo "pytorch checks: $failures failed"
exit $((failures > 0))
