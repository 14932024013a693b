#!/bin/sh
# Fetch the Debian 12 -dev packages cudaw builds against (the static libraries it links and hides)
# for tests/gpu/device_run.sh's build stage on a GPU machine that reaches no package registry.
# Run here, then carry the folder (run's carry: [".carry"]); device_run.sh unpacks every .deb in
# it into /tmp/deps and points cmake there.
#   usage: tests/gpu/fetch_debs.sh [DIR]      (default .carry/debs, git-ignored)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-$root/.carry/debs}
mkdir -p "$dir"
cd "$dir"
apt-get download libelf-dev libelf1 libzstd-dev liblz4-dev libcapstone-dev libcapstone4 \
  libxxhash-dev zlib1g-dev libjansson-dev
ls "$dir"
