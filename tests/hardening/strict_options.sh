#!/bin/sh
# Description: every CUDAW_* option with an invalid value stops the program, naming it (issue 33:
# CUDAW_VMEM=bogus or CUDAW_MEM_LIMIT=lots turned cudaw off without a word that mattered, and a
# checkpoint then looked like success). For each row of `cudaw options` (a row without a case
# here fails the test) the probe runs under cudaw on the emulated device with that one value:
#   - CUDAW_STRICT unset: exit status 78 at its first CUDA call, and the one line
#     "NAME=value: expected ..." before the "stopping" line; its main never reports success;
#   - CUDAW_STRICT=0: it runs on (exit 0 or 1, never 78 or a signal), and exactly one line names
#     the value: "NAME=value: expected ...; ignored (CUDAW_STRICT=0)".
# Then: `cudaw run` refuses before it starts the command; a process that never calls CUDA is not
# stopped; an unknown CUDAW_* name is warned about once with the closest option, and runs on;
# cudaw-ctl and cudawd refuse an invalid value they read.
# Usage: strict_options.sh <options_probe> <cudaw lib dir> <emulated runtime> <bin dir>
probe=$1 lib=$2 emu=$3 bin=$4
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cases=0 failed=0
fail() { echo "FAIL $*"; failed=$((failed + 1)); }

# One invalid value per option (CUDAW_MEM_LIMIT: the three of the issue).
invalid() {
  case $1 in
    CUDAW_LOG) echo loud ;;
    CUDAW_LOG_FILE) echo /nonexistent/dir/log ;;
    CUDAW_REAL_CUDART) echo libcudart.so.13 ;;
    CUDAW_REAL_CUDA) echo /nonexistent/libcuda.so.1 ;;
    CUDAW_DRIVER) echo yes ;;
    CUDAW_STATIC_CHECK) echo 2 ;;
    CUDAW_VMEM) echo bogus ;;
    CUDAW_VMEM_IDENTITY) echo on ;;
    CUDAW_TEST_MOVE) echo 2 ;;
    CUDAW_VA_SIZE) echo lots ;;
    CUDAW_VMEM_PIECE) echo "1M lots" ;;
    CUDAW_MEM_LIMIT) echo "lots 0 200%" ;;
    CUDAW_CHECK) echo true ;;
    CUDAW_SHARE) echo 2 ;;
    CUDAW_SHARE_IDLE_MS) echo -5 ;;
    CUDAW_BORROW_POOL) echo on ;;
    CUDAW_GPU_SHARE) echo 150 ;;
    CUDAW_TEST_REMOVE_DELAY_MS) echo 99999 ;;
    CUDAW_PROFILE) echo x ;;
    CUDAW_STRICT) echo maybe ;;
    CUDAW_PAUSE_TIMEOUT) echo soon ;;
    CUDAW_SIGNAL) echo bogus ;;
    CUDAW_RUN_DIR) echo relative/dir ;;
    CUDAW_SCHED_SOCKET) echo cudawd.sock ;;
    CUDAW_SCHED_HOST_MEMORY) echo lots ;;
    CUDAW_SCHED_SPILL_DIR) echo relative/spill ;;
    CUDAW_CKPT_STREAMS) echo 0 ;;
    CUDAW_CKPT_STAGING) echo 1 ;;
    CUDAW_CKPT_THREADS) echo 100 ;;
    CUDAW_CKPT_KEEP_IMAGE) echo 2 ;;
    CUDAW_CKPT_RELEASE) echo everything ;;
    CUDAW_CKPT_DRIVER_TOOL) echo /nonexistent/cudaw-ckpt-driver ;;
    CUDAW_CKPT_REGISTER) echo 2 ;;
    CUDAW_CKPT_PIN_EARLY) echo 2 ;;
    CUDAW_CKPT_FILL) echo fast ;;
    CUDAW_CKPT_CREATE) echo later ;;
    CUDAW_SUSPEND) echo yes ;;
    CUDAW_SUSPEND_START_WAIT) echo 9999 ;;
    CUDAW_CKPT_RESERVE) echo lots ;;
    CUDAW_CKPT_RESERVE_BUDGET) echo 0 ;;
    CUDAW_CKPT_RESERVE_THREADS) echo 0 ;;
    CUDAW_CKPT_POOL_THREADS) echo 65 ;;
    CUDAW_CKPT_LIVE) echo 2 ;;
    CUDAW_CKPT_PREFAULT) echo 2 ;;
    CUDAW_TEST_EXCHANGE_DELAY_MS) echo 99999 ;;
    CUDAW_TEST_MEMINFO) echo /nonexistent/meminfo ;;
    CUDAW_CRIU) echo /nonexistent/criu ;;
  esac
}

