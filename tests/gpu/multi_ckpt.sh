#!/bin/bash
# Description: checkpoint figures per device with every device at once: one bench_ckpt --hold
# process per GPU (each holds GiB on its device and measures that device's pinned copy ceilings),
# paused together by `cudaw-ctl checkpoint --group` and resumed by `resume --group`; prints each
# device's GB/s against its own ceiling and the sum, and checks every process's data afterwards.
# usage: multi_ckpt.sh <cudaw build dir> [GiB per device (default 8)]
# Exit 77 with fewer than two GPUs.
set -u
B=$(cd "${1:?usage: multi_ckpt.sh <cudaw build dir> [GiB]}" && pwd)
gib=${2:-8}
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "${n:-0}" -ge 2 ] || { echo "skipped: fewer than two GPUs (${n:-0})"; exit 77; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
tmp=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
export CUDAW_RUN_DIR=$tmp/run CUDAW_CKPT_KEEP_IMAGE=${CUDAW_CKPT_KEEP_IMAGE:-0}
export CUDAW_CKPT_RESERVE=${CUDAW_CKPT_RESERVE:-auto}
# One process per device, one after another: each measures its device's ceilings before it
# prints "hold pid", and its image reserve (CUDAW_CKPT_RESERVE, auto here) then page-locks host
# memory for its image in the background. The next starts once that reserve is ready (at most
# 60 s), so that no ceiling is sampled beside another device's copies or a reserve's growth (two
# samples taken at once came out 13-20% low on 2 x H200, 2026-11-28), and the figures are the
# copy engine's with all devices at once. The pids cudaw knows are the programs' (cudaw run
# execs them): taken from their own lines.
ranks=
for d in $(seq 0 $((n - 1))); do
  "$B/bin/cudaw" run -- "$B/tests/bench/bench_ckpt" --hold "$gib" "$d" > "$tmp/hold$d" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do grep -q "^hold pid" "$tmp/hold$d" && break; sleep 0.2; done
  grep -q "^hold pid" "$tmp/hold$d" || { echo "FAIL: device $d did not start"; cat "$tmp/hold$d"; exit 1; }
  p=$(awk '/^hold pid/{print $3}' "$tmp/hold$d")
  ranks="$ranks $p"
  for _ in $(seq 300); do
    st=$("$B/bin/cudaw-ctl" --json status "$p")
    ready=$(echo "$st" | grep -oE '"reserve_bytes":[0-9]+' | cut -d: -f2)
    want=$(echo "$st" | grep -oE '"device_bytes":[0-9]+' | cut -d: -f2)
    [ "${ready:-0}" -ge "${want:-1}" ] && break
    sleep 0.2
  done
  echo "pid $p: image reserve $(awk -v r="${ready:-0}" 'BEGIN { printf "%.2f", r / 1073741824 }') GiB ready"
done
ceilings() { awk -v k="$1" '/^hold pid/{for (i = 1; i < NF; i++) if ($i == k) print $(i + 1)}' "$tmp/hold$2"; }
report() { # $1 checkpoint|resume, $2 file of JSON replies (one per process, in pid order)
  local d=0 total=0 sum=0
  while read -r line; do
    gbps=$(echo "$line" | grep -oE '"gbps":[0-9.]+' | cut -d: -f2)
    bytes=$(echo "$line" | grep -oE '"bytes":[0-9]+' | cut -d: -f2)
    secs=$(echo "$line" | grep -oE '"copy_seconds":[0-9.]+' | cut -d: -f2)
    ceiling=$(ceilings "$([ "$1" = checkpoint ] && echo d2h || echo h2d)" $d)
    printf "%s device %d: %.2f GiB in %.3f s = %.2f GB/s (%.2fx of its pinned %s ceiling %.2f GB/s)\n" \
      "$1" $d "$(awk -v b="$bytes" 'BEGIN { print b / 1073741824 }')" "$secs" "$gbps" \
      "$(awk -v g="$gbps" -v c="$ceiling" 'BEGIN { print (c > 0 ? g / c : 0) }')" \
      "$([ "$1" = checkpoint ] && echo D2H || echo H2D)" "$ceiling"
    sum=$(awk -v s="$sum" -v g="$gbps" 'BEGIN { print s + g }'); d=$((d + 1))  # no bc on GPU hosts
  done < "$2"
  printf "%s all %d devices at once: %.2f GB/s together\n" "$1" "$d" "$sum"
}
"$B/bin/cudaw-ctl" --json checkpoint --group $ranks > "$tmp/ckpt.json" 2> "$tmp/ckpt.err" \
  || { echo "FAIL: group checkpoint"; cat "$tmp/ckpt.err" "$tmp/ckpt.json"; exit 1; }
report checkpoint "$tmp/ckpt.json"
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader | sed 's/^/while paused, GPU (index, used): /'
"$B/bin/cudaw-ctl" --json resume --group $ranks > "$tmp/resume.json" 2> "$tmp/resume.err" \
  || { echo "FAIL: group resume"; cat "$tmp/resume.err" "$tmp/resume.json"; exit 1; }
report resume "$tmp/resume.json"
for p in $ranks; do kill -TERM "$p"; done
rc=0
for i in "${!pids[@]}"; do wait "${pids[$i]}" || rc=1; grep -E "^hold device" "$tmp/hold$i"; done
pids=()
[ $rc -eq 0 ] && echo "multi_ckpt: ok" || echo "FAIL: a process lost data or failed"
exit $rc
