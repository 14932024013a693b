#!/bin/sh
# A one-machine Slurm cluster in a folder, for the tests: its own munged, slurmctld and slurmd,
# a generated slurm.conf and gres.conf (one emulated GPU with 4 shards; partitions debug, the
# default, cudaw, and gang: time-sliced every 5 s), ports of its own.
#   cluster.sh check                 say why a cluster cannot run here (exit 77), or nothing
#   cluster.sh start DIR PLUGSTACK   write the configuration into DIR and start the daemons
#                                    (CLUSTER_GPU_FILE: the GPU's device file, on a GPU machine)
#   cluster.sh stop DIR              stop them (by the pids they wrote in DIR)
# Clients then need SLURM_CONF=DIR/slurm.conf.
set -eu

check() {
  [ "$(id -u)" -eq 0 ] || { echo "needs root (slurmd runs jobs as their user)"; return 77; }
  for tool in munged slurmctld slurmd srun scontrol sinfo; do
    command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || {
      echo "$tool is missing: apt-get install slurmd slurmctld slurm-client munge"; return 77; }
  done
  id munge >/dev/null 2>&1 || { echo "no munge user: apt-get install munge"; return 77; }
  return 0
}

wait_for() { # seconds, command...
  limit=$1; shift
  i=0
  while [ "$i" -lt $((limit * 10)) ]; do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1; i=$((i + 1))
  done
  return 1
}

start() {
  dir=$1 plugstack=$2
  host=$(hostname -s)
  base=$((20000 + $$ % 20000))
  mkdir -p "$dir/state" "$dir/spool" "$dir/munge" "$dir/dev"
  chmod 0755 "$dir"
  # munged refuses a key or socket folder that others may write; it runs as munge.
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 2>/dev/null
  chown -R munge:munge "$dir/munge"
  chmod 0755 "$dir/munge"; chmod 0400 "$dir/munge/munge.key"
  runuser -u munge -- /usr/sbin/munged --socket="$dir/munge/munge.socket" \
    --key-file="$dir/munge/munge.key" --pid-file="$dir/munge/munged.pid" \
    --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed"
  cpus=$(nproc)
  # CLUSTER_GPU_FILE=/dev/nvidia0 on a GPU machine; otherwise a stand-in file (slurmd only
  # needs the path to exist to count the GPU).
  gpu=${CLUSTER_GPU_FILE:-$dir/dev/nvidia0}
  [ -n "${CLUSTER_GPU_FILE:-}" ] || : > "$gpu"
  cat > "$dir/gres.conf" <<CONF
AutoDetect=off
Name=gpu File=$gpu
Name=shard Count=4 File=$gpu
CONF
  # Read from slurm.conf's folder. Where no systemd runs (containers, the GPU machine's VM with
  # cgroup v2), slurmd's cgroup/v2 plugin cannot ask dbus for its scope and slurmd would not start;
  # this cluster tracks processes without cgroups (proctrack/linuxproc, task/none), and the v1
  # plugin loads without touching any hierarchy.
  cat > "$dir/cgroup.conf" <<CONF
CgroupPlugin=cgroup/v1
CONF
  cat > "$dir/slurm.conf" <<CONF
ClusterName=cudawtest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$base
SlurmdPort=$((base + 1))
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=debug
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
PreemptType=preempt/none
PreemptMode=GANG
SchedulerTimeSlice=5
GresTypes=gpu,shard
PlugStackConfig=$plugstack
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus Gres=gpu:1,shard:4 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=cudaw Nodes=ALL MaxTime=INFINITE State=UP
PartitionName=gang Nodes=ALL MaxTime=INFINITE State=UP OverSubscribe=FORCE:2
CONF
  export SLURM_CONF="$dir/slurm.conf"
  /usr/sbin/slurmctld -c -f "$dir/slurm.conf"
  /usr/sbin/slurmd -f "$dir/slurm.conf"
  wait_for 20 sh -c 'sinfo -h -o %t | grep -q idle' || {
    echo "cluster did not come up; logs in $dir" >&2; return 1; }
}

stop() {
  dir=$1
  # Steps still running (a test that failed part way): end their slurmstepd, known by the
  # SLURM_CONF it inherited from our slurmd, before the daemons go.
  for pid in $(pgrep -x slurmstepd); do
    { tr '\0' '\n' < "/proc/$pid/environ"; } 2>/dev/null | grep -qx "SLURM_CONF=$dir/slurm.conf" &&
      kill -9 $(pgrep -P "$pid") "$pid" 2>/dev/null
  done
  for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    [ -s "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || continue
    wait_for 10 sh -c "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null || true
  done
}

case ${1:-} in
  check) check ;;
  start) start "$2" "$3" ;;
  stop) stop "$2" ;;
  *) echo "usage: cluster.sh check|start DIR PLUGSTACK|stop DIR" >&2; exit 2 ;;
esac
