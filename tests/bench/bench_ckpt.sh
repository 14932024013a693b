#!/bin/sh
# Run bench_ckpt under cudaw with its own run dir and the host image kept between checkpoints
# (so that "repeated checkpoint" measures a warm image; with CUDAW_CKPT_KEEP_IMAGE=0 the next
# checkpoint builds a new image, as the first one did). BENCH_CKPT_RESERVE: "both" (default)
# runs it without the image reserve (CUDAW_CKPT_RESERVE=off), then with CUDAW_CKPT_RESERVE=auto (rows "[reserve]", each
# run with its own ceilings; the driver's rows only in the first); "off" or "on" runs one way.
# The reserve may take up to CUDAW_CKPT_RESERVE_BUDGET (90% here) of the available host memory.
# usage: bench_ckpt.sh <cudaw libdir> <bench_ckpt> [GiB...]
libdir=$1 bench=$2; shift 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
lib=$(ls "$libdir"/libcudart.so.* | head -1)
mode=${BENCH_CKPT_RESERVE:-both}
run() {
  CUDAW_RUN_DIR=$dir CUDAW_CKPT_KEEP_IMAGE=${CUDAW_CKPT_KEEP_IMAGE:-1} LD_LIBRARY_PATH="$libdir" LD_PRELOAD="$lib" "$@"
}
rc=0
if [ "$mode" != on ]; then CUDAW_CKPT_RESERVE=off run "$bench" "$@" || rc=$?; fi
if [ "$mode" != off ] && [ $rc -eq 0 ]; then
  driver=${BENCH_CKPT_DRIVER:-1}
  [ "$mode" = both ] && driver=0
  BENCH_CKPT_DRIVER=$driver CUDAW_CKPT_RESERVE=auto \
    CUDAW_CKPT_RESERVE_BUDGET=${CUDAW_CKPT_RESERVE_BUDGET:-90%} run "$bench" "$@" || rc=$?
fi
exit $rc
