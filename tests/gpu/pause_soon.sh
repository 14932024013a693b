#!/bin/sh
# Description: a real job paused soon after its allocations, as users, cudawd and Slurm pause
# (issue 32): PAUSE_AFTER (default 2) seconds after it printed "allocated N bytes", checkpointed
# by cudaw-ctl (stop-the-world, or --live), resumed PAUSED_FOR (default 1) seconds later, and run
# to its end. Prints the checkpoint's and the resume's time and GB/s against the pinned ceilings
# measured in the same run (ckpt_mem_helper ceiling), the live stall, the resume's re-creation
# time, and fails (exit 1) unless the job ends with the checksum of an uninterrupted native run
# and cudaw really saved its bytes. Options (CUDAW_*) in the environment reach the job; SOON_LOG
# names a file that keeps cudaw's log of the run.
# usage: pause_soon.sh <build dir> <name> stop|live <program> [args...]      (exit 77 without a GPU)
B=$1 name=$2 mode=$3; shift 3
helper=$B/tests/gpu/ckpt_mem_helper ctl=$B/bin/cudaw-ctl
lib=$(ls "$B"/lib/libcudart.so.* | head -1)
fail() { echo "FAIL $name ($mode): $*"; [ -f "$log" ] && tail -20 "$log"; exit 1; }
info=$("$helper" info); rc=$?
[ $rc -eq 77 ] && { echo "$info"; exit 77; }
[ $rc -eq 0 ] || fail "helper: $info"
tmp=$(mktemp -d); out=$tmp/out; log=$tmp/log; pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT
ceil=$("$helper" ceiling) || fail "ceiling: $ceil"
d2h=$(echo "$ceil" | awk '{print $2}') h2d=$(echo "$ceil" | awk '{print $4}')
native=$("$@" 2>/dev/null | grep -o "checksum=[0-9a-f]*") || fail "native run failed"
CUDAW_RUN_DIR=$tmp/run CUDAW_LOG=${CUDAW_LOG:-info} CUDAW_LOG_FILE=$log LD_PRELOAD="$lib" "$@" > "$out" 2>&1 &
pid=$!
for i in $(seq 1200); do
  grep -q "allocated [0-9]* bytes" "$out" && break
  kill -0 $pid 2>/dev/null || fail "the job ended before it allocated: $(tail -3 "$out")"
  sleep 0.05
done
sleep "${PAUSE_AFTER:-2}"
kill -0 $pid 2>/dev/null || fail "the job ended before the pause"
flag=; [ "$mode" = live ] && flag=--live
ck=$(CUDAW_RUN_DIR=$tmp/run "$ctl" --json checkpoint $flag $pid) || fail "checkpoint: $ck"
if [ -n "${SOON_STATUS:-}" ]; then # while paused: the reserve's state, five times over PAUSED_FOR
  for i in 1 2 3 4 5; do
    CUDAW_RUN_DIR=$tmp/run "$ctl" --json status $pid | grep -oE '"(state|reserve_bytes|reserve_used|reserve_target|reserve_refused|image_pinned_bytes)":[^,]*' | tr '\n' ' '
    echo; sleep "$(awk -v p="${PAUSED_FOR:-1}" 'BEGIN { print p / 5 }')"
  done
else
  sleep "${PAUSED_FOR:-1}"
fi
re=$(CUDAW_RUN_DIR=$tmp/run "$ctl" --json resume $pid) || fail "resume: $re"
wait $pid; prc=$?; pid=
[ $prc -eq 0 ] || fail "the job exited $prc: $(tail -3 "$out")"
got=$(grep -o "checksum=[0-9a-f]*" "$out")
field() { echo "$1" | sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p"; }
bytes=$(field "$ck" bytes)
[ -n "$bytes" ] && [ "$bytes" -gt 0 ] || fail "cudaw saved nothing: $ck"
awk -v b="$bytes" -v cs="$(field "$ck" seconds)" -v stall="$(field "$ck" stall_ms)" \
    -v pre="$(field "$ck" precopy_bytes)" -v re_b="$(field "$ck" recopy_bytes)" \
    -v rs="$(field "$re" seconds)" -v mem="$(field "$re" memory_ms)" -v d2h="$d2h" -v h2d="$h2d" \
    -v staged="$(field "$ck" staged_bytes)" -v name="$name" -v mode="$mode" \
    -v rstaged="$(field "$re" staged_bytes)" -v rcopy="$(field "$re" copy_seconds)" \
    -v rhash="$(field "$re" device_hash_ms)" -v rwait="$(field "$re" memory_wait_ms)" \
    -v beside="$(echo "$re" | grep -c '"memory_beside":true')" 'BEGIN {
  g = 1e9; gib = 1073741824
  printf "%s (%s): %.2f GiB; ceilings D2H %.2f, H2D %.2f GB/s\n", name, mode, b / gib, d2h, h2d
  if (mode == "live")
    printf "  checkpoint --live: stall %.1f ms (%.2f GiB pre-copied, %.2f GiB re-copied in the pause), %.3f s in all\n", stall, pre / gib, re_b / gib, cs
  else
    printf "  checkpoint: %.3f s = %.2f GB/s = %.2fx of D2H (%.2f GiB staged)\n", cs, b / cs / g, b / cs / g / d2h, staged / gib
  made = beside ? sprintf("re-creating device memory beside the copy %.1f ms, the copy waited %.1f ms", mem, rwait) : sprintf("re-creating device memory %.1f ms", mem)
  printf "  resume: %.3f s = %.2f GB/s = %.2fx of H2D (%s, copy %.3f s with %.2f GiB staged, checksums on the device %.1f ms)\n", rs, b / rs / g, b / rs / g / h2d, made, rcopy, rstaged / gib, rhash
}'
[ "$got" = "$native" ] || fail "checksum $got, native $native"
echo "  output identical to the native run ($got)"
grep -E "reserve|page-lock" "$log" | head -5 | sed 's/^/  log: /'
if [ -n "${SOON_LOG:-}" ]; then cp "$log" "$SOON_LOG"; fi
