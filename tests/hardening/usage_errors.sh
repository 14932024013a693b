#!/bin/sh
# Description: every usage error of the tools is one line naming what is wrong, then a pointer
# to --help, exit status 2, nothing on standard output (issue 33: `cudaw-ctl resume abc`,
# `resume` without a pid, `frobnicate` and `checkpoint --zstd 1` printed the 40-line usage and
# nothing else). --help prints the usage (exit 0) and every installed tool answers --version
# with the project's version.
# Usage: usage_errors.sh <bin dir> <project version>
bin=$1 version=$2
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cases=0 failed=0
fail() { echo "FAIL $*"; failed=$((failed + 1)); }

# expect TOOL "ARGS" "the one line after 'TOOL: '"
expect() {
  tool=$1 args=$2 message=$3
  cases=$((cases + 1))
  # shellcheck disable=SC2086 # ARGS are words on purpose
  "$bin/$tool" $args > "$tmp/out" 2> "$tmp/err"
  rc=$?
  want=$(printf '%s: %s\nTry '"'"'%s --help'"'"'.' "$tool" "$message" "$tool")
  if [ $rc -ne 2 ] || [ -s "$tmp/out" ] || [ "$(cat "$tmp/err")" != "$want" ]; then
    fail "$tool $args: exit $rc; wanted exit 2 and:"
    echo "$want" | sed 's/^/    /'
    echo "  got:"; cat "$tmp/out" "$tmp/err" | sed 's/^/    /'
  else
    echo "ok   $tool $args: $message"
  fi
}

expect cudaw-ctl "" "no command given"
expect cudaw-ctl "frobnicate" "unknown command 'frobnicate'"
expect cudaw-ctl "--bogus list" "unknown option '--bogus'"
expect cudaw-ctl "resume" "resume: no pid given"
expect cudaw-ctl "resume abc" "resume: 'abc' is not a pid"
expect cudaw-ctl "resume 0" "resume: '0' is not a pid"
expect cudaw-ctl "status 12 13" "status: unexpected argument '13'"
expect cudaw-ctl "list extra" "list: unexpected argument 'extra'"
expect cudaw-ctl "checkpoint" "checkpoint: no pid given"
expect cudaw-ctl "checkpoint --zstd 1" "checkpoint: --zstd needs --to DIR (it compresses the image written to disk)"
expect cudaw-ctl "checkpoint 1 --to" "--to needs a value"
expect cudaw-ctl "resume --live 1" "resume: --live does not apply to it"
expect cudaw-ctl "status --gpu 5 1" "status: --gpu does not apply to it"
expect cudaw-ctl "limit abc" "limit: 'abc' is not a pid"
expect cudaw-ctl "limit 1 --gpu 500" "limit: --gpu 500: expected a percentage from 1 to 100, or 0 or off (no limit)"
expect cudaw-ctl "limit 1 --gpu x" "limit: --gpu x: expected a percentage from 1 to 100, or 0 or off (no limit)"
expect cudaw-ctl "dump 1" "dump: no directory given (cudaw-ctl dump <pid> DIR)"
expect cudaw-ctl "restore" "restore: no directory given"
expect cudaw-ctl "sched now" "sched: unexpected argument 'now'"
expect cudaw-ctl "priority" "priority: no pid given (cudaw-ctl priority <pid> N)"
expect cudaw-ctl "priority 5" "priority: no weight given (cudaw-ctl priority <pid> N, N 1-100)"
expect cudaw-ctl "priority 5 abc" "priority: 'abc': expected a weight from 1 to 100"
expect cudaw-ctl "priority 5 0" "priority: '0': expected a weight from 1 to 100"
expect cudaw-ctl "priority x 5" "priority: 'x' is not a pid"
expect cudaw-ctl "--group" "--group: expected checkpoint or resume"
expect cudaw-ctl "--group 5" "--group: expected checkpoint or resume, not '5'"
expect cudaw-ctl "checkpoint --group" "checkpoint --group: no pid given"
expect cudaw-ctl "resume --group" "resume --group: no pid given"
expect cudaw-ctl "resume --group abc" "resume --group: 'abc' is not a pid"
expect cudaw-ctl "checkpoint --group 5 5" "pid 5 is given twice"
expect cudaw-ctl "resume --group --zstd 5" "resume --group takes no --release-all, --zstd or --to (they are checkpoint's)"
expect cudaw-ctl "checkpoint --group --drain-ms 0 5" "--drain-ms 0: expected a number of milliseconds from 1 to 3600000"
expect cudaw-ctl "checkpoint --group --attempts 5000 5" "--attempts 5000: expected a number from 1 to 1000"
expect cudaw "" "no command given"
expect cudaw "frobnicate" "unknown command 'frobnicate'"
expect cudaw "--bogus" "unknown option '--bogus'"
expect cudaw "options --bogus" "options: unknown argument '--bogus'"
expect cudaw "libdir extra" "libdir: unexpected argument 'extra'"
expect cudaw "run" "run: no command given"
expect cudaw "run --shared true" "run: unknown option '--shared'"
expect cudawd "--bogus" "unknown option '--bogus'"
expect cudawd "stray" "unknown argument 'stray'"
expect cudawd "--quantum" "--quantum needs a value"
expect cudawd "--quantum soon" "--quantum soon: expected a number of seconds"
expect cudawd "--max-per-user 0" "--max-per-user 0: expected a number of programs from 1 to 64"
expect cudawd "--log-max 1K" "--log-max 1K: expected a size of at least 64K, or 0 (never rotate)"
expect cudaw-kparam "" "no file given"
expect cudaw-kparam "--bogus" "unknown option --bogus"
expect cudaw-kparam "--arch" "--arch needs a value"

# The Kubernetes device plugin is built only where Debian's gRPC is installed.
k8s_plugin=""; [ -x "$bin/cudaw-k8s-plugin" ] && k8s_plugin=cudaw-k8s-plugin
[ -n "$k8s_plugin" ] && expect cudaw-k8s-plugin "--bogus" "--bogus is not an option"
# cudaw-cdi runs as 'cudaw cdi', and says so.
cases=$((cases + 1))
"$bin/cudaw" cdi generate --bogus x > "$tmp/out" 2> "$tmp/err"
if [ $? -ne 2 ] || [ "$(cat "$tmp/err")" != "$(printf "cudaw cdi: unknown option '--bogus'\nTry 'cudaw cdi --help'.")" ]; then
  fail "cudaw cdi generate --bogus: $(cat "$tmp/err")"
fi
for tool in cudaw cudaw-ctl cudawd cudaw-kparam cudaw-ckpt-driver $k8s_plugin; do
  cases=$((cases + 2))
  out=$("$bin/$tool" --version 2>&1)
  rc=$?
  case "$out" in
    "$tool $version"|"$tool $version "*) [ $rc -eq 0 ] || fail "$tool --version: exit $rc" ;;
    *) fail "$tool --version: '$out', not '$tool $version'" ;;
  esac
  "$bin/$tool" --help > "$tmp/out" 2> "$tmp/err"
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q "usage: $tool" "$tmp/out" || [ -s "$tmp/err" ]; then
    fail "$tool --help: exit $rc, or no usage on standard output"
  fi
done
echo "usage errors: $cases cases, $failed failed"
[ $failed -eq 0 ]
