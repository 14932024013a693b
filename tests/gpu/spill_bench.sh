#!/bin/bash
# Description: the disk tier's figures on one GPU: a bench_ckpt --hold process (GiB on device 0,
# its pinned D2H/H2D ceilings measured) is paused into host memory, spilled to DIR (disk write
# GB/s), the page cache dropped, resumed streamed from disk (disk read + verify + H2D, pipelined:
# GB/s of image against the H2D ceiling and against a plain read of the same files with a cold
# cache), its peak host memory beyond the staging buffers printed; the same with --zstd; then
# the process checks every byte (exit 1 if any was lost).
# usage: spill_bench.sh <cudaw build dir> [GiB (default 40)] [DIR (default /tmp/cudaw-spill)]
# Needs GiB free on DIR's file system (zstd: about the same) and root to drop the page cache
# (without it the read figures may come from the cache: said in the output).
set -u
B=$(cd "${1:?usage: spill_bench.sh <cudaw build dir> [GiB] [DIR]}" && pwd)
gib=${2:-40}
dir=${3:-/tmp/cudaw-spill}
nvidia-smi -L >/dev/null 2>&1 || { echo "skipped: no GPU"; exit 77; }
tmp=$(mktemp -d); pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp" "$dir"; }
trap cleanup EXIT
export CUDAW_RUN_DIR=$tmp/run CUDAW_CKPT_KEEP_IMAGE=0
ctl=$B/bin/cudaw-ctl
"$B/bin/cudaw" run -- "$B/tests/bench/bench_ckpt" --hold "$gib" 0 > "$tmp/hold" 2>&1 &
holder=$!
for _ in $(seq 1200); do grep -q "^hold pid" "$tmp/hold" && break; sleep 0.2; done
grep -q "^hold pid" "$tmp/hold" || { echo "FAIL: the holder did not start"; cat "$tmp/hold"; exit 1; }
pid=$(awk '/^hold pid/{print $3}' "$tmp/hold")
h2d=$(awk '/^hold pid/{for (i = 1; i < NF; i++) if ($i == "h2d") print $(i + 1)}' "$tmp/hold")
echo "holder pid $pid: $gib GiB on device 0, pinned H2D ceiling $h2d GB/s"
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || echo "(page cache not dropped: not root)"; }
num() { sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p" <<< "$2"; }
rc=0
for flags in "" "--zstd"; do
  rm -rf "$dir"
  r=$("$ctl" --json checkpoint "$pid") || { echo "FAIL: checkpoint: $r"; rc=1; break; }
  printf "checkpoint%s: %s GB/s into host memory\n" "${flags:+ }$flags" "$(num gbps "$r")"
  r=$("$ctl" --json spill $flags "$pid" "$dir") || { echo "FAIL: spill: $r"; rc=1; break; }
  stored=$(num disk_stored "$r")
  printf "spill%s: %.2f GiB image, %.2f GiB in files, written in %.2f s = %.2f GB/s of image\n" \
    "${flags:+ }$flags" "$(num disk_bytes "$r" | awk '{print $1 / 2^30}')" \
    "$(awk -v s="$stored" 'BEGIN{print s / 2^30}')" "$(num disk_seconds "$r")" "$(num disk_gbps "$r")"
  "$ctl" status "$pid"
  drop
  r=$("$ctl" --json resume "$pid") || { echo "FAIL: resume: $r"; rc=1; break; }
  gbps=$(num gbps "$r")
  printf "resume streamed from disk%s: %.2f s = %.2f GB/s of image (%.2fx of the H2D ceiling %s); " \
    "${flags:+ }$flags" "$(num copy_seconds "$r")" "$gbps" \
    "$(awk -v g="$gbps" -v c="$h2d" 'BEGIN{print c > 0 ? g / c : 0}')" "$h2d"
  printf "host memory beyond the staging buffers: %s bytes; dma wait %s ms, read+verify %s ms " \
    "$(num disk_peak_bytes "$r")" "$(num wait_ms "$r")" "$(num memcpy_ms "$r")"
  echo "per thread"
  drop
  t0=$(date +%s.%N)
  cat "$dir"/region-* > /dev/null
  t1=$(date +%s.%N)
  awk -v s="$stored" -v a="$t0" -v b="$t1" \
    'BEGIN{printf "plain read of the files, cold cache, one reader: %.2f GB/s of files\n", s / (b - a) / 1e9}'
done
kill -TERM "$pid"; wait "$holder" || rc=1
grep -E "^hold device" "$tmp/hold"
grep -q "verified" "$tmp/hold" || rc=1
exit $rc
