#!/bin/sh
# Description: on a GPU machine (root), a PyTorch job under Slurm gives its GPU memory back
# while suspended: a one-machine cluster (cluster.sh) with the real GPU as gres, the job started
# with srun --cudaw, scontrol suspend; another process (nvidia-smi) sees the memory free while
# the job is stopped; scontrol resume; the job's per-step losses are identical to a native run.
# Slurm comes from the .deb files in SLURM_DEBS (default .carry/slurm-debs, fetched with
# `apt-get download`) where it is not installed, since the GPU machine reaches no registry.
#   usage: tests/slurm/gpu_suspend.sh [BUILD_DIR]      (default build-slurm-gpu; built if needed)
#   GIB: ballast the job holds besides its model (default 8), STEPS (default 200)
#   MODE=gang: instead, two such jobs whose memory does not fit together (a native filler
#   process takes the rest of the GPU) under gang scheduling (partition gang, 5 s slices):
#   both finish with losses identical to the native run, taking turns on the GPU.
#   exit 0 / 1 / 77 (no GPU, no PyTorch, not root)
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-slurm-gpu}
debs=${SLURM_DEBS:-$root/.carry/slurm-debs}
GIB=${GIB:-8} STEPS=${STEPS:-200}
train=$root/tests/sched/share_train.py
PY=${PYTHON:-python3}

[ "$(id -u)" -eq 0 ] || { echo "skipped: needs root (slurmd)"; exit 77; }
nvidia-smi -L >/dev/null 2>&1 || { echo "skipped: no GPU"; exit 77; }
"$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null ||
  { echo "skipped: no PyTorch with CUDA"; exit 77; }

