#!/bin/sh
# Run bench_ckpt under cudaw with its own run dir and the host image kept between checkpoints
# (so that "repeated checkpoint" measures a warm image; with CUDAW_CKPT_KEEP_IMAGE=0 the next
# checkpoint builds a new image, as the first one did).
# usage: bench_ckpt.sh <cudaw libdir> <bench_ckpt> [GiB...]
libdir=$1 bench=$2; shift 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
lib=$(ls "$libdir"/libcudart.so.* | head -1)
CUDAW_RUN_DIR=$dir CUDAW_CKPT_KEEP_IMAGE=${CUDAW_CKPT_KEEP_IMAGE:-1} LD_LIBRARY_PATH="$libdir" LD_PRELOAD="$lib" "$bench" "$@"
