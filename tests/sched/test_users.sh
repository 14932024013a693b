#!/bin/sh
# Description: cudaw on a node several users share, on the emulated device. Run as root (CI
# does); skipped (77) otherwise, since it runs programs as other uids (setpriv).
#  1. Control: a program of uid VICTIM (nobody) cannot be checkpointed, resumed or read by uid
#     OTHER: refused by its 0700 run dir, and, with the run dir and socket opened up by root, by
#     the program's own SO_PEERCRED check; its owner and root may. An image it writes with --to
#     is 0600 in a 0700 directory of its own (a 0755 directory it names is narrowed), and OTHER
#     cannot read it. The job's data is verified at the end.
#  2. The system cudawd (cudawd --system, as root): its socket is 0666 in a 0755 directory; two
#     programs of two users whose memory does not fit together on one emulated GPU shared by
#     both users (CUDAW_EMU_SHARED=all) both join it and are swapped in turns, data verified;
#     OTHER cannot change VICTIM's priority (cudaw-ctl exit 5), its own and root's work; a
#     cudawd of OTHER is not joined by VICTIM's program; --system refuses a non-root user.
#     A peer that reports a swap cudawd did not ask for is ignored (logged), and it cannot set
#     another user's priority through the raw protocol either.
#   usage: test_users.sh CUDAW_CTL CUDAWD JOB EMU SPOOF_PEER      exit 0 / 1 / 77
set -u
ctl=$1 cudawd=$2 job=$3 emu=$4 spoof=$5
# Every cudawd started here (by the test, the plugin or `cudaw run --share`) keeps a small
# host-memory pool, not its default of half the RAM.
export CUDAW_SCHED_HOST_MEMORY=256M
[ "$(id -u)" -eq 0 ] || { echo "skipped: needs root, to run programs as other users"; exit 77; }
command -v setpriv >/dev/null || { echo "skipped: setpriv (util-linux) is missing"; exit 77; }
victim=65534 other=65533

