#!/bin/sh
# cudaw demo for a fresh Debian 12 machine: install what is missing, build, then show what cudaw is
# for. An unmodified CUDA program (examples/heat.cu) runs under cudaw, is paused by SIGUSR1 (its
# device memory goes to host memory and the GPU keeps only its context), resumed by cudaw-ctl, and
# ends with the checksum of an uninterrupted run. On the GPU if there is one, else on cudaw's
# emulated device (host memory, with the examples' kernels run on the host). Exits 1, saying
# why, if anything it shows is wrong; every wait is bounded.
#   usage: examples/demo.sh [build dir]        (default: build)
#   DEMO_RUN_ONLY=1: use the build dir as it is (no install, no build); for ctest.
#   DEMO_EMULATED=1: the emulated device even where there is a GPU.
#   DEMO_TIMEOUT=S: the longest heat may run (default 150 s).
#   DEMO_HEAT_ARGS="n steps ballast-MiB every": heat's arguments (defaults below).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
case $build in /*) ;; *) build=$PWD/$build ;; esac

say() { echo "demo: $*"; }
fail() {
  echo "demo: FAILED: $*" >&2
  if [ -n "${heat_err:-}" ] && [ -s "$heat_err" ]; then
    echo "demo: heat's standard error:" >&2; tail -5 "$heat_err" >&2
  fi
  exit 1
}

if [ -z "${DEMO_RUN_ONLY:-}" ]; then
  need=""
  # Slurm, for the SPANK plugin (slurm/) and its local-cluster test (tests/slurm/); gRPC and
  # protobuf, for the Kubernetes device plugin (k8s/) and its fake-kubelet test (tests/k8s/).
  for pkg in cmake gcc g++ make python3 libelf-dev libzstd-dev liblz4-dev libcapstone-dev \
             libxxhash-dev zlib1g-dev libjansson-dev \
             slurmd slurmctld slurm-client munge libslurm-dev \
             libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
             python3-grpcio python3-protobuf; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need="$need $pkg"
  done
  if [ -n "$need" ]; then
    say "installing:$need"
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $need
  fi
  command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] ||
    fail "the CUDA toolkit (nvcc) is required: install CUDA 12 or 13 at /usr/local/cuda"
  [ -n "${CUDACXX:-}" ] || { command -v nvcc >/dev/null 2>&1 || export CUDACXX=/usr/local/cuda/bin/nvcc; }

  # Only what the demo runs; the whole project and its tests: see the README.
  mkdir -p "$build"
  log=$build/demo-build.log
  start=$(date +%s)
  printf 'demo: building cudaw in %s (log: %s) ... ' "$build" "$log"
  if ! { cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
         cmake --build "$build" -j"$(nproc)" --target cudaw cudaw_ctl cudaw_launcher heat \
               cudaw_emu cudaw_example_emu_kernels; } >"$log" 2>&1; then
    echo "failed"; tail -30 "$log" >&2; fail "the build failed (whole log: $log)"
  fi
  echo "done in $(( $(date +%s) - start )) s"
fi

ctl=$build/bin/cudaw-ctl
for f in "$build/bin/cudaw" "$ctl" "$build/examples/heat"; do
  [ -x "$f" ] || fail "$f is missing: build first (examples/demo.sh $build)"
done
work=$(mktemp -d "${TMPDIR:-/tmp}/cudaw-demo.XXXXXX")
heat_pid=""; watchdog=""
cleanup() {
  [ -z "$heat_pid" ] || kill -9 "$heat_pid" 2>/dev/null || true
  [ -z "$watchdog" ] || kill "$watchdog" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE
heat_out=$work/heat.out; heat_err=$work/heat.err
export CUDAW_RUN_DIR="$work/run"   # its control socket, apart from other cudaw programs
limit_s=${DEMO_TIMEOUT:-150}

# used_bytes PID: device memory in use: by that process as nvidia-smi lists it (else every GPU's
# memory.used), or on the emulated device its CUDAW_EMU_USED_FILE, the emulated nvidia-smi.
if [ -z "${DEMO_EMULATED:-}" ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  gpu=1
  # 4096^2 cells and 4 GiB of ballast: about 4.1 GiB to give back, a few seconds of work.
  heat_args=${DEMO_HEAT_ARGS:-4096 100000 4096 25000}
  seen_as="nvidia-smi"
  process_mib() { # $1's MiB as nvidia-smi lists it; nothing where it is not listed or has no figure
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
      awk -F', *' -v p="$1" '$1 == p && $2 ~ /^[0-9]+$/ { s += $2; f = 1 } END { if (f) print s }'
  }
  used_bytes() {
    if [ "$seen_as" = "nvidia-smi" ]; then mib=$(process_mib "$1")
    else mib=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | awk '{ s += $1 } END { print s }')
    fi
    echo $((${mib:-0} * 1048576))
  }
  say "running examples/heat on the GPU ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))"
else
  gpu=0
  [ -f "$build/tests/emu/libcudaw-emu.so" ] && [ -f "$build/examples/libcudaw-example-emu-kernels.so" ] ||
    fail "no GPU, and no emulated device in $build (its targets: cudaw_emu cudaw_example_emu_kernels)"
  export CUDAW_REAL_CUDART="$build/tests/emu/libcudaw-emu.so"
  export CUDAW_EMU_USED_FILE="$work/used" CUDAW_EMU_CONTEXT_MEM="${CUDAW_EMU_CONTEXT_MEM:-512M}"
  export LD_PRELOAD="$build/examples/libcudaw-example-emu-kernels.so${LD_PRELOAD:+:$LD_PRELOAD}"
  heat_args=${DEMO_HEAT_ARGS:-512 8000 256 2000}
  seen_as="CUDAW_EMU_USED_FILE, the emulated nvidia-smi"
  used_bytes() { head -1 "$CUDAW_EMU_USED_FILE" 2>/dev/null | awk '{ print $1 + 0 }'; }
  say "no GPU here: examples/heat runs on cudaw's EMULATED device (host memory; its context: $CUDAW_EMU_CONTEXT_MEM)"
fi
mib() { awk -v b="$1" 'BEGIN { printf "%.0f MiB", b / 1048576 }'; }

# wait_line FILE REGEX SECONDS: 0 once a line of FILE matches; 1 when the time is up or heat ended
# without it.
wait_line() {
  i=0
  while ! grep -q "$2" "$1" 2>/dev/null; do
    [ $i -lt $(($3 * 10)) ] || return 1
    if [ -n "$heat_pid" ] && ! kill -0 "$heat_pid" 2>/dev/null; then grep -q "$2" "$1"; return; fi
    sleep 0.1; i=$((i + 1))
  done
}
shown=0
show_heat() { # heat's lines not shown yet, indented
  total=$(wc -l <"$heat_out")
  [ "$total" -le "$shown" ] || sed -n "$((shown + 1)),${total}p" "$heat_out" | sed 's/^/    /'
  shown=$total
}
checksum_of() { sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p' "$1" | tail -1; }

# 1. The uninterrupted run: natively on a GPU; on the emulated device under cudaw, not paused.
t0=$(date +%s)
if [ $gpu -eq 1 ]; then
  how="natively"
  timeout "$limit_s" "$build/examples/heat" $heat_args >"$work/ref.out" 2>"$work/ref.err" ||
    { heat_err=$work/ref.err; fail "the uninterrupted run of heat failed"; }
else
  how="under cudaw, not paused"
  timeout "$limit_s" "$build/bin/cudaw" run -- "$build/examples/heat" $heat_args \
    >"$work/ref.out" 2>"$work/ref.err" || { heat_err=$work/ref.err; fail "the uninterrupted run of heat failed"; }
fi
reference=$(checksum_of "$work/ref.out")
[ -n "$reference" ] || fail "the uninterrupted run printed no checksum"
say "heat $heat_args, uninterrupted ($how): checksum $reference, $(( $(date +%s) - t0 )) s"

# 2. The same run under cudaw, paused by SIGUSR1 after its first progress line.
"$build/bin/cudaw" run -- "$build/examples/heat" $heat_args >"$heat_out" 2>"$heat_err" &
heat_pid=$!   # cudaw run execs the program: the same pid
( i=0; while [ $i -lt "$limit_s" ] && kill -0 "$heat_pid"; do sleep 1; i=$((i + 1)); done
  kill -9 "$heat_pid" ) >/dev/null 2>&1 &   # ends within a second of heat
watchdog=$!
say "the same under cudaw (pid $heat_pid):"
wait_line "$heat_out" "heat: step " 60 || fail "heat under cudaw printed no progress in 60 s"
show_heat
# A process nvidia-smi does not list (another pid namespace): the total of every GPU instead.
[ $gpu -eq 0 ] || [ -n "$(process_mib "$heat_pid")" ] || seen_as="nvidia-smi, every GPU"
before=$(used_bytes "$heat_pid")
echo "$ kill -USR1 $heat_pid"
kill -USR1 "$heat_pid"
# The signal returns at once (status says "pausing" while the memory is copied); cudaw-ctl
# checkpoint would wait. Poll, bounded.
i=0
while :; do
  status=$("$ctl" status "$heat_pid" 2>&1) || fail "cudaw-ctl status: $status"
  case $status in *": paused;"*) break ;; esac
  [ $i -lt 300 ] || fail "not paused 30 s after SIGUSR1: $status"
  sleep 0.1; i=$((i + 1))
done
echo "$ cudaw-ctl status $heat_pid"
echo "$status"
sleep 1   # no progress while paused
paused=$(used_bytes "$heat_pid")
show_heat
allocated=$(sed -n 's/.*allocated \([0-9]*\) bytes.*/\1/p' "$heat_out")
[ -n "$allocated" ] || fail "heat did not say how much it allocated"
# Heat's own memory must be gone (90% of it, for nvidia-smi's rounding to MiB).
[ $((before - paused)) -ge $((allocated / 10 * 9)) ] ||
  fail "the pause gave back $(mib $((before - paused))) of heat's $(mib "$allocated") ($(mib "$before") in use running, $(mib "$paused") paused)"
