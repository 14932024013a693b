#!/usr/bin/env bash
# Nothing left on the GPU, images on disk and CRIU, with a PyTorch job holding GIB GiB more than
# its training (train.py --ballast-gib), on a machine with a GPU (run as root for CRIU):
#   release: cudaw-ctl checkpoint --release-all: the job holds 0 bytes (nvidia-smi), resumes with
#            losses identical to a native run; timed against the driver's checkpoint alone
#            (cudaw-ckpt-driver on the same job run natively);
#   disk:    cudaw-ctl checkpoint --to DIR: the job's RSS while paused, write and read GB/s
#            against the disk's own ceiling (dd with fsync / O_DIRECT, same size, same dir, one
#            stream and 16 at once);
#   criu:    cudaw-ctl dump, the process ends, cudaw-ctl restore, the losses go on identical.
# Usage: check_release.sh <cudaw build dir> [work dir]; GIB (16), STEPS (20), PARTS ("release
# disk criu"), CRIU (criu binary or wrapper; default: criu on PATH), ZSTD=1 (disk: also --zstd), DRIVER_ALONE=0 (release: skip the driver-only run).
set -u
BUILD=$(cd "${1:?usage: check_release.sh <cudaw build dir> [work dir]}" && pwd)
WORK=${2:-$(mktemp -d)}
mkdir -p "$WORK"
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
CUDAW="$BUILD/bin/cudaw"
CTL="$BUILD/bin/cudaw-ctl"
DRIVER="$BUILD/bin/cudaw-ckpt-driver"
TRAIN="$HERE/train.py"
GIB=${GIB:-16}
STEPS=${STEPS:-20}
PARTS=${PARTS:-release disk criu}
CRIU=${CRIU:-criu}
IMAGES=${IMAGES:-/tmp/cudaw-images}
failures=0
result() { echo "RESULT $1: $2"; [ "$2" = ok ] || failures=$((failures + 1)); }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.3f", b - a}'; }
gpu_of() { nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | awk -F', ' -v p="$1" '$1==p{print $2}'; }
gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
rss_of() { awk '/VmRSS/{printf "%.0f", $2/1024}' "/proc/$1/status" 2>/dev/null; }
hold="$WORK/hold"