tmp=$(mktemp -d /tmp/cudaw-users.XXXXXX)
chmod 0755 "$tmp"
pids=""
status=1
cleanup() {
  for pid in $pids; do kill "$pid" 2>/dev/null; done
  # What ran through setpriv (a child of the shell that $! names): known by its run dir.
  for pid in $(pgrep -x cudawd) $(pgrep -f "^$job "); do
    { tr '\0' '\n' < "/proc/$pid/environ"; } 2>/dev/null | grep -q "^CUDAW_RUN_DIR=$tmp/" &&
      kill "$pid"
  done
  rm -f "/dev/shm/cudaw-emu-all-${tmp#/tmp/}-0"
  if [ "$status" -eq 0 ]; then rm -rf "$tmp"; else echo "kept $tmp (logs)"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() { echo "FAIL: $*"; exit 1; }
as() { uid=$1; shift; setpriv --reuid="$uid" --regid="$uid" --clear-groups -- "$@"; }
mode() { stat -c %a "$1"; }
job_pid() { sed -n 's/^slurm_job: pid \([0-9]*\) holds.*/\1/p' "$1"; }  # the job's, not the shell's
owner() { stat -c %u "$1"; }
wait_file() { # path seconds log
  i=0
  while [ ! -e "$1" ]; do
    i=$((i + 1)); [ $i -lt $(($2 * 10)) ] || fail "no $1 within $2 s: $(cat "$3")"
    sleep 0.1
  done
}
export CUDAW_REAL_CUDART="$emu" CUDAW_EMU_MEM=256M CUDAW_LOG=info

# ---- 1. control across users ----------------------------------------------------------------
home=$tmp/victim
mkdir -p "$home" && chown "$victim:$victim" "$home" && chmod 0700 "$home"
run=$home/run
as $victim env CUDAW_RUN_DIR="$run" "$job" 32 "$home" > "$tmp/victim.out" 2>&1 &
waiter=$!
wait_file "$home/ready" 30 "$tmp/victim.out"
pid=$(job_pid "$tmp/victim.out")
pids="$pids $pid"
[ "$(mode "$run")" = 700 ] || fail "the run dir $run is mode $(mode "$run"), expected 700"
[ "$(mode "$run/$pid.sock")" = 600 ] || fail "the control socket is mode $(mode "$run/$pid.sock")"

# Another uid, even knowing the run dir: the directory stops it, and cudaw-ctl says whose it is.
for request in status checkpoint resume; do
  as $other env CUDAW_RUN_DIR="$run" "$ctl" $request "$pid" > "$tmp/other.out" 2>&1
  code=$?
  [ $code -eq 5 ] || fail "uid $other: cudaw-ctl $request $pid exited $code, expected 5: $(cat "$tmp/other.out")"
  grep -q "belongs to uid $victim; only that user or root" "$tmp/other.out" ||
    fail "uid $other: cudaw-ctl $request: no clear reason: $(cat "$tmp/other.out")"
done
echo "ok: uid $other refused by the run dir: $(tail -1 "$tmp/other.out")"
# Opened up by root (a mistake an administrator could make): the program's own check refuses.
chmod 0755 "$home" "$run"
chmod 0666 "$run/$pid.sock"
as $other env CUDAW_RUN_DIR="$run" "$ctl" checkpoint "$pid" > "$tmp/other.out" 2>&1
code=$?
[ $code -eq 5 ] || fail "uid $other, socket opened up: checkpoint exited $code: $(cat "$tmp/other.out")"
grep -q "uid $other may not control pid $pid" "$tmp/other.out" ||
  fail "uid $other, socket opened up: not refused by SO_PEERCRED: $(cat "$tmp/other.out")"
grep -q "control socket: pid [0-9]* refused: uid $other may not control pid $pid" "$tmp/victim.out" ||
  fail "the refusal is not in the program's log: $(cat "$tmp/victim.out")"
echo "ok: uid $other refused by SO_PEERCRED: $(tail -1 "$tmp/other.out")"
chmod 0700 "$home" "$run"
chmod 0600 "$run/$pid.sock"
CUDAW_RUN_DIR="$run" "$ctl" --json status "$pid" | grep -q '"state":"running"' || fail "the refused requests changed its state"

# Its owner checkpoints it to disk; the image is private even in a directory made 0755.
mkdir "$home/image" && chown "$victim:$victim" "$home/image" && chmod 0755 "$home/image"
as $victim env CUDAW_RUN_DIR="$run" "$ctl" checkpoint --to "$home/image" "$pid" > "$tmp/owner.out" 2>&1 ||
  fail "uid $victim cannot checkpoint its own program: $(cat "$tmp/owner.out")"
[ "$(mode "$home/image")" = 700 ] || fail "the image directory is mode $(mode "$home/image")"
files=0
for f in "$home/image"/*; do
  files=$((files + 1))
  [ "$(mode "$f")" = 600 ] && [ "$(owner "$f")" = $victim ] ||
    fail "image file $f: mode $(mode "$f") owner $(owner "$f"), expected 600 $victim"
done
[ $files -ge 2 ] || fail "the image directory holds $files files: $(ls -l "$home/image")"
chmod 0755 "$home"  # so that only the files' own modes stand in the way
for f in "$home/image"/*; do
  as $other cat "$f" > /dev/null 2>&1 && fail "uid $other read $f"
done
chmod 0700 "$home"
echo "ok: owner's checkpoint --to: $files files 0600 uid $victim in a 0700 directory (was 0755); uid $other cannot read them"
grep -q "was mode 755: made 700" "$tmp/victim.out" || fail "the narrowing is not logged: $(cat "$tmp/victim.out")"
as $victim env CUDAW_RUN_DIR="$run" "$ctl" resume "$pid" > "$tmp/owner.out" 2>&1 ||
  fail "uid $victim cannot resume its own program: $(cat "$tmp/owner.out")"
# root may control it too.
CUDAW_RUN_DIR="$run" "$ctl" checkpoint "$pid" > "$tmp/root.out" 2>&1 || fail "root: checkpoint: $(cat "$tmp/root.out")"
CUDAW_RUN_DIR="$run" "$ctl" resume "$pid" > "$tmp/root.out" 2>&1 || fail "root: resume: $(cat "$tmp/root.out")"
touch "$home/go"
wait "$waiter" || fail "the victim's job failed: $(cat "$tmp/victim.out")"
grep -q 'verified 32 MiB' "$tmp/victim.out" || fail "not verified: $(cat "$tmp/victim.out")"
echo "ok: its owner and root checkpointed and resumed it; verified 32 MiB"

# ---- 2. the system cudawd ---------------------------------------------------------------------
as $other "$cudawd" --system > "$tmp/nonroot.out" 2>&1 && fail "cudawd --system ran as uid $other"
grep -q "runs as root" "$tmp/nonroot.out" || fail "cudawd --system as uid $other: $(cat "$tmp/nonroot.out")"
sys=$tmp/sys
CUDAW_RUN_DIR=$sys "$cudawd" --system --quantum 1 > "$tmp/cudawd.log" 2>&1 &
daemon=$!
pids="$pids $daemon"
wait_file "$sys/cudawd.sock" 10 "$tmp/cudawd.log"
[ "$(mode "$sys")" = 755 ] && [ "$(owner "$sys")" = 0 ] || fail "$sys: mode $(mode "$sys") owner $(owner "$sys")"
[ "$(mode "$sys/cudawd.sock")" = 666 ] || fail "the system socket is mode $(mode "$sys/cudawd.sock")"
echo "ok: cudawd --system: $(head -1 "$tmp/cudawd.log"); $sys 755, socket 666"

# Two users' programs of 160 MiB each on one 256 MiB device (cudawd hands out 90%: 230 MiB).
export CUDAW_EMU_SHARED=all CUDAW_EMU_SHARED_KEY="${tmp#/tmp/}" CUDAW_SHARE=1 \
  CUDAW_SCHED_SOCKET="$sys/cudawd.sock"
job_pids=""
for uid in $victim $other; do
  dir=$tmp/share$uid
  mkdir -p "$dir" && chown "$uid:$uid" "$dir" && chmod 0700 "$dir"
  as $uid env CUDAW_RUN_DIR="$dir/run" "$job" 160 "$dir" > "$tmp/share$uid.out" 2>&1 &
  job_pids="$job_pids $!"
done
wait_file "$tmp/share$victim/ready" 60 "$tmp/share$victim.out"
wait_file "$tmp/share$other/ready" 60 "$tmp/share$other.out"
victim_pid=$(job_pid "$tmp/share$victim.out") other_pid=$(job_pid "$tmp/share$other.out")
pids="$pids $victim_pid $other_pid"
set -- $job_pids
for uid in $victim $other; do
  grep -q "sched: joined cudawd on $sys/cudawd.sock" "$tmp/share$uid.out" ||
    fail "uid $uid's program did not join: $(cat "$tmp/share$uid.out")"
done
# Priorities: only one's own programs (and root all).
as $other env CUDAW_SCHED_SOCKET="$sys/cudawd.sock" "$ctl" priority "$victim_pid" 5 > "$tmp/prio.out" 2>&1
code=$?
[ $code -eq 5 ] || fail "uid $other set uid $victim's priority (exit $code): $(cat "$tmp/prio.out")"
grep -q "belongs to another user" "$tmp/prio.out" || fail "priority refusal: $(cat "$tmp/prio.out")"
echo "ok: uid $other: $(cat "$tmp/prio.out")"
as $other env CUDAW_SCHED_SOCKET="$sys/cudawd.sock" "$ctl" priority "$other_pid" 2 > "$tmp/prio.out" 2>&1 ||
  fail "uid $other cannot set its own program's priority: $(cat "$tmp/prio.out")"
"$ctl" priority "$victim_pid" 2 > "$tmp/prio.out" 2>&1 || fail "root: priority: $(cat "$tmp/prio.out")"
# A peer breaking the protocol: a swap report nobody asked for, another user's priority.
as $other "$spoof" "$sys/cudawd.sock" "$victim_pid" > "$tmp/spoof.out" 2>&1 ||
  fail "the spoofing peer could not talk to cudawd: $(cat "$tmp/spoof.out")"
grep -q "status -1 " "$tmp/spoof.out" || fail "raw priority request for another user's pid: $(cat "$tmp/spoof.out")"
sleep 0.2
grep -q "a result (1) it was not asked for: ignored" "$tmp/cudawd.log" ||
  fail "cudawd took a swap report it did not ask for: $(cat "$tmp/cudawd.log")"
echo "ok: a peer's unasked swap report is ignored, its raw priority request refused: $(cat "$tmp/spoof.out")"
# Both ran (each was ready with its 160 MiB resident), so cudawd swapped one out for the other.
# Let them take a few more turns, then finish.
sleep 3
touch "$tmp/share$victim/go" "$tmp/share$other/go"
for uid in $victim $other; do
  pid=$1; shift
  wait "$pid" || fail "uid $uid's program failed: $(cat "$tmp/share$uid.out")"
  grep -q 'verified 160 MiB' "$tmp/share$uid.out" || fail "uid $uid: $(cat "$tmp/share$uid.out")"
done
for uid in $victim $other; do
  grep -q "(uid $uid) joined" "$tmp/cudawd.log" || fail "cudawd: no uid $uid: $(cat "$tmp/cudawd.log")"
done
for pid in $victim_pid $other_pid; do
  grep -q "pid $pid swapped out" "$tmp/cudawd.log" || fail "pid $pid was never swapped out: $(cat "$tmp/cudawd.log")"
done
echo "ok: two users' 160 MiB programs on one 256 MiB device: both verified;" \
     "$(grep -c 'swapped out' "$tmp/cudawd.log") swaps out by the system cudawd"

# A cudawd of another user is not joined (nor would it be allowed to swap the program).
unset CUDAW_EMU_SHARED
mine=$tmp/other-cudawd
mkdir -p "$mine" && chown "$other:$other" "$mine"
as $other env CUDAW_RUN_DIR="$mine/run" CUDAW_SCHED_SOCKET= "$cudawd" > "$tmp/other-cudawd.log" 2>&1 &
pids="$pids $!"
wait_file "$mine/run/cudawd.sock" 10 "$tmp/other-cudawd.log"
chmod 0755 "$mine/run"; chmod 0666 "$mine/run/cudawd.sock"  # even when reachable
mkdir -p "$tmp/lone" && chown "$victim:$victim" "$tmp/lone"
as $victim env CUDAW_RUN_DIR="$tmp/lone/run" CUDAW_SCHED_SOCKET="$mine/run/cudawd.sock" \
  "$job" 0 "$tmp/lone" > "$tmp/lone.out" 2>&1 || fail "$(cat "$tmp/lone.out")"
grep -q "belongs to uid $other, not to us: not joining it" "$tmp/lone.out" ||
  fail "uid $victim's program and uid $other's cudawd: $(cat "$tmp/lone.out")"
echo "ok: $(grep -m1 'not joining' "$tmp/lone.out")"
status=0
