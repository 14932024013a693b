#!/usr/bin/env bash
# Runs check.py natively and under cudaw (remap policy) and compares the outputs line by line.
# Usage: check.sh <cudaw build or install dir (with bin/cudaw)>
set -u
BUILD=$(cd "${1:?usage: check.sh <cudaw build dir>}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
native=$("$PY" "$HERE/check.py" 2>&1); rn=$?
under=$("$BUILD/bin/cudaw" run -- "$PY" "$HERE/check.py" 2>&1); ru=$?
echo "native:"; echo "$native" | sed 's/^/  /'
echo "cudaw:"; echo "$under" | sed 's/^/  /'
if [ $rn -eq 0 ] && [ $ru -eq 0 ] && [ "$native" = "$under" ]; then echo "RESULT cupy under cudaw: ok"; exit 0; fi
echo "RESULT cupy under cudaw: FAILED"; exit 1
