#!/usr/bin/env bash
# A checkpoint from outside while a texture object over pitched memory is alive, on the GPU:
# under remap it pauses and resumes and the texture still reads the right texels; under translate
# it is refused with a reason naming the texture, and the program goes on. Prints a Markdown row
# per policy; exit 1 when either does otherwise.
# Usage: texture_checkpoint.sh <cudaw lib dir> <cudaw-ctl> <c02_texture_pitch2d binary> <work dir>
set -u
LIB=$(cd "$1" && pwd) CTL=$2 BIN=$3
WORK=$(mkdir -p "$4" && cd "$4" && pwd)
bad=0
echo "| policy | checkpoint with a live texture | resume | program |"
echo "| --- | --- | --- | --- |"
for mode in remap translate; do
  log="$WORK/log/texture_checkpoint.$mode"
  CUDAW_RUN_DIR="$WORK/run" CUDAW_VMEM=$mode LD_LIBRARY_PATH="$LIB" "$BIN" --hold > "$log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q '^HOLD' "$log" && break; sleep 0.05; done
  checkpoint=$(CUDAW_RUN_DIR="$WORK/run" "$CTL" checkpoint $pid 2>&1); rc=$?
  resume="-"
  if [ $rc -eq 0 ]; then
    resume=$(CUDAW_RUN_DIR="$WORK/run" "$CTL" resume $pid 2>&1 | head -1 | cut -c1-80)
  fi
  wait $pid; prc=$?
  outcome=$(grep -m1 -E '^(PASS|WRONG|ERROR)' "$log" | cut -c1-60)
  echo "| $mode | exit $rc: $(echo "$checkpoint" | head -1 | cut -c1-170) | $resume | $outcome |"
  case $mode in
    remap) [ $rc -eq 0 ] && [ $prc -eq 0 ] || bad=1 ;;
    translate) [ $rc -eq 1 ] && echo "$checkpoint" | grep -q texture && [ $prc -eq 0 ] || bad=1 ;;
  esac
done
exit $bad
