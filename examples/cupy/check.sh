#!/usr/bin/env bash
# Runs check.py natively and under cudaw (remap policy) and compares the outputs line by line,
# then proves that cudaw was involved: under cudaw a CuPy array's device pointer must lie in the
# virtual range vmem reserved (its log says which), and the driver layer must have started. A
# comparison alone proves nothing if cudaw never saw CuPy's calls (CuPy links the CUDA runtime
# statically: before the driver layer it did not).
# Usage: check.sh <cudaw build or install dir (with bin/cudaw, bin/cudaw-ctl)>
set -u
BUILD=$(cd "${1:?usage: check.sh <cudaw build dir>}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
log=$(mktemp); trap 'rm -f "$log"' EXIT
native=$("$PY" "$HERE/check.py" 2>&1); rn=$?
under=$(CUDAW_LOG=info CUDAW_LOG_FILE="$log" "$BUILD/bin/cudaw" run -- "$PY" "$HERE/check.py" 2>&1); ru=$?
echo "native:"; echo "$native" | sed 's/^/  /'
echo "cudaw:"; echo "$under" | sed 's/^/  /'
ok=1
{ [ $rn -eq 0 ] && [ $ru -eq 0 ] && [ "$native" = "$under" ]; } || { echo "outputs differ"; ok=0; }
# Was CuPy's memory cudaw's? The pointer of an array allocated under cudaw, against vmem's range.
: > "$log"
ptr=$(CUDAW_LOG=info CUDAW_LOG_FILE="$log" "$BUILD/bin/cudaw" run -- "$PY" -c \
  'import cupy as cp; a = cp.ones(1 << 20, dtype=cp.float32); print(hex(a.data.ptr))' 2>&1 | tail -1)
range=$(sed -n 's/.*virtual range \(0x[0-9a-f]*\)\.\.\(0x[0-9a-f]*\).*/\1 \2/p' "$log" | head -1)
if [ -z "$range" ]; then
  echo "cudaw did not virtualise CuPy's memory (no vmem range in its log)"; ok=0
else
  set -- $range
  if [ $((ptr >= $1 && ptr < $2)) -eq 1 ]; then echo "CuPy's array at $ptr is cudaw's (range $1..$2)"
  else echo "CuPy's array at $ptr is outside cudaw's range $1..$2: not virtualised"; ok=0; fi
fi
grep -q "driver layer: forwarding" "$log" || { echo "cudaw's driver layer did not start"; ok=0; }
if [ $ok -eq 1 ]; then echo "RESULT cupy under cudaw: ok"; exit 0; fi
echo "RESULT cupy under cudaw: FAILED"; exit 1
