#!/usr/bin/env bash
# Sharing benchmarks on a real GPU (issue 24): three jobs (share_bench_job.cu) that each hold
# FRACTION% of the GPU's memory (57%: together 1.7x the GPU, so only one is resident at a time),
# each doing the same fixed GPU work, run
#   gpu:  GPU-bound (one phase): one after another natively, then at once under `cudaw run --share`
#         (cudawd --quantum QUANTUM): target shared <= 1.05x of one after another;
#   host: half of each job's time in host phases (HOST_PHASES phases of GPU work then as long on
#         the CPU, no CUDA call): target one after another >= 1.5x the shared time.
# For every swap cudawd logged, out + in against size / D2H + size / H2D at the pinned ceilings
# measured here (target <= 1.2x), and each job's GPU time (cudawd's gpu_seconds: resident, not
# waiting, not idle) while all three were there: equal priorities, so the spread (max - min) / min
# must be at most 10%. Every job verifies all its memory at the end.
# Exit 0: all targets met; 1: a job failed or a target was missed; 77: no GPU.
# Usage: tests/sched/share_bench.sh <cudaw build dir> [out dir]
# Environment: SCENARIOS ("gpu host"), JOB_SECONDS (30: GPU work per job), QUANTUM (30),
# FRACTION (57), HOST_PHASES (3), CUDAWD_ARGS (more cudawd options), JOB (the job program),
# TOUCH_GIB (write that much host memory once before anything: a fresh VM's first touch),
# HOST_VARIANTS (the host scenario's shared run again under each of these settings, e.g.
# "CUDAW_SHARE_IDLE_MS=100 CUDAW_SHARE_IDLE_MS=50,CUDAW_LOG=info").
set -u
B=$(cd "${1:?usage: share_bench.sh <build dir> [out dir]}" && pwd)
OUT=${2:-/tmp/cudaw-share-bench}
mkdir -p "$OUT"
JOB=${JOB:-"$B/tests/sched/sched_share_bench_job"}
[ -x "$JOB" ] || { echo "no $JOB (built with nvcc only)"; exit 1; }
SECS=${JOB_SECONDS:-30}
Q=${QUANTUM:-30}
PHASES=${HOST_PHASES:-3}
export CUDAW_RUN_DIR="$OUT/run"
calc() { awk "BEGIN { printf \"%.2f\", $1 }"; }
t_now() { date +%s.%N; }
# cudawd's lines with the wall clock in front, to lay beside the jobs' "AT <time> gpu|host N".
stamp() { while IFS= read -r line; do printf '%s %s\n' "${EPOCHREALTIME:-$(t_now)}" "$line"; done; }

# A VM's memory that was never touched is backed by the hypervisor page by page on first touch:
# cudawd's pool and the first swap-outs then ran up to 10x slower (H200, session 24). TOUCH_GIB
# writes that much host memory once first, as a machine in use has.
if [ -n "${TOUCH_GIB:-}" ]; then "$JOB" --touch "$TOUCH_GIB" || { echo "touching failed"; exit 1; }; fi
ceil=$("$JOB" --ceiling 4 2>&1)
rc=$?
[ $rc -eq 77 ] && { echo "$ceil"; exit 77; }
d2h=$(echo "$ceil" | awk '/^D2H/ { print $2 }'); h2d=$(echo "$ceil" | awk '/^H2D/ { print $2 }')
both=$(echo "$ceil" | awk '/^BOTH/ { print $2 }') # each way, both at once: an exchange's bound
[ -n "$d2h" ] && [ -n "$h2d" ] || { echo "ceiling failed: $ceil"; exit 1; }
iters=$("$JOB" --calibrate 2 2>&1 | awk '/^ITERS/ { print $2 }')
[ -n "$iters" ] || { echo "calibration failed"; exit 1; }
total_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 |
            awk '{ printf "%.1f", $1 / 1024 }')
gib=$(calc "$total_gib * ${FRACTION:-57} / 100")
echo "pinned ceilings: D2H $d2h GB/s, H2D $h2d GB/s, both at once ${both:-?} GB/s each way;" \
     "GPU $total_gib GiB; 3 jobs of $gib GiB;" \
     "$SECS s of GPU work each (2 ms kernels, $iters iterations); quantum $Q s"

