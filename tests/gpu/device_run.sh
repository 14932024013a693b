#!/usr/bin/env bash
# One call on a GPU machine: build cudaw from source there and run the GPU half of the suite,
# benchmarks and framework checks. The machine lacks our Debian -dev packages: their .debs travel
# in .carry/debs (tests/gpu/fetch_debs.sh fetches them here) and are unpacked into /tmp/deps.
# Usage: tests/gpu/device_run.sh [stage ...]   stages: build test bench pytorch cupy ckpt driver release multi
# spill pool idle share notebook soon soon_threads poolfault poollaunch exitcopy demo gpu k8s (default: build test bench). spill: tests/gpu/spill_bench.sh.
# notebook: tests/sched/notebook_bench.sh (six PyTorch notebooks through cudawd's disk tier).
# idle: tests/sched/idle_bench.sh. soon: jobs paused ~2 s after allocating (tests/gpu/pause_soon.sh);
# soon_threads: PyTorch's, with 8, 12 and 16 reserve threads; poolfault: tests/bench/bench_pool_fault;
# poollaunch: tests/bench/bench_pool_launch (page-locking beside 2-ms kernels); exitcopy:
# tests/bench/bench_exit_pinned copy (a swap-in's copy beside another program's exit).
# demo: examples/demo.sh on the built tree (the
# README's first command, nvidia-smi's figures); gpu: `ctest -L gpu -j4`, the GPU tests side by side; k8s: a
# PyTorch job under cudaw's CDI edits applied by hand (tests/k8s/gpu_pytorch_cdi.sh). Logs go to $OUT (or /tmp/cudaw-out); the summary is
# printed last.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/cudaw-out}
B=${CUDAW_DEVICE_BUILD:-$SRC/build-device}
mkdir -p "$OUT"
stages=${*:-build test bench}
summary=()
note() { summary+=("$*"); echo "== $*"; }