# 1. Slurm from the carried .deb files.
if ! command -v slurmd >/dev/null 2>&1 && [ ! -x /usr/sbin/slurmd ]; then
  ls "$debs"/slurmd_*.deb >/dev/null 2>&1 || { echo "FAIL: no Slurm and no .deb files in $debs"; exit 1; }
  echo "unpacking Slurm from $debs"
  # The GPU machine is not Debian 12 (another libc and package names), so dpkg -i refuses the
  # packages' dependencies: unpack what is missing into / instead (no maintainer scripts, no
  # services started), leaving alone any package whose libraries the system already has.
  for deb in "$debs"/*.deb; do
    package=$(dpkg-deb -f "$deb" Package)
    case $package in libslurm-dev|adduser|lsb-base|ucf|readline-common) continue ;; esac
    dpkg -s "$package" 2>/dev/null | grep -q '^Status: install ok installed' && continue
    clash=$(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { print $6 }' | sed 's|^\./|/|' |
      grep -E '^/(usr/)?lib/' | while read -r f; do [ -e "$f" ] && echo "$f"; done | head -1)
    [ -z "$clash" ] || { echo "  $package: the system has $clash already"; continue; }
    # Unpacked aside and copied file by file: extracting into / would replace the symlinks of a
    # merged /usr (/lib -> usr/lib) with directories.
    rm -rf /tmp/cudaw-slurm-unpack && dpkg -x "$deb" /tmp/cudaw-slurm-unpack ||
      { echo "FAIL: dpkg -x $deb"; exit 1; }
    (cd /tmp/cudaw-slurm-unpack && find . ! -type d) | while read -r f; do
      dest=${f#.}
      case $dest in /lib/*|/lib64/*|/bin/*|/sbin/*) dest=/usr$dest ;; esac
      mkdir -p "$(dirname "$dest")" && cp -P "/tmp/cudaw-slurm-unpack/$f" "$dest"
    done
    echo "  $package"
  done
  # What the packages' scripts would have done: the daemons' alternatives (slurmd runs
  # slurmstepd by its plain name too).
  for tool in slurmctld slurmd slurmstepd; do
    [ -e /usr/sbin/$tool ] || ln -s /usr/sbin/$tool-wlm /usr/sbin/$tool
  done
  ldconfig
  id munge >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin munge ||
    { echo "FAIL: no munge user"; exit 1; }
fi
# 2. cudaw with the plugin, built as tests/gpu/device_run.sh builds it: the -dev packages the GPU
#    machine lacks travel in .carry/debs and are unpacked into /tmp/deps, and spank.h comes from
#    libslurm-dev unpacked there too (installing it would pull every Slurm plugin's -dev package).
deps=/tmp/deps/usr
mkdir -p /tmp/deps
for f in "${DEBS:-$root/.carry/debs}"/*.deb; do [ -f "$f" ] && dpkg -x "$f" /tmp/deps; done
[ -f /usr/include/slurm/spank.h ] || dpkg -x "$debs"/libslurm-dev_*.deb /tmp/deps
if [ ! -f "$build/lib/spank_cudaw.so" ] || [ ! -x "$build/bin/cudaw" ]; then
  echo "building cudaw in $build"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUDAW_BUILD_TESTS=OFF \
    -DCMAKE_PREFIX_PATH=$deps -DCMAKE_INCLUDE_PATH=$deps/include \
    -DCMAKE_LIBRARY_PATH=$deps/lib/x86_64-linux-gnu > "$build.cmake.log" 2>&1 ||
    { tail -30 "$build.cmake.log"; exit 1; }
  cmake --build "$build" -j"$(nproc)" --target spank_cudaw cudaw cudaw_launcher cudawd cudaw_ctl \
    > "$build.build.log" 2>&1 || { tail -30 "$build.build.log"; exit 1; }
fi
[ -f "$build/lib/spank_cudaw.so" ] || { echo "FAIL: spank_cudaw.so not built (see $build.cmake.log)"; exit 1; }

# 3. The cluster, with the real GPU as its gres.
dir=$(mktemp -d /tmp/cudaw-slurm-gpu.XXXXXX)
chmod 0755 "$dir"
srun_pid=""
cleanup() {
  [ -z "$srun_pid" ] || kill "$srun_pid" 2>/dev/null
  sh "$root/tests/slurm/cluster.sh" stop "$dir"
  echo "logs in $dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
echo "required $build/lib/spank_cudaw.so libdir=$build/lib bindir=$build/bin gres_conf=$dir/gres.conf" \
  > "$dir/plugstack.conf"
CLUSTER_GPU_FILE=/dev/nvidia0 sh "$root/tests/slurm/cluster.sh" start "$dir" "$dir/plugstack.conf" ||
  { echo "FAIL: the cluster did not start"; exit 1; }
export SLURM_CONF="$dir/slurm.conf"
gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }

# 4. The native run's losses, then the same job under Slurm, suspended and resumed.
echo "native run: $STEPS steps, ballast $GIB GiB"
"$PY" "$train" --steps "$STEPS" --ballast-gib "$GIB" --record "$dir/native.losses" > "$dir/native.out" 2>&1 ||
  { cat "$dir/native.out"; exit 1; }
idle=$(gpu_used)
if [ "${MODE:-suspend}" = gang ]; then
  # The job's size: what PyTorch allocated at most, plus its context and libraries (~1 GiB).
  job_mib=$(sed -n 's/.*max allocated \([0-9.]*\) GiB.*/\1/p' "$dir/native.out" |
            awk '{ printf "%d", $1 * 1024 + 1024 }')
  total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  filler_mib=$((total - idle - job_mib * 3 / 2))
  echo "gang: each job about $job_mib MiB; a native filler takes $filler_mib MiB of $total, so" \
       "one job fits and two do not"
  "$PY" -c "import torch, time; x = torch.empty($filler_mib << 20, dtype=torch.uint8, device='cuda'); print('filler', flush=True); time.sleep(100000)" \
    > "$dir/filler.out" 2>&1 &
  filler=$!
  i=0
  until grep -q filler "$dir/filler.out"; do
    i=$((i + 1)); [ $i -lt 600 ] || { cat "$dir/filler.out"; kill $filler; exit 1; }
    sleep 0.1
  done
  for j in 1 2; do
    CUDAW_LOG=info CUDAW_SUSPEND_START_WAIT=60 sbatch -Q --cudaw -p gang -c "$(nproc)" \
      -J "cudaw-gang$j" -o "$dir/gang$j.out" \
      --wrap "srun $PY $train --steps $STEPS --ballast-gib $GIB --check $dir/native.losses" ||
      { kill $filler; echo "FAIL: sbatch"; exit 1; }
  done
  peak=0 i=0
  while [ -n "$(squeue -h -n cudaw-gang1,cudaw-gang2)" ]; do
    i=$((i + 1)); [ $i -lt 12000 ] || { kill $filler; echo "FAIL: the gang jobs did not end in 20 min"; exit 1; }
    used=$(gpu_used); [ "$used" -gt "$peak" ] && peak=$used
    sleep 0.1
  done
  kill $filler
  for j in 1 2; do
    grep -E '^check:|^ballast|^times' "$dir/gang$j.out"
    echo "job $j: $(grep -c 'suspend: .* released' "$dir/gang$j.out") releases," \
         "$(grep -c 'waiting for device memory\|waiting up to' "$dir/gang$j.out") waits for memory"
    grep -q '^check: ok' "$dir/gang$j.out" || { tail -20 "$dir/gang$j.out"; echo "FAIL: gang job $j"; exit 1; }
  done
  echo "ok: two jobs of about $job_mib MiB that do not fit together beside a filler of $filler_mib" \
       "MiB took turns under gang scheduling; losses identical; GPU at most $peak of $total MiB"
  exit 0