# start <name> [cudaw|native]: the job, held after step 0; sets $pid.
start() {
  touch "$hold"
  local runner=()
  [ "${2:-cudaw}" = cudaw ] && runner=("$CUDAW" run --)
  setsid "${runner[@]}" "$PY" "$TRAIN" --steps "$STEPS" --ballast-gib "$GIB" --pause-file "$hold" \
    --check "$WORK/native" < /dev/null > "$WORK/$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 1200); do grep -q "^step 0 " "$WORK/$1.log" && break; sleep 0.1; done
  grep -q "^step 0 " "$WORK/$1.log" || { echo "job $1 did not start:"; tail -5 "$WORK/$1.log"; }
}
# finish <name> <what>: release the job, wait for it (child or not), check its losses.
finish() {
  rm -f "$hold"
  for _ in $(seq 1200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null
  if grep -q "^check: ok" "$WORK/$1.log" && grep -q "^ballast: ok" "$WORK/$1.log"; then result "$2" ok
  else result "$2" FAILED; tail -6 "$WORK/$1.log"; fi
}

"$PY" "$TRAIN" --steps "$STEPS" --ballast-gib "$GIB" --record "$WORK/native" > "$WORK/native.log" 2>&1 \
  || { echo "native run failed"; tail -5 "$WORK/native.log"; exit 1; }
echo "native: $(tail -2 "$WORK/native.log" | tr '\n' ' ')"

if [[ " $PARTS " == *" release "* ]]; then
  start release
  before=$(gpu_of $pid); t=$(now)
  "$CTL" checkpoint --release-all $pid; rc=$?; out_s=$(since "$t")
  sleep 1
  paused=$(gpu_of $pid)
  echo "release-all: job on the GPU before ${before:-?} MiB, paused ${paused:-0 MiB (not listed)}; GPU in use $(gpu_used) MiB"
  "$CTL" status $pid
  t=$(now); "$CTL" resume $pid; rc2=$?; in_s=$(since "$t")
  echo "release-all: checkpoint ${out_s} s (exit $rc), resume ${in_s} s (exit $rc2), wall time of cudaw-ctl"
  [ -z "$paused" ] && [ $rc -eq 0 ] && [ $rc2 -eq 0 ] || result "release-all: 0 bytes while paused" FAILED
  finish release "release-all pause/resume, losses identical"

  if [ "${DRIVER_ALONE:-1}" = 1 ]; then
  start driver native
  t=$(now); "$DRIVER" checkpoint $pid; d_out=$(since "$t")
  echo "driver alone: paused $(gpu_of $pid) MiB"
  t=$(now); "$DRIVER" restore $pid; d_in=$(since "$t")
  finish driver "driver checkpoint alone, losses identical"
  echo "driver alone (${GIB} GiB ballast): checkpoint ${d_out} s, restore ${d_in} s"
  echo "ratio driver/cudaw: checkpoint $(awk -v a=$d_out -v b=$out_s 'BEGIN{printf "%.1f", a/b}')x, resume $(awk -v a=$d_in -v b=$in_s 'BEGIN{printf "%.1f", a/b}')x (goal >= 5x)"
  fi
fi

if [[ " $PARTS " == *" disk "* ]]; then
  mkdir -p "$IMAGES"; rm -rf "$IMAGES"/*
  count=$(( (GIB + 1) * 16 ))  # 64 MiB blocks, about the image's size
  w=$(dd if=/dev/zero of="$IMAGES/ceiling" bs=64M count=$count conv=fsync 2>&1 | tail -1)
  r=$(dd if="$IMAGES/ceiling" of=/dev/null bs=64M iflag=direct 2>&1 | tail -1)
  echo "disk ceiling ($IMAGES, $(df -h "$IMAGES" | awk 'NR==2{print $1", "$2}')): write+fsync: $w"
  echo "disk ceiling: read O_DIRECT: $r"
  rm -f "$IMAGES/ceiling"
  # cudaw writes and reads its files with several threads: the same with 16 dd streams.
  each=$(( count / 16 + 1 )); t=$(now)
  for i in $(seq 16); do dd if=/dev/zero of="$IMAGES/ceiling.$i" bs=64M count=$each conv=fsync status=none & done; wait
  pw=$(since "$t"); t=$(now)
  for i in $(seq 16); do dd if="$IMAGES/ceiling.$i" of=/dev/null bs=64M iflag=direct status=none & done; wait
  pr=$(since "$t")
  echo "disk ceiling, 16 streams of $((each * 64)) MiB: write+fsync $(awk -v s=$pw -v n=$((each * 16)) 'BEGIN{printf "%.2f", n * 67108864 / s / 1e9}') GB/s, read O_DIRECT $(awk -v s=$pr -v n=$((each * 16)) 'BEGIN{printf "%.2f", n * 67108864 / s / 1e9}') GB/s"
  rm -f "$IMAGES"/ceiling.*
  start disk
  rss_run=$(rss_of $pid)
  "$CTL" checkpoint --to "$IMAGES/job" $pid; rc=$?
  echo "disk: RSS running ${rss_run} MiB, paused with the image on disk $(rss_of $pid) MiB; files: $(du -sh "$IMAGES/job" | cut -f1)"
  "$CTL" resume $pid; rc2=$?
  [ $rc -eq 0 ] && [ $rc2 -eq 0 ] || result "disk image checkpoint/resume" FAILED
  if [ "${ZSTD:-0}" = 1 ]; then  # the same job again, compressed
    rm -rf "$IMAGES/job"
    "$CTL" checkpoint --to "$IMAGES/job" --zstd $pid; rc=$?
    echo "disk, zstd: files $(du -sh "$IMAGES/job" | cut -f1)"
    "$CTL" resume $pid; rc2=$?
    [ $rc -eq 0 ] && [ $rc2 -eq 0 ] || result "zstd disk image checkpoint/resume" FAILED
  fi
  finish disk "image on disk, losses identical"
  rm -rf "$IMAGES/job"
fi

if [[ " $PARTS " == *" criu "* ]]; then
  echo "criu: $("$CRIU" --version 2>&1 | head -1)"; "$CRIU" check 2>&1 | tail -3
  start criu
  mkdir -p "$IMAGES"; dir="$IMAGES/dump"; rm -rf "$dir"
  t=$(now); "$CTL" --criu "$CRIU" dump $pid "$dir"; rc=$?; dump_s=$(since "$t")
  sleep 0.5
  gone=no; kill -0 $pid 2>/dev/null || gone=yes
  echo "criu: dump exit $rc in ${dump_s} s; process ended: $gone; GPU in use $(gpu_used) MiB; dump size $(du -sh "$dir" 2>/dev/null | cut -f1)"
  if [ $rc -eq 0 ] && [ $gone = yes ]; then
    t=$(now); "$CTL" --criu "$CRIU" restore "$dir"; rc=$?; restore_s=$(since "$t")
    echo "criu: restore + resume exit $rc in ${restore_s} s"
    finish criu "criu dump, end, restore: losses identical"
  else
    result "criu dump" "FAILED (exit $rc)"
    grep -E "Error|error" "$dir/criu/dump.log" 2>/dev/null | tail -10
    "$CTL" resume $pid; finish criu "after a failed dump the job resumes"
  fi
fi
echo "release checks: $failures failed"
exit $((failures > 0))
