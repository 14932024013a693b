#!/bin/sh
# Description: what Slurm's suspend leaves behind, without Slurm: a program under cudaw on the
# emulated device, stopped with kill -STOP (as scontrol suspend stops a job's tasks). cudaw-ctl
# status and list answer within 2 s, say "stopped by SIGSTOP (suspended)" with what the program
# last said of itself, and list still answers for a second program that runs; checkpoint and
# resume of the stopped program fail at once with exit 6 (wrong state). While running, status
# shows the device memory the program holds (64 MiB here). Regression test for cudaw-ctl
# status/list hanging for 10 minutes on a suspended job (issue 33).
#   usage: test_stopped.sh BUILD_DIR SLURM_JOB LIBCUDAW_EMU        exit 0 / 1 / 77 (skipped)
set -u
build=$1 job=$2 emu=$3
ctl=$build/bin/cudaw-ctl
dir=$(mktemp -d /tmp/cudaw-stopped.XXXXXX)
export CUDAW_RUN_DIR="$dir/run" CUDAW_REAL_CUDART="$emu" CUDAW_EMU_MEM=256M
pids=""
cleanup() {
  for pid in $pids; do kill -CONT "$pid" 2>/dev/null; kill -9 "$pid" 2>/dev/null; done
  if [ "$status" -eq 0 ]; then rm -rf "$dir"; else echo "kept $dir"; fi
}
status=1
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() { echo "FAIL: $*"; exit 1; }

start_job() { # name MiB: runs slurm_job under cudaw until DIR/go; prints its pid
  mkdir -p "$dir/$1"
  "$build/bin/cudaw" run "$job" "$2" "$dir/$1" > "$dir/$1.out" 2>&1 &
  i=0
  while [ ! -e "$dir/$1/ready" ]; do
    i=$((i + 1)); [ $i -lt 300 ] || fail "job $1 did not start: $(cat "$dir/$1.out")"
    sleep 0.1
  done
  sed -n 's/^slurm_job: pid \([0-9]*\) holds.*/\1/p' "$dir/$1.out"
}

# Runs "$@" with a 2 s limit into $dir/answer; fails naming what did not answer in time.
within_2s() {
  start=$(date +%s.%N)
  timeout 10 "$@" > "$dir/answer" 2>&1
  code=$?
  took=$(awk "BEGIN { printf \"%.2f\", $(date +%s.%N) - $start }")
  awk "BEGIN { exit !($took < 2) }" || fail "'$*' took $took s (exit $code): $(cat "$dir/answer")"
}

stopped=$(start_job stopped 64)
running=$(start_job running 16)
pids="$stopped $running"
[ -n "$stopped" ] && [ -n "$running" ] || fail "no pids: $(cat "$dir"/*.out)"

within_2s "$ctl" status "$stopped"
grep -q "^pid $stopped: running; device memory 64.00 MiB in 1 regions" "$dir/answer" ||
  fail "status of a running job does not show its device memory: $(cat "$dir/answer")"
echo "ok: running: $(cat "$dir/answer")"

kill -STOP "$stopped"
i=0
while [ "$(ps -o stat= -p "$stopped" | cut -c1)" != T ]; do
  i=$((i + 1)); [ $i -lt 50 ] || fail "pid $stopped was not stopped within 5 s"
  sleep 0.1
done

within_2s "$ctl" status "$stopped"
[ "$code" -eq 0 ] || fail "status of the stopped job: exit $code: $(cat "$dir/answer")"
grep -q "^pid $stopped: stopped by SIGSTOP (suspended); last known: running since .*, device memory 64.00 MiB" \
  "$dir/answer" || fail "status of the stopped job: $(cat "$dir/answer")"
echo "ok: status in $took s: $(cat "$dir/answer")"

within_2s "$ctl" list
grep -q "^$stopped *stopped *stopped by SIGSTOP (suspended)" "$dir/answer" ||
  fail "list: no 'stopped' row for $stopped: $(cat "$dir/answer")"
grep -q "^$running *running *image 0 B, device 16.00 MiB" "$dir/answer" || fail "list: no row for the running $running: $(cat "$dir/answer")"
echo "ok: list in $took s:"; cat "$dir/answer"

within_2s "$ctl" --json list
grep -q "\"pid\":$stopped,\"state\":\"stopped\",\"stopped\":\"sigstop\",\"last_known\":{" "$dir/answer" ||
  fail "list --json: $(cat "$dir/answer")"

for command in checkpoint resume; do
  within_2s "$ctl" "$command" "$stopped"
  [ "$code" -eq 6 ] || fail "$command of the stopped job: exit $code, expected 6: $(cat "$dir/answer")"
  grep -q "pid $stopped is stopped by SIGSTOP (suspended): it cannot $command until it is continued" \
    "$dir/answer" || fail "$command of the stopped job: $(cat "$dir/answer")"
  echo "ok: $command refused in $took s: $(cat "$dir/answer")"
done

# Paused, then stopped: the last known state is the pause, with its image.
kill -CONT "$stopped"
"$ctl" checkpoint "$stopped" > "$dir/checkpoint.out" 2>&1 || fail "checkpoint: $(cat "$dir/checkpoint.out")"
kill -STOP "$stopped"
within_2s "$ctl" status "$stopped"
grep -q "last known: paused since .*, host image 64.00 MiB$" "$dir/answer" ||
  fail "status of a paused, then stopped job: $(cat "$dir/answer")"
echo "ok: paused, then stopped: $(cat "$dir/answer")"
kill -CONT "$stopped"
"$ctl" resume "$stopped" > "$dir/resume.out" 2>&1 || fail "resume: $(cat "$dir/resume.out")"

touch "$dir/stopped/go" "$dir/running/go"
for name in stopped running; do
  i=0
  while ! grep -q 'verified\|slurm_job: .*:' "$dir/$name.out"; do
    i=$((i + 1)); [ $i -lt 300 ] || fail "job $name did not finish: $(cat "$dir/$name.out")"
    sleep 0.1
  done
  grep -q 'verified' "$dir/$name.out" || fail "job $name: $(cat "$dir/$name.out")"
done
wait
[ -z "$(ls "$dir/run" | grep '\.state$')" ] || fail "state files left behind: $(ls "$dir/run")"
echo "ok: both jobs verified their memory; no state file left"
status=0