fail=0
run_scenario() { # name phases kernels_per_phase host_ms [serial s, name of its native logs]
  local name=$1 phases=$2 kernels=$3 host_ms=$4 serial=${5:-} t0 shared j pids rc
  if [ -n "$serial" ]; then # a variant: the same native runs stand as its reference
    for j in 1 2 3; do cp "$OUT/${6}_native$j.log" "$OUT/${name}_native$j.log"; done
  else
    t0=$(t_now)
    for j in 1 2 3; do
      "$JOB" "$gib" "$phases" "$kernels" "$host_ms" "$iters" > "$OUT/${name}_native$j.log" 2>&1 ||
        { echo "$name: native job $j failed"; tail -3 "$OUT/${name}_native$j.log"; fail=1; }
    done
    serial=$(calc "$(t_now) - $t0")
  fi
  rm -rf "$CUDAW_RUN_DIR"; mkdir -p "$CUDAW_RUN_DIR"
  "$B/bin/cudawd" --quantum "$Q" ${CUDAWD_ARGS:-} > >(stamp > "$OUT/${name}_cudawd.log") 2>&1 &
  local daemon=$!
  sleep 0.5
  t0=$(t_now)
  pids=()
  for j in 1 2 3; do
    # cudaw's log (standard error), each line stamped with the wall clock as cudawd's are.
    "$B/bin/cudaw" run --share -- "$JOB" "$gib" "$phases" "$kernels" "$host_ms" "$iters" \
      > "$OUT/${name}_shared$j.log" 2> >(stamp > "$OUT/${name}_cudaw$j.log") &
    pids+=($!)
  done
  # GPU time of each while all three are there: the last snapshot before the first one exits.
  : > "$OUT/${name}_snap.json"
  while kill -0 "${pids[0]}" 2>/dev/null && kill -0 "${pids[1]}" 2>/dev/null &&
        kill -0 "${pids[2]}" 2>/dev/null; do
    "$B/bin/cudaw-ctl" --json sched > "$OUT/${name}_snap.tmp" 2>/dev/null &&
      mv "$OUT/${name}_snap.tmp" "$OUT/${name}_snap.json"
    sleep 1
  done
  for j in 1 2 3; do
    wait "${pids[$((j-1))]}"; rc=$?
    grep -q "verified" "$OUT/${name}_shared$j.log" && [ $rc -eq 0 ] ||
      { echo "$name: shared job $j failed (rc $rc)"; tail -3 "$OUT/${name}_shared$j.log"; fail=1; }
  done
  shared=$(calc "$(t_now) - $t0")
  # The end: from the last job's last word ("AT <time> verified") to the last one reaped, which
  # is its process's exit (cudaw's destructors, the driver's teardown).
  cat "$OUT/${name}_shared"[123].log | awk -v end="$(calc "$t0 + $shared")" -v t0="$t0" '
    $1 == "AT" && $3 == "verified" && $2 > last { last = $2 }
    END { if (last) printf "  the end: last job verified at %.2f s, all reaped at %.2f s (its exit %.2f s)\n",
                           last - t0, end - t0, end - last }'
  "$B/bin/cudaw-ctl" sched > "$OUT/${name}_sched.txt" 2>&1
  kill "$daemon"; wait "$daemon" 2>/dev/null
  echo "$name: one after another natively $serial s; at once under cudawd $shared s;" \
       "shared / serial $(calc "$shared / $serial"), speed-up $(calc "$serial / $shared")x"
  grep -E "swapped (out|in)|not swapping|failed|exchange (done|FAILED)" "$OUT/${name}_cudawd.log" |
    sed 's/^/  /' | head -24
  # Each swap out and the next swap in of the same pid, against the ceilings; an exchange (one
  # program out while the other comes in, at once) is one swap: its time against the out
  # program's size / D2H + the in program's size / H2D. Fields: the time stamp, then cudawd's line.
  awk -v d2h="$d2h" -v h2d="$h2d" -v both="${both:-0}" '
    function after(text, re,   rest, f) { rest = text; if (!sub(re, "", rest)) return -1
                                          split(rest, f, " "); return f[1] }
    /exchanging pid/ { inside = 1 }
    /exchange (done|FAILED):/ { inside = 0
        o = after($0, ".*pid [0-9]+ out "); i = after($0, ".*pid [0-9]+ in "); t = after($0, ".*[)] in ")
        if (o < 0 || i < 0 || t < 0) next
        ideal = o * 1.073741824 / d2h + i * 1.073741824 / h2d
        if (ideal <= 0) next
        printf "  exchange: %.2f GiB out, %.2f GiB in, at once in %.3f s; at the ceilings %.3f s: %.2fx (target <= 1.2x)",
               o, i, t, ideal, t / ideal
        # both ways at once: the larger side at the measured bidirectional rate (informative)
        if (both > 0) printf "; both ways at once %.3f s: %.2fx", (o > i ? o : i) * 1.073741824 / both,
                             t / ((o > i ? o : i) * 1.073741824 / both)
        printf "\n"
        if (t / ideal > 1.2 || /FAILED/) missed = 1; next }
    inside { next }
    /swapped out:/ { pid = $4; out_gib[pid] = $7; out_s[pid] = $10 }
    /swapped in:/ { pid = $4; if (pid in out_s) {
        gb = out_gib[pid] * 1.073741824; ideal = gb / d2h + gb / h2d; got = out_s[pid] + $10
        printf "  swap of pid %s: %.2f GiB out %.3f s + in %.3f s = %.3f s; at the ceilings %.3f s: %.2fx (target <= 1.2x)\n",
               pid, out_gib[pid], out_s[pid], $10, got, ideal, got / ideal
        if (got / ideal > 1.2) missed = 1; delete out_s[pid] } }
    END { exit missed }' "$OUT/${name}_cudawd.log" || { echo "  MISSED: a swap above 1.2x"; fail=1; }
  # Where each job's time went: its GPU phases shared against the same phases natively (the
  # difference is waiting for the GPU: its turn, a swap), from the jobs' "AT" lines.
  for j in 1 2 3; do
    awk -v j="$j" '
      FNR == 1 { file++ }
      /^AT / { if ($3 == "gpu") begin[file, $4] = $2
               if ($3 == "host" && ((file, $4) in begin)) took[file, $4] = $2 - begin[file, $4]
               if ($3 == "host" && $4 + 1 > n) n = $4 + 1 }
      END { if (!n) exit
            printf "  job %d: GPU phases natively", j; for (p = 0; p < n; p++) printf " %.2f", took[1, p]
            printf " s, shared"; for (p = 0; p < n; p++) { printf " %.2f", took[2, p]; w += took[2, p] - took[1, p] }
            printf " s: %.2f s waiting for the GPU\n", w }' \
      "$OUT/${name}_native$j.log" "$OUT/${name}_shared$j.log"
  done
  # The jobs' own words on the pool's readiness at their swaps, on grants slow to be made and on
  # slow exits (the last two are debug lines: CUDAW_LOG=debug): what first swaps depend on.
  grep -hE "into the range lent \(ready\)|granted was made|given back at exit|more ready in" \
    "$OUT/${name}_cudaw"[123].log 2>/dev/null | sed 's/^/  job log: /' | head -12
  if ! grep -q "swapped out:" "$OUT/${name}_cudawd.log"; then
    # Each job finished within its turn: they ran one after another, and while all three were
    # there only the first computed. No shares to compare.
    echo "  no swaps: the jobs ran one after another (GPU-time spread not judged)"
    eval "${name}_serial=$serial ${name}_shared=$shared"
    return
  fi
  tr '{' '\n' < "$OUT/${name}_snap.json" | grep -o '"pid":[0-9]*\|"gpu_seconds":[0-9.]*' |
    paste - - | awk -F'[:\t]' '{ printf "%s %s\n", $2, $4 }' > "$OUT/${name}_gpu_s.txt"
  awk '{ s[NR] = $2 } END {
         if (NR < 3) { print "  GPU time while all three ran: no snapshot"; exit 1 }
         mn = s[1]; mx = s[1]; for (i = 2; i <= NR; i++) { if (s[i] < mn) mn = s[i]; if (s[i] > mx) mx = s[i] }
         printf "  GPU time each while all three ran (cudawd):"; for (i = 1; i <= NR; i++) printf " %.2f s", s[i]
         spread = mn > 0 ? 100 * (mx - mn) / mn : 1e9
         printf "; spread (max - min) / min %.1f%% (target <= 10%%)\n", spread
         exit spread > 10 }' "$OUT/${name}_gpu_s.txt" ||
    { echo "  MISSED: GPU time spread above 10% (or no snapshot)"; fail=1; }
  eval "${name}_serial=$serial ${name}_shared=$shared"
}