fi
CUDAW_LOG=info srun -N1 -n1 --cudaw -J cudaw-gpu "$PY" "$train" --steps "$STEPS" --ballast-gib "$GIB" \
  --check "$dir/native.losses" > "$dir/job.out" 2>&1 &
srun_pid=$!
i=0
until grep -q '^step 0 ' "$dir/job.out"; do
  i=$((i + 1)); [ $i -lt 1200 ] || { cat "$dir/job.out"; echo "FAIL: the job did not start training"; exit 1; }
  kill -0 $srun_pid 2>/dev/null || { cat "$dir/job.out"; echo "FAIL: the job ended early"; exit 1; }
  sleep 0.1
done
sleep 2
task=$(grep -m1 -o '^cudaw\[[0-9]*\]' "$dir/job.out" | tr -dc 0-9)
jobid=$(squeue -h -n cudaw-gpu -o %i)
before=$(gpu_used)
t0=$(date +%s.%N)
scontrol suspend "$jobid" || { echo "FAIL: scontrol suspend"; exit 1; }
i=0
while [ "$(ps -o stat= -p "$task" | cut -c1)" != T ]; do
  i=$((i + 1)); [ $i -lt 200 ] || { echo "FAIL: task $task not stopped within 20 s"; exit 1; }
  sleep 0.05
done
t1=$(date +%s.%N)
sleep 3
during=$(gpu_used)
apps=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ';')
scontrol resume "$jobid" || { echo "FAIL: scontrol resume"; exit 1; }
wait $srun_pid
rc=$?
srun_pid=""
grep -E 'suspend:|^check:|^ballast|^times' "$dir/job.out"
echo "GPU memory used (MiB, nvidia-smi): idle $idle, job running $before, job suspended $during" \
     "(stopped $(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }") s after scontrol suspend); apps while suspended: ${apps:-none}"
[ $rc -eq 0 ] || { echo "FAIL: the job failed (rc $rc)"; exit 1; }
grep -q '^check: ok' "$dir/job.out" || { echo "FAIL: losses differ from the native run"; exit 1; }
[ "$during" -lt $((before - GIB * 1024 / 2)) ] || { echo "FAIL: the suspended job did not free its memory"; exit 1; }
echo "ok: suspended job freed $((before - during)) MiB; losses identical to the native run"