if [[ " $stages " == *" build "* ]]; then
  mkdir -p /tmp/deps
  for f in "${DEBS:-$SRC/.carry/debs}"/*.deb; do dpkg -x "$f" /tmp/deps; done
  D=/tmp/deps/usr
  t0=$SECONDS
  { cmake -S "$SRC" -B "$B" -DCUDAW_WERROR=ON -DCMAKE_PREFIX_PATH=$D -DCMAKE_INCLUDE_PATH=$D/include \
      -DCMAKE_LIBRARY_PATH=$D/lib/x86_64-linux-gnu && cmake --build "$B" -j16; } > "$OUT/build.log" 2>&1
  rc=$?
  note "build: rc=$rc in $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || { tail -30 "$OUT/build.log"; exit 1; }
fi
if [[ " $stages " == *" test "* ]]; then
  # GPU tests that pause programs or fill the device run alone (RUN_SERIAL in their CMake).
  (cd "$B" && ctest -j6 --output-on-failure --timeout 300 ${CTEST_ARGS:-} > "$OUT/ctest.log" 2>&1)
  note "ctest: $(grep -E 'tests passed' "$OUT/ctest.log")"
  grep -E "\*\*\*Failed|\(Failed\)|Timeout|Not Run" "$OUT/ctest.log" | head -20
  for t in $(grep -oE "Test +#[0-9]+: [a-z_0-9.]+ \.+\*\*\*Failed" "$OUT/ctest.log" | awk '{print $3}'); do
    echo "---- $t"; (cd "$B" && ctest -R "^$t\$" --output-on-failure 2>&1 | tail -25)
  done
fi
if [[ " $stages " == *" figures "* ]]; then
  # What some tests print when they pass: parse times, layouts against the driver's.
  (cd "$B" && ctest -V -R "kparam.test_corpus|kparam.test_lazy_register|gpu_kparam_layouts" \
     > "$OUT/figures.log" 2>&1)
  note "figures:"; grep -E "^[0-9]+: " "$OUT/figures.log" | grep -viE "test command|working dir|environment" | tail -25
fi
if [[ " $stages " == *" bench "* ]]; then
  for policy in remap translate; do
    "$B/tests/bench/compare_runs" ${LAUNCH_REPEATS:-7} "$B/lib" --env CUDAW_VMEM=$policy -- "$B/tests/bench/bench_launch" \
      > "$OUT/bench_launch_$policy.log" 2>&1
    note "bench_launch $policy:"; tail -8 "$OUT/bench_launch_$policy.log"
    "$B/tests/bench/compare_runs" 5 "$B/lib" --env CUDAW_VMEM=$policy -- "$B/tests/bench/bench_alloc" \
      > "$OUT/bench_alloc_$policy.log" 2>&1
    note "bench_alloc $policy:"; tail -16 "$OUT/bench_alloc_$policy.log"
  done
fi
if [[ " $stages " == *" ckpt "* ]]; then
  sh "$SRC/tests/bench/bench_ckpt.sh" "$B/lib" "$B/tests/bench/bench_ckpt" ${CKPT_GIB:-1 8 32} \
    > "$OUT/bench_ckpt.log" 2>&1
  note "bench_ckpt (rc $?):"
  # Both runs' tables (without and with the reserve), not the breakdowns.
  grep -E "^# |^[0-9]+ GiB|^pause latency|^live checkpoints|^stall:" "$OUT/bench_ckpt.log"
fi
if [[ " $stages " == *" pytorch "* ]]; then
  STEPS=${STEPS:-30} bash "$SRC/examples/pytorch/check_all.sh" "$B" "$OUT/pytorch" > "$OUT/pytorch.log" 2>&1
  note "pytorch:"; grep -E "RESULT|ratio|status while|device memory|checks:" "$OUT/pytorch.log"
fi
if [[ " $stages " == *" release "* ]]; then
  # CRIU (4.x) is not part of cudaw: give its binary (or a wrapper) in $CRIU.
  bash "$SRC/examples/pytorch/check_release.sh" "$B" "$OUT/release" > "$OUT/release.log" 2>&1
  note "release (release-all, disk images, criu):"
  grep -E "RESULT|release-all|driver alone|ratio|disk|criu|native|checks:|paused|restored|image" "$OUT/release.log"
fi
if [[ " $stages " == *" driver "* ]]; then
  # Programs that reach the GPU only through the driver API, paused by SIGUSR1 and resumed.
  pause() { sh "$SRC/tests/gpu/ckpt_pause.sh" "$B/lib" "$B/bin/cudaw-ctl" "$B/tests/gpu/ckpt_mem_helper" \
              pause "${POLICY:-remap}" "$@"; }
  for job in "cupy python3 $SRC/examples/cupy/loop.py ${LOOP_ARGS:-2000 1024 100}" \
             "jax_noprealloc env XLA_PYTHON_CLIENT_PREALLOCATE=false python3 $SRC/examples/jax/loop.py ${LOOP_ARGS:-2000 1024 100}" \
             "jax_prealloc python3 $SRC/examples/jax/loop.py ${LOOP_ARGS:-2000 1024 100}"; do
    name=${job%% *}
    t0=$SECONDS
    timeout ${JOB_TIMEOUT:-200} bash -c "$(declare -f pause); SRC=$SRC B=$B POLICY=${POLICY:-remap} pause ${job#* }" \
      > "$OUT/driver_$name.log" 2>&1
    note "driver $name: rc=$? in $((SECONDS - t0)) s"
    grep -E "^native|^cudaw|paused in|device free|identical|FAIL|restored" "$OUT/driver_$name.log" | head -8
  done
fi
if [[ " $stages " == *" cupy "* ]]; then
  bash "$SRC/examples/cupy/check.sh" "$B" > "$OUT/cupy.log" 2>&1
  note "cupy:"; cat "$OUT/cupy.log"
fi
if [[ " $stages " == *" multi "* ]]; then
  # Two GPUs or more: the multi-device tests under both policies, DDP with NCCL (native against
  # cudaw, then group pauses mid-training) and checkpoint GB/s per device with all at once.
  # Multicast stays off (NVLS, symmetric memory): these machines must not use it.
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  (cd "$B" && ctest --output-on-failure --timeout 300 -R "gpu_multi" > "$OUT/multi_ctest.log" 2>&1)
  note "multi ctest: $(grep -E 'tests passed' "$OUT/multi_ctest.log")"
  grep -E "\*\*\*Failed|Skipped|Timeout" "$OUT/multi_ctest.log" | head
  STEPS=${STEPS:-40} bash "$SRC/examples/pytorch/check_ddp.sh" "$B" "$OUT/ddp" > "$OUT/ddp.log" 2>&1
  note "ddp (rc $?):"; grep -E "RESULT|^pause [0-9]|checks:|skipped" "$OUT/ddp.log"
  bash "$SRC/tests/gpu/multi_ckpt.sh" "$B" "${MULTI_GIB:-8}" > "$OUT/multi_ckpt.log" 2>&1
  note "multi_ckpt (rc $?):"; grep -E "device|together|multi_ckpt|FAIL|skipped" "$OUT/multi_ckpt.log"
fi
if [[ " $stages " == *" spill "* ]]; then
  # The disk tier: spill SPILL_GIB (40) to SPILL_DIR and resume streamed from it (spill_bench.sh).
  bash "$SRC/tests/gpu/spill_bench.sh" "$B" "${SPILL_GIB:-40}" "${SPILL_DIR:-/tmp/cudaw-spill}" \
    > "$OUT/spill.log" 2>&1
  note "spill (rc $?):"; grep -E "holder|checkpoint|spill|resume|plain read|hold device|FAIL" "$OUT/spill.log"
fi
if [[ " $stages " == *" pool "* ]]; then
  # cudawd's host-memory pool: one job of POOL_GIB swapped out and in, without and with the pool.
  bash "$SRC/tests/sched/pool_bench.sh" "$B" "${POOL_GIB:-40}" "$OUT/pool" > "$OUT/pool_bench.log" 2>&1
  note "pool_bench (rc $?):"; grep -vE "^\s*$" "$OUT/pool_bench.log" | tail -12
fi
if [[ " $stages " == *" idle "* ]]; then
  # An idle cudawd gives its memory back: two jobs of IDLE_GIB through the pool, then 65 s idle.
  bash "$SRC/tests/sched/idle_bench.sh" "$B" "${IDLE_GIB:-16}" "$OUT/idle" > "$OUT/idle_bench.log" 2>&1
  note "idle_bench (rc $?):"; grep -vE "^\s*$" "$OUT/idle_bench.log" | tail -16
fi
if [[ " $stages " == *" notebook "* ]]; then
  # The disk tier: six notebooks of 20-30 GiB, idle most of the time (SIZES, COMPUTE, IDLE, ROUNDS).
  bash "$SRC/tests/sched/notebook_bench.sh" "$B" "$OUT/notebook" > "$OUT/notebook_bench.log" 2>&1
  note "notebook_bench (rc $?):"; grep -vE "^\s*$" "$OUT/notebook_bench.log" | tail -40
fi
if [[ " $stages " == *" share "* ]]; then
  # Sharing benchmarks: three jobs of 1.7x the GPU, GPU-bound and with host phases (SCENARIOS).
  bash "$SRC/tests/sched/share_bench.sh" "$B" "$OUT/share" > "$OUT/share_bench.log" 2>&1
  note "share_bench (rc $?):"; grep -vE "^\s*$" "$OUT/share_bench.log" | tail -30
fi
if [[ " $stages " == *" soon "* || " $stages " == *" soon_threads "* ]] && [ "${WARM_GIB:-0}" -gt 0 ]; then
  # WARM_GIB: fault that much host memory in once first (a fresh VM's first touch is slow).
  t0=$SECONDS
  "$B/tests/gpu/ckpt_mem_helper" touch "$WARM_GIB" > "$OUT/warm.log" 2>&1
  rc=$?
  note "host memory touched first: $WARM_GIB GiB in $((SECONDS - t0)) s (rc $rc): $(tail -1 "$OUT/warm.log")"
fi
if [[ " $stages " == *" soon "* ]]; then
  # Issue 32: PyTorch 45 GiB and JAX (default 75% preallocation) paused ~2 s after allocating,
  # stop-the-world and live, under the default options; JAX once more under translate.
  soon() { bash "$SRC/tests/gpu/pause_soon.sh" "$B" "$@" >> "$OUT/soon.log" 2>&1; }
  : > "$OUT/soon.log"
  for mode in ${SOON_MODES:-stop live}; do
    soon pytorch_45g $mode python3 "$SRC/examples/pytorch/loop.py" ${PT_STEPS:-60000} 46080 2000
    soon jax_prealloc $mode python3 "$SRC/examples/jax/loop.py" ${JAX_STEPS:-20000} 1024 1000
  done
  CUDAW_VMEM=translate soon jax_prealloc_translate stop python3 "$SRC/examples/jax/loop.py" ${JAX_STEPS:-20000} 1024 1000
  note "pause soon after allocating:"; cat "$OUT/soon.log"
fi
if [[ " $stages " == *" soon_threads "* ]]; then
  # Issue 32: PyTorch 45 GiB paused ~2 s after allocating, SOON_REPEATS times with each number of
  # reserve threads (how much of the reserve is page-locked by then decides the checkpoint).
  : > "$OUT/soon_threads.log"
  for threads in ${RESERVE_THREADS:-8 12 16}; do
    for i in $(seq "${SOON_REPEATS:-3}"); do
      CUDAW_CKPT_RESERVE_THREADS=$threads bash "$SRC/tests/gpu/pause_soon.sh" "$B" \
        "pytorch_45g_reserve_threads_$threads" stop python3 "$SRC/examples/pytorch/loop.py" \
        ${PT_STEPS:-60000} 46080 2000 >> "$OUT/soon_threads.log" 2>&1
    done
  done
  note "pause soon, by reserve threads:"; cat "$OUT/soon_threads.log"
fi
if [[ " $stages " == *" poolfault "* ]]; then
  # How fast this host gives cudawd's pool its pages: populate (today) against fallocate.
  "$B/tests/bench/bench_pool_fault" ${POOL_FAULT_GIB:-16} 16 > "$OUT/pool_fault.log" 2>&1
  note "bench_pool_fault (rc $?):"; cat "$OUT/pool_fault.log"
fi
if [[ " $stages " == *" exitcopy "* ]]; then
  # A swap-in's copy (and its memory made beside it) while another program exits: the end of
  # share_bench host, where two swap-ins ran at 21 GB/s (tests/bench/bench_exit_pinned copy).
  "$B/tests/bench/bench_exit_pinned" ${EXIT_POOL_GIB:-94} ${EXIT_DEV_GIB:-45} copy > "$OUT/exit_copy.log" 2>&1
  note "bench_exit_pinned copy (rc $?):"; cat "$OUT/exit_copy.log"
fi
if [[ " $stages " == *" poollaunch "* ]]; then
  # What page-locking (own threads, other programs, piece sizes) costs kernels launched beside it.
  "$B/tests/bench/bench_pool_launch" ${POOL_LAUNCH_GIB:-32} > "$OUT/pool_launch.log" 2>&1
  note "bench_pool_launch (rc $?):"; cat "$OUT/pool_launch.log"
fi
if [[ " $stages " == *" demo "* ]]; then
  t0=$SECONDS
  DEMO_RUN_ONLY=1 sh "$SRC/examples/demo.sh" "$B" > "$OUT/demo.log" 2>&1
  note "demo (rc $?, $((SECONDS - t0)) s, $(wc -l < "$OUT/demo.log") lines):"; cat "$OUT/demo.log"
fi
if [[ " $stages " == *" k8s "* ]]; then
  # A PyTorch job in a "container" made of cudaw's CDI edits applied by hand (tests/k8s).
  t0=$SECONDS
  sh "$SRC/tests/k8s/gpu_pytorch_cdi.sh" "$B" "$OUT/k8s" > "$OUT/k8s.log" 2>&1
  note "k8s CDI by hand (rc $?, $((SECONDS - t0)) s):"; grep -vE "^\s*$" "$OUT/k8s.log" | tail -30
fi
if [[ " $stages " == *" gpu "* ]]; then
  t0=$SECONDS
  (cd "$B" && ctest -L gpu -j4 --output-on-failure --timeout 300 ${CTEST_ARGS:-} > "$OUT/gpu_ctest.log" 2>&1)
  note "ctest -L gpu -j4: $(grep -E 'tests passed' "$OUT/gpu_ctest.log") in $((SECONDS - t0)) s"
  grep -E "\*\*\*Failed|\(Failed\)|Timeout|Not Run" "$OUT/gpu_ctest.log" | head -20
fi
echo; echo "==== summary"; printf '%s\n' "${summary[@]}"
