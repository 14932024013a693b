#!/bin/sh
# Fetch the Debian 12 .deb files that tests/slurm/gpu_suspend.sh installs on a GPU machine that
# reaches no package registry: Slurm 22.05 (slurmd, slurmctld, the client), munge, their
# libraries, and libslurm-dev (only its spank.h is used there). Run here, then carry the folder.
#   usage: tests/slurm/fetch_debs.sh [DIR]      (default .carry/slurm-debs, git-ignored)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-$root/.carry/slurm-debs}
mkdir -p "$dir"
cd "$dir"
apt-get download slurmd slurmctld slurm-client slurm-wlm-basic-plugins munge libmunge2 \
  libhwloc15 liblua5.1-0 libnuma1 libyaml-0-2 libjson-c5 ucf libdbus-1-3 libreadline8 \
  readline-common libpam0g liblz4-1 libgcrypt20 libgpg-error0 libbz2-1.0 libudev1 adduser \
  lsb-base libslurm-dev
ls "$dir"
