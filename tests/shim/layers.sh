#!/bin/sh
# Description: the shim's layers call only downwards. From the object files of libcudart (their
# folders name their layers: runtime/ and driver/ over glue/ over core/), every symbol one object
# uses and another defines is an arrow; an arrow up, or between the two API layers, fails.
#   usage: layers.sh <cudaw target's object directory>
set -eu
dir=$1
[ -d "$dir" ] || { echo "layers: no object directory $dir"; exit 1; }
NM=${NM:-nm}
list=$(mktemp)
trap 'rm -f "$list"' EXIT
count=0
for obj in $(cd "$dir" && find . -name '*.o' | sort); do
  case $obj in
    ./core/*) layer=core ;;
    ./glue/*) layer=glue ;;
    ./runtime/*) layer=runtime ;;
    ./driver/*) layer=driver ;;
    # generated: the real libraries' name tables belong to the core that loads them; the
    # wrappers to their API layer
    */generated/shim_fn_table.c.o | */generated/shim_drv_table.c.o) layer=core ;;
    */generated/shim_wrappers.c.o | */generated/shim_trampolines.S.o) layer=runtime ;;
    */generated/shim_drv_*) layer=driver ;;
    *) echo "layers: $obj is in no layer"; exit 1 ;;
  esac
  count=$((count + 1))
  "$NM" "$dir/$obj" | awk -v o="${obj#./}" -v l="$layer" \
    'NF == 3 && $2 ~ /^[TDBRVWG]$/ { print "def", $3, o, l } NF == 2 && $1 == "U" { print "use", $2, o, l }' \
    >>"$list"
done
[ "$count" -ge 40 ] || { echo "layers: only $count objects in $dir"; exit 1; }
awk '
  function rank(l) { return l == "core" ? 1 : l == "glue" ? 2 : 3 }
  $1 == "def" { where[$2] = $3; layer[$2] = $4; next }
  { uses[++n] = $0 }
  END {
    bad = 0; arrows = 0
    for (i = 1; i <= n; i++) {
      split(uses[i], u, " ")
      s = u[2]; from = u[4]
      if (!(s in layer) || where[s] == u[3]) continue
      to = layer[s]
      if (to == from) continue
      arrows++
      if (rank(to) > rank(from) || (rank(to) == 3 && from != to)) {
        printf "layers: %s (%s) calls up into %s (%s): %s\n", u[3], from, where[s], to, s
        bad++
      }
    }
    printf "layers: %d arrows between layers, %d against the order\n", arrows, bad
    exit bad != 0
  }' "$list"
