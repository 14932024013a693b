#!/bin/sh
# Description: modules talk through their public headers only. A source file outside tests/ may
# include "internal.h" only where its own folder has one (its own module's); cudaw-ctl, cudawd and
# the launcher reach checkpoint and sched through ckpt.h and sched_ctl.h.
#   usage: internals.sh <source root>
set -eu
cd "$1"
bad=0
checked=0
for f in $(find . -path ./tests -prune -o -path './build*' -prune -o \( -name '*.c' -o -name '*.h' \) -print); do
  grep -q '^#include "internal.h"' "$f" || continue
  checked=$((checked + 1))
  if [ ! -f "$(dirname "$f")/internal.h" ]; then
    echo "internals: $f includes another module's internal.h"
    bad=$((bad + 1))
  fi
done
[ "$checked" -gt 10 ] || { echo "internals: only $checked files include an internal.h: wrong root?"; exit 1; }
echo "internals: $checked files include their own module's internal.h, $bad another's"
[ "$bad" -eq 0 ]
