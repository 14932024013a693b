#!/bin/sh
# cudaw demo for a fresh Debian 12 machine: install what is missing, build, run an unmodified
# CUDA program under cudaw. On the GPU if there is one, otherwise on the emulated device.
#   usage: examples/demo.sh [build dir]        (default: build)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
case $build in /*) ;; *) build=$PWD/$build ;; esac

need=""
# Slurm, for the SPANK plugin (slurm/) and its local-cluster test (tests/slurm/); gRPC and
# protobuf, for the Kubernetes device plugin (k8s/) and its fake-kubelet test (tests/k8s/).
for pkg in cmake gcc g++ make python3 libelf-dev libzstd-dev liblz4-dev libcapstone-dev \
           libxxhash-dev zlib1g-dev libjansson-dev \
           slurmd slurmctld slurm-client munge libslurm-dev \
           libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler python3-grpcio python3-protobuf; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need="$need $pkg"
done
if [ -n "$need" ]; then
  echo "demo: installing:$need"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $need
fi
command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || {
  echo "demo: the CUDA toolkit (nvcc) is required: install CUDA 12 or 13 at /usr/local/cuda" >&2
  exit 1
}
[ -n "${CUDACXX:-}" ] || { command -v nvcc >/dev/null 2>&1 || export CUDACXX=/usr/local/cuda/bin/nvcc; }

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "demo: running examples/vector_add under cudaw on the GPU"
  CUDAW_LOG=info "$build/bin/cudaw" run -- "$build/examples/vector_add"
else
  echo "demo: no GPU on this machine: running examples/vector_add under cudaw on the EMULATED device"
  CUDAW_LOG=info CUDAW_REAL_CUDART="$build/tests/emu/libcudaw-emu.so" \
    LD_PRELOAD="$build/examples/libcudaw-example-emu-kernels.so" \
    "$build/bin/cudaw" run -- "$build/examples/vector_add"
fi