say "device memory in use ($seen_as): $(mib "$before") running, $(mib "$paused") paused (its context)"
echo "$ cudaw-ctl resume $heat_pid"
resumed=$("$ctl" resume "$heat_pid" 2>&1) || fail "cudaw-ctl resume: $resumed"
echo "$resumed"
wait_line "$heat_out" "checksum=" "$limit_s" || fail "heat did not finish after the resume"
wait "$heat_pid" || fail "heat exited with status $? after the resume"
heat_pid=""
show_heat
resumed_sum=$(checksum_of "$heat_out")
[ "$resumed_sum" = "$reference" ] ||
  fail "checksums differ: uninterrupted $reference, paused and resumed ${resumed_sum:-none}"
say "checksum uninterrupted $reference, paused and resumed $resumed_sum: identical"
pause_s=$(echo "$status" | sed -n 's/.*last checkpoint: \(.* in [0-9.]* s\).*/\1/p')
resume_s=$(echo "$resumed" | sed -n 's/.*restored and verified \(.* in [0-9.]* s\).*/\1/p')
[ -n "$pause_s" ] && [ -n "$resume_s" ] || fail "no timings in cudaw-ctl's answers"
say "pause: saved $pause_s; resume: restored and verified $resume_s"
own="${build#"$root"/}/bin/cudaw run -- ./my_program"
[ $gpu -eq 1 ] || own="$own (without a GPU: README, \"No GPU?\")"
say "next: your own program: $own"
say "      its image on disk: cudaw-ctl checkpoint --to DIR <pid>; a memory cap: CUDAW_MEM_LIMIT=8G"
say "      jobs that do not fit together on one GPU: cudaw run --share (README, \"Sharing a GPU\")"