run() { # run VAR VALUE [more env...]: the probe under cudaw, output in $tmp/out, status in $rc
  var=$1 value=$2
  shift 2
  env CUDAW_REAL_CUDART="$emu" CUDAW_EMU_MEM=64M CUDAW_RUN_DIR="$tmp" LD_LIBRARY_PATH="$lib" \
      "$@" "$var=$value" "$probe" > "$tmp/out" 2>&1
  rc=$?
}

names=$("$bin/cudaw" options --markdown | sed -n 's/^| `\(CUDAW_[A-Z0-9_]*\)`.*/\1/p')
[ -n "$names" ] || { echo "FAIL cudaw options --markdown lists no option"; exit 1; }
for name in $names; do
  values=$(invalid "$name")
  if [ -z "$values" ]; then
    fail "$name: no invalid value in this test (add one)"
    continue
  fi
  for value in $values; do
    cases=$((cases + 1))
    run "$name" "$value"
    if [ $rc -ne 78 ]; then
      fail "$name=$value: exit $rc, not 78:"; head -5 "$tmp/out"
    elif ! grep -q "error: $name=$value: expected " "$tmp/out" || ! grep -q "stopping" "$tmp/out"; then
      fail "$name=$value: no line naming it:"; head -5 "$tmp/out"
    elif grep -q "probe: ok" "$tmp/out"; then
      fail "$name=$value: the program went on"
    else
      echo "ok   $name=$value: $(grep -m1 "$name=" "$tmp/out" | sed 's/^cudaw\[[0-9]*\]: //')"
    fi
    [ "$name" = CUDAW_STRICT ] && continue
    cases=$((cases + 1))
    run "$name" "$value" CUDAW_STRICT=0
    lines=$(grep -c "$name=$value: expected .*; ignored (CUDAW_STRICT=0)" "$tmp/out")
    named=$(grep -c "$name=$value" "$tmp/out")
    if [ $rc -gt 1 ]; then
      fail "$name=$value CUDAW_STRICT=0: exit $rc:"; head -5 "$tmp/out"
    elif [ "$lines" -ne 1 ] || [ "$named" -ne 1 ]; then
      fail "$name=$value CUDAW_STRICT=0: $named lines name it, $lines say it is ignored; 1 each:"
      head -5 "$tmp/out"
    fi
  done
done

# The launcher refuses before the command starts (the command would create this file).
cases=$((cases + 1))
env CUDAW_VMEM=bogus "$bin/cudaw" run sh -c "touch $tmp/started" > "$tmp/out" 2>&1
rc=$?
if [ $rc -ne 78 ] || [ -e "$tmp/started" ] || ! grep -q "^cudaw: CUDAW_VMEM=bogus: expected" "$tmp/out"; then
  fail "cudaw run with CUDAW_VMEM=bogus: exit $rc:"; cat "$tmp/out"
fi
# A process that never calls CUDA runs as without cudaw, silently.
cases=$((cases + 1))
env CUDAW_VMEM=bogus LD_PRELOAD="$lib/libcudart.so.13" sh -c 'echo no cuda' > "$tmp/out" 2>&1
rc=$?
if [ $rc -ne 0 ] || [ "$(cat "$tmp/out")" != "no cuda" ]; then
  fail "a process without CUDA calls: exit $rc:"; cat "$tmp/out"
fi
# An unknown name: one warning with the closest option, and the program runs.
cases=$((cases + 1))
run CUDAW_MEMLIMIT 100M
if [ $rc -ne 0 ] || [ "$(grep -c 'CUDAW_MEMLIMIT is not a cudaw option (did you mean CUDAW_MEM_LIMIT?)' "$tmp/out")" -ne 1 ]; then
  fail "CUDAW_MEMLIMIT: exit $rc:"; cat "$tmp/out"
fi
# The tools refuse what they read.
for tool in "cudaw-ctl list" cudawd; do
  cases=$((cases + 1))
  env CUDAW_RUN_DIR=relative/dir "$bin"/$tool > "$tmp/out" 2>&1
  rc=$?
  if [ $rc -ne 78 ] || ! grep -q "CUDAW_RUN_DIR=relative/dir: expected an absolute path" "$tmp/out"; then
    fail "$tool with CUDAW_RUN_DIR=relative/dir: exit $rc:"; cat "$tmp/out"
  fi
done
echo "strict options: $cases cases, $failed failed"
[ $failed -eq 0 ]