kernels=$(( SECS * 1000 / 2 ))
for s in ${SCENARIOS:-gpu host}; do
  case $s in
  gpu)
    run_scenario gpu 1 "$kernels" 0
    awk "BEGIN { exit !($gpu_shared <= 1.05 * $gpu_serial) }" ||
      { echo "MISSED: GPU-bound shared $(calc "$gpu_shared / $gpu_serial")x > 1.05x"; fail=1; } ;;
  host)
    # As long on the host as on the GPU: the GPU phase's length alone, measured natively.
    host_ms=$(( SECS * 1000 / PHASES ))
    run_scenario host "$PHASES" $(( kernels / PHASES )) "$host_ms"
    awk "BEGIN { exit !($host_serial >= 1.5 * $host_shared) }" ||
      { echo "MISSED: host phases speed-up $(calc "$host_serial / $host_shared")x < 1.5x"; fail=1; }
    # HOST_VARIANTS: the shared run again under other settings, against the same serial run
    # (each a comma-separated list of NAME=value), to compare settings in one call.
    k=0
    for variant in ${HOST_VARIANTS:-}; do
      k=$((k + 1))
      IFS=, read -r -a assign <<< "$variant"
      echo "host, again with ${assign[*]}:"
      ( export "${assign[@]}"
        run_scenario "host_v$k" "$PHASES" $(( kernels / PHASES )) "$host_ms" "$host_serial" host
        v_shared=host_v${k}_shared
        awk "BEGIN { exit !($host_serial >= 1.5 * ${!v_shared}) }" ||
          { echo "MISSED: host phases speed-up $(calc "$host_serial / ${!v_shared}")x < 1.5x"; exit 1; }
        exit $fail ) || fail=1
    done ;;
  esac
done
# Every log in one file beside the out dir: a GPU machine gives back only a few files.
tar czf "$OUT.tgz" -C "$(dirname "$OUT")" "$(basename "$OUT")" 2>/dev/null &&
  echo "logs: $OUT.tgz"
[ $fail -eq 0 ] && echo "all targets met"
exit $fail
