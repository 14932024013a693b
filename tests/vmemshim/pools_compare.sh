#!/bin/sh
# Description: the pool transcript of test_pools.c under cudaw equals the one without cudaw.
# Usage: pools_compare.sh <native program> <program linked to cudaw> [args]. Runs the first as
# is (its runtime is the emulated device, or NVIDIA's on a GPU) and the second with the caller's
# environment (CUDAW_VMEM, CUDAW_REAL_CUDART); both must pass and print the same lines.
native=$1 shimmed=$2
shift 2
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
env -u CUDAW_REAL_CUDART "$native" "$@" >"$dir/native" || { echo "native run failed"; cat "$dir/native"; exit 1; }
"$shimmed" "$@" >"$dir/cudaw" || { echo "run under cudaw failed"; cat "$dir/cudaw"; exit 1; }
if ! diff -u "$dir/native" "$dir/cudaw"; then
  echo "FAIL: the pool transcript under cudaw differs from the native one (above: - native, + cudaw)"
  exit 1
fi
cat "$dir/cudaw"
echo "transcripts identical"
