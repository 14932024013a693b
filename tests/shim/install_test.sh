#!/bin/sh
# Description: `cmake --install` puts the library (with its libcudart.so link), the tools and
# the launcher into a prefix, and the installed launcher runs a program under the installed
# library (on the emulated device, so this runs on any machine).
# usage: install_test.sh <build dir> <emu library> <forward_test> [--no-preload]
# --no-preload (sanitizer builds): check the installed files only, since a sanitized library
# cannot be preloaded ahead of the sanitizer runtime.
set -u
build=$1 emu=$2 prog=$3 mode=${4:-}
prefix=$(mktemp -d); trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null || { echo "install failed"; exit 1; }
lib=$(ls "$prefix"/lib*/cudaw/libcudart.so.* 2>/dev/null | head -1)
[ -n "$lib" ] || { echo "no libcudart.so.N under $prefix/lib*/cudaw"; exit 1; }
[ -L "$(dirname "$lib")/libcudart.so" ] || { echo "no libcudart.so link"; exit 1; }
[ -x "$prefix/bin/cudaw" ] || { echo "no launcher"; exit 1; }
for tool in $(cat "$build/installed-tools.txt" 2>/dev/null); do
  [ -x "$prefix/bin/$tool" ] || { echo "tool $tool not installed"; exit 1; }
done
[ "$("$prefix/bin/cudaw" libdir)" = "$(cd "$(dirname "$lib")" && pwd -P)" ] || { echo "launcher finds the wrong libdir"; exit 1; }
[ "$mode" = --no-preload ] && { echo "install: ok ($lib; launcher run skipped in a sanitizer build)"; exit 0; }
CUDAW_REAL_CUDART=$emu "$prefix/bin/cudaw" run -- "$prog" "$lib" || { echo "installed launcher run failed"; exit 1; }
echo "install: ok ($lib)"
