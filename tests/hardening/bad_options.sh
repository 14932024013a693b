#!/bin/sh
# Description: every CUDAW_* option given bad values (issue 10 hardening). The probe program runs
# under cudaw on the emulated device once per (option, value): it must never be killed by a
# signal, and cudaw's output must name the variable. Exit status 78 is cudaw stopping the
# program on an invalid value (strict_options.sh checks that part). Prints one line per case and
# a count.
# Usage: bad_options.sh <options_probe> <cudaw lib dir> <emulated runtime>
probe=$1 lib=$2 emu=$3
long=$(head -c 5000 /dev/zero | tr '\0' x)
cases=0 failed=0
tmp=$(mktemp -d) || exit 1
check() { # check VAR VALUE
  cases=$((cases + 1))
  env CUDAW_REAL_CUDART="$emu" CUDAW_EMU_MEM=64M CUDAW_RUN_DIR="$tmp" LD_LIBRARY_PATH="$lib" \
      "$1=$2" "$probe" > "$tmp/out" 2>&1
  rc=$?
  shown=$(printf '%.30s' "$2")
  if [ $rc -gt 1 ] && [ $rc -ne 78 ]; then
    echo "FAIL $1=$shown: exit $rc (signal $((rc - 128)))"; failed=$((failed + 1))
  elif ! grep -q "$1" "$tmp/out"; then
    echo "FAIL $1=$shown: no message names $1 (exit $rc):"; head -3 "$tmp/out"; failed=$((failed + 1))
  else
    echo "ok   $1=$shown: exit $rc: $(grep -m1 "$1" "$tmp/out" | cut -c1-150)"
  fi
}
for v in banana DEBUG 3 "$long"; do check CUDAW_LOG "$v"; done
for v in /nonexistent/dir/log "$tmp"; do check CUDAW_LOG_FILE "$v"; done
for v in libcudart.so.13 /nonexistent.so /etc/passwd "$probe" "$long"; do check CUDAW_REAL_CUDART "$v"; done
for v in banana 2 -1 "$long"; do check CUDAW_STATIC_CHECK "$v"; done
for v in banana REMAP "remap " "$long"; do check CUDAW_VMEM "$v"; done
for v in banana 0 -1 99999999999999999999 1P "$long"; do check CUDAW_VA_SIZE "$v"; done
for v in banana 0 200% -5G 1e3 "$long"; do check CUDAW_MEM_LIMIT "$v"; done
for v in banana 2 "$long"; do check CUDAW_CHECK "$v"; done
for v in banana 2 "$long"; do check CUDAW_VMEM_IDENTITY "$v"; done
for v in banana 2 "$long"; do check CUDAW_PROFILE "$v"; done
for v in banana -1 99999999999999999999 "$long"; do check CUDAW_PAUSE_TIMEOUT "$v"; done
for v in KILL 9 SIGSEGV banana "$long"; do check CUDAW_SIGNAL "$v"; done
for v in relative/dir /nonexistent/a/b /etc/passwd /proc "$tmp/$long"; do check CUDAW_RUN_DIR "$v"; done
for v in 0 100000 banana -2; do check CUDAW_CKPT_STREAMS "$v"; done
for v in 0 1 5G 4Q banana; do check CUDAW_CKPT_STAGING "$v"; done
for v in 0 1000 -3 banana; do check CUDAW_CKPT_THREADS "$v"; done
for v in 2 yes "$long"; do check CUDAW_CKPT_KEEP_IMAGE "$v"; done
for v in banana 5Q -1G "$long"; do check CUDAW_CKPT_RESERVE "$v"; done
for v in 0 0% 150% banana "$long"; do check CUDAW_CKPT_RESERVE_BUDGET "$v"; done
rm -rf "$tmp"
echo "bad options: $cases cases, $failed failed"
[ $failed -eq 0 ]
