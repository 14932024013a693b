#!/bin/sh
# Description: on a GPU machine (as root), a PyTorch job in a "container" made by applying
# cudaw's generated CDI edits by hand, as an engine would (new pid and mount namespaces, the
# spec's bind mounts read-only where it says, only the spec's environment added): device
# cudaw.io/gpu=0-share-2, so the job runs under cudaw with half of GPU 0's memory and joins
# the node's system cudawd. From the host, by host pid: cudaw-ctl list and sched show it, a
# checkpoint gives its memory back (nvidia-smi), a resume brings it back; its losses are
# identical to a native run. Its 4 GiB ballast and the two 8 GiB float64 sums of it (PyTorch's
# cache splits the first, so the second needs a block of its own) fit half an H100; a quarter
# share (19.79 GiB) did not: PyTorch ran out of memory, as on a GPU of that size. Exit 77 without
# a GPU or root.
#   usage: tests/k8s/gpu_pytorch_cdi.sh BUILD_DIR [OUT_DIR]
set -u
B=$(cd "$1" && pwd) OUT=${2:-/tmp/cudaw-k8s-gpu}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "skipped: needs root"; exit 77; }
nvidia-smi -L >/dev/null 2>&1 || { echo "skipped: no GPU"; exit 77; }
mkdir -p "$OUT"
fail() { echo "FAIL: $*"; exit 1; }
train="python3 $SRC/examples/pytorch/train.py --steps ${STEPS:-400} --batch 256 --ballast-gib 4 --step-delay 0.02"
daemon=
cleanup() { [ -n "$daemon" ] && kill "$daemon" 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT

# Native, for the losses to compare with.
$train --record "$OUT/native.losses" > "$OUT/native.log" 2>&1 || fail "native run: $(tail -3 "$OUT/native.log")"

# The node: the system cudawd on /run/cudaw/sched (a folder the share devices mount), the spec.
mkdir -p /run/cudaw/sched /run/cudaw/containers && chmod 0755 /run/cudaw && chmod 1777 /run/cudaw/containers
CUDAW_SCHED_SOCKET=/run/cudaw/sched/cudawd.sock CUDAW_SCHED_HOST_MEMORY=off \
  "$B/bin/cudawd" --system > "$OUT/cudawd.log" 2>&1 &
daemon=$!
for i in $(seq 50); do [ -S /run/cudaw/sched/cudawd.sock ] && break; sleep 0.1; done
"$B/bin/cudaw" cdi generate --output "$OUT/cudaw.json" --cudawd-socket /run/cudaw/sched/cudawd.sock \
  --env CUDAW_LOG=info > "$OUT/cdi.log" 2>&1 || fail "cudaw cdi generate: $(cat "$OUT/cdi.log")"
"$B/tests/k8s/k8s_cdi_edits" "$OUT/cudaw.json" cudaw.io/gpu=0-share-2 > "$OUT/edits" ||
  fail "no device 0-share-2 in the spec"
echo "edits of cudaw.io/gpu=0-share-2:"; sed 's/^/  /' "$OUT/edits"

# The container: its own pid and mount namespaces, the edits, and nothing of cudaw but them.
{
  echo "set -e"
  awk '$1 == "mount" { print "mount --bind " $2 " " $3;
                       if ($4 == "ro") print "mount -o remount,bind,ro " $3 }' "$OUT/edits"
  printf 'exec env -u LD_PRELOAD -u LD_LIBRARY_PATH'
  awk '$1 == "env" { printf " '\''%s'\''", substr($0, 5) }' "$OUT/edits"
  printf ' %s --check %s --pause-file %s/hold\n' "$train" "$OUT/native.losses" "$OUT"
} > "$OUT/container.sh"
unshare --pid --fork --mount --mount-proc sh "$OUT/container.sh" > "$OUT/container.log" 2>&1 &
runner=$!
hp=
for i in $(seq 300); do
  hp=$(pgrep -f "examples/pytorch/train.py --steps" -n); [ -n "$hp" ] && grep -q "^step 20 " "$OUT/container.log" && break
  sleep 0.2
done
[ -n "$hp" ] || fail "the container's job did not start: $(tail -5 "$OUT/container.log")"
inner=$(awk '/^NSpid:/ { print $NF }' "/proc/$hp/status")
echo "container job: host pid $hp, pid $inner inside"
tr '\0' '\n' < "/proc/$hp/environ" | grep -E "^CUDAW_(MEM_LIMIT|SHARE|SCHED_SOCKET|RUN_DIR)=|^LD_PRELOAD=" | sed 's/^/  /'
"$B/bin/cudaw-ctl" list > "$OUT/list.txt" 2>&1
grep -E "^ *$hp " "$OUT/list.txt" || fail "cudaw-ctl list does not show host pid $hp: $(cat "$OUT/list.txt")"
CUDAW_SCHED_SOCKET=/run/cudaw/sched/cudawd.sock "$B/bin/cudaw-ctl" sched > "$OUT/sched.txt" 2>&1
grep -E "^$hp " "$OUT/sched.txt" || fail "cudawd does not list host pid $hp: $(cat "$OUT/sched.txt")"
touch "$OUT/hold"   # the job waits between steps while we look: its losses stay comparable
before=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
"$B/bin/cudaw-ctl" checkpoint "$hp" || fail "checkpoint of host pid $hp"
during=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
"$B/bin/cudaw-ctl" status "$hp"
"$B/bin/cudaw-ctl" resume "$hp" || fail "resume of host pid $hp"
rm -f "$OUT/hold"
echo "GPU memory used: $before MiB running, $during MiB paused (by host pid $hp)"
wait "$runner"; rc=$?
tail -3 "$OUT/container.log"
[ $rc -eq 0 ] || fail "the container's job failed (rc $rc): $(tail -5 "$OUT/container.log")"
grep -q "cudaw" "$OUT/container.log" || fail "the container's job shows no sign of cudaw"
[ $((before - during)) -gt 3072 ] || fail "the checkpoint gave back only $((before - during)) MiB"
echo "ok: losses identical to native; paused and resumed from the host by host pid"
