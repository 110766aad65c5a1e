#!/usr/bin/env bash
# A one-node Slurm cluster on localhost, for testing the scripts `megalab slurm` writes (tests/test_slurm.py).
#   tools/slurm-local.sh start DIR   munged, slurmctld and slurmd with their config, state and logs in DIR;
#                                    prints the line to export (SLURM_CONF=DIR/slurm.conf) once the node is idle
#   tools/slurm-local.sh stop DIR    ends the three daemons started in DIR (by their pid files)
# Needs root (slurmd starts jobs as their user). Debian's slurm-wlm and munge are installed with apt-get when
# missing and CI=true or MEGALAB_SLURM_INSTALL=1; otherwise a missing daemon ends it with exit 3 and a reason.
set -euo pipefail
cmd=${1:?usage: slurm-local.sh start|stop DIR} dir=${2:?usage: slurm-local.sh start|stop DIR}
ports=${MEGALAB_SLURM_PORTS:-16817-16818}

if [ "$cmd" = stop ]; then
  for d in slurmd slurmctld munged; do
    [ -f "$dir/$d.pid" ] && kill "$(cat "$dir/$d.pid")" 2>/dev/null || true
  done
  exit 0
fi
[ "$cmd" = start ] || { echo "slurm-local: unknown command $cmd: use start or stop" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "slurm-local: a local Slurm cluster needs root (slurmd starts jobs as their user)" >&2; exit 3; }

missing() { for b in munged slurmctld slurmd sbatch squeue scontrol sinfo; do command -v "$b" >/dev/null || return 0; done; return 1; }
export PATH=$PATH:/usr/sbin:/sbin
if missing; then
  if [ "${CI:-}" = true ] || [ "${MEGALAB_SLURM_INSTALL:-}" = 1 ]; then
    command -v apt-get >/dev/null || { echo "slurm-local: no slurm and no apt-get to install it" >&2; exit 3; }
    install() { DEBIAN_FRONTEND=noninteractive timeout 150 apt-get install -y -q --no-install-recommends \
                  slurm-wlm munge >"$dir.apt.log" 2>&1; }
    mkdir -p "$(dirname "$dir")"
    install || { timeout 60 apt-get update -q >>"$dir.apt.log" 2>&1 && install; } || {
      echo "slurm-local: apt-get could not install slurm-wlm and munge (log: $dir.apt.log)" >&2; exit 3; }
  else
    echo "slurm-local: no slurm here: apt-get install slurm-wlm munge (as root), or set MEGALAB_SLURM_INSTALL=1" >&2
    exit 3
  fi
fi

mkdir -p "$dir/state" "$dir/spool"
chmod 700 "$dir"
head -c 1024 /dev/urandom > "$dir/munge.key" && chmod 400 "$dir/munge.key"
munged --force --key-file="$dir/munge.key" --socket="$dir/munge.sock" --pid-file="$dir/munged.pid" \
       --log-file="$dir/munged.log" --seed-file="$dir/munged.seed"
cat > "$dir/slurm.conf" <<CONF
ClusterName=megalab
SlurmctldHost=localhost
SlurmctldPort=${ports%-*}
SlurmdPort=${ports#*-}
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=localhost CPUs=$(nproc) State=UNKNOWN
PartitionName=local Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$dir/slurm.conf
slurmctld -i
slurmd
for _ in $(seq 60); do
  [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && { echo "SLURM_CONF=$SLURM_CONF"; exit 0; }
  sleep 0.5
done
echo "slurm-local: the node did not come up idle in 30 s (logs: $dir/slurmctld.log, $dir/slurmd.log)" >&2
exit 3
