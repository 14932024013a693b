#!/bin/sh
# Description: a real program under cudaw is paused by SIGUSR1 in the middle of its work and
# resumed by cudaw-ctl from another process; it must end with the checksum of an uninterrupted
# native run. While paused: its progress stops, cudaw-ctl status says paused, and the device's
# free memory seen by another process rises by at least what the program had allocated.
# Mode "shortfall": while paused another process takes the memory; resume must fail (exit 1,
# "short"), stay paused, and succeed once that process is gone.
# usage: ckpt_pause.sh <cudaw libdir> <cudaw-ctl> <mem helper> pause|shortfall <vmem policy>
#                      <program> [args...]
# Environment: PAUSE_AFTER (seconds to let it run before the signal); CUDAW_* options such as
# CUDAW_CKPT_RESERVE or CUDAW_CKPT_LIVE reach the program under cudaw.
# Exit 77 without a GPU.
libdir=$1 ctl=$2 helper=$3 mode=$4 policy=$5; shift 5
fail() { echo "FAIL: $*"; [ -f "$out" ] && { echo "--- program output:"; cat "$out"; }
         [ -f "$log" ] && { echo "--- cudaw log:"; tail -40 "$log"; }; exit 1; }
info=$("$helper" info); rc=$?
if [ $rc -eq 77 ]; then echo "$info"; exit 77; fi
[ $rc -eq 0 ] || fail "helper: $info"
free_of() { "$helper" info | awk '{print $2}'; }

tmp=$(mktemp -d); out=$tmp/out; log=$tmp/log; hog=
cleanup() { [ -n "$hog" ] && kill "$hog" 2>/dev/null; [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
export CUDAW_RUN_DIR=$tmp/run

native=$("$@" | grep checksum=) || fail "native run failed"
echo "native: $native"

lib=$(ls "$libdir"/libcudart.so.* | head -1)
CUDAW_VMEM=$policy CUDAW_LOG=info CUDAW_LOG_FILE=$log LD_LIBRARY_PATH="$libdir" LD_PRELOAD="$lib" \
  "$@" > "$out" 2>&1 &
pid=$!
# Wait for the second progress line: the program is in its main loop.
for i in $(seq 600); do
  [ "$(grep -c -E 'step|iteration' "$out")" -ge 2 ] && break
  kill -0 $pid 2>/dev/null || fail "the program ended early"
  sleep 0.1
done
allocated=$(sed -n 's/.*allocated \([0-9]*\) bytes.*/\1/p' "$out")
[ -n "$allocated" ] || fail "the program did not say what it allocated"
# PAUSE_AFTER: seconds more of running first (the image reserve grows meanwhile).
sleep "${PAUSE_AFTER:-0}"
kill -0 $pid 2>/dev/null || fail "the program ended before the pause (PAUSE_AFTER too long)"
free_running=$(free_of)
t0=$(date +%s.%N)
kill -USR1 $pid
for i in $(seq 600); do
  "$ctl" status $pid | grep -q ": paused" && break
  sleep 0.05
done
"$ctl" status $pid | grep -q ": paused" || fail "not paused after SIGUSR1: $("$ctl" status $pid 2>&1)"
t1=$(date +%s.%N)
lines=$(wc -l < "$out")
sleep 2
[ "$(wc -l < "$out")" -eq "$lines" ] || fail "the program made progress while paused"
free_paused=$(free_of)
echo "paused in $(awk "BEGIN{print $t1 - $t0}") s (signal to status paused, polled); $("$ctl" status $pid)"
echo "device free: running $free_running, paused $free_paused, program allocated $allocated"
# The image is page-locked while paused (CUDAW_CKPT_REGISTER=1): the GPU's page tables for it
# take 8 bytes per 4 KiB host page (measured: 4 MiB for 2 GiB), 1/512 of the image; allow 1/256.
tables=$((allocated / 256))
[ $((free_paused - free_running + tables)) -ge "$allocated" ] ||
  fail "free memory rose by $((free_paused - free_running)), less than the $allocated allocated (less $tables for the page-locked image's page tables)"

if [ "$mode" = shortfall ]; then
  take=$((free_paused - allocated / 2))
  "$helper" hog $take > "$tmp/hog" 2>&1 &
  hog=$!
  for i in $(seq 300); do grep -q holding "$tmp/hog" && break; sleep 0.1; done
  grep -q holding "$tmp/hog" || fail "the hog could not take $take bytes: $(cat "$tmp/hog")"
  msg=$("$ctl" resume $pid 2>&1); rc=$?
  echo "resume while another process holds the memory: exit $rc: $msg"
  [ $rc -eq 1 ] && echo "$msg" | grep -q "short" || fail "resume did not report a shortfall"
  "$ctl" status $pid | grep -q ": paused" || fail "not paused after the failed resume"
  kill $hog; wait $hog 2>/dev/null; hog=
  sleep 1
fi
msg=$("$ctl" resume $pid 2>&1) || fail "resume failed: $msg"
echo "$msg"
# Under translate: how much the resume could not put back at its old real address.
[ "$policy" = translate ] &&
  echo "moved by the resume: $("$ctl" --json status $pid 2>/dev/null | grep -oE '"moved_(bytes|chunks)":[0-9]+' | tr '\n' ' ')"
wait $pid || fail "the program failed after resuming"
pid=
under=$(grep checksum= "$out")
echo "cudaw:  $under"
[ "$native" = "$under" ] || fail "checksums differ"
grep -q "forwarding to" "$log" || fail "the run did not go through cudaw"
grep -E "saved .* regions|live|reserve|restored" "$log" | sed 's/^/log: /' | tail -6
echo "identical"
