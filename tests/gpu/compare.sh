#!/bin/sh
# Description: run a GPU test program natively and under cudaw; both must succeed and print the
# same output (results checksums), and the cudaw run must really have gone through cudaw.
# usage: compare.sh <cudaw libdir> <program> [args...]; exit 77 when there is no GPU.
libdir=$1; shift
native=$("$@" 2>&1); rc=$?
if [ $rc -eq 77 ]; then echo "$native"; exit 77; fi
if [ $rc -ne 0 ]; then echo "native run failed ($rc):"; echo "$native"; exit 1; fi
log=$(mktemp); trap 'rm -f "$log"' EXIT
under=$(CUDAW_LOG=info CUDAW_LOG_FILE="$log" LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        LD_PRELOAD="$libdir/$(basename "$(ls "$libdir"/libcudart.so.* | head -1)")" "$@" 2>&1); rc=$?
echo "native: $native"
echo "cudaw:  $under"
if [ $rc -ne 0 ]; then echo "run under cudaw failed ($rc)"; cat "$log"; exit 1; fi
if ! grep -q "forwarding to" "$log"; then echo "the run did not go through cudaw:"; cat "$log"; exit 1; fi
# A run that asked for a policy must have had it: a vmem that did not start would pass the
# allocations through and prove nothing.
case ${CUDAW_VMEM:-} in
  remap|translate)
    if ! grep -q "vmem: policy $CUDAW_VMEM" "$log"; then
      echo "vmem did not run the $CUDAW_VMEM policy:"; cat "$log"; exit 1
    fi ;;
esac
if [ "$native" != "$under" ]; then echo "outputs differ"; exit 1; fi
echo "identical"
