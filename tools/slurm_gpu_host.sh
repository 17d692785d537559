#!/usr/bin/env bash
# A one-node SLURM on a GPU host that has none and cannot fetch it: Debian 12's SLURM 22.05 and munge,
# carried as .deb files, unpacked outside / and run as root on loopback, with the host's GPUs declared as a
# GRES, so that the pipeline's GPU jobs run through Snakemake's SLURM executor with a GPU SLURM allocates.
#
#   bash tools/slurm_gpu_host.sh fetch [DIR]        # on a Debian 12 machine with apt and pip: the .debs and
#                                                   # the executor's wheels into DIR (default .slurm)
#   bash tools/slurm_gpu_host.sh up [DIR]           # on the GPU host, as root: unpack, configure, start
#   bash tools/slurm_gpu_host.sh run RUN [ARGS...]  # the pipeline through SLURM into reports/RUN (needs up);
#                                                   # CONFIG="seed=1" adds config items
#   bash tools/slurm_gpu_host.sh down               # stop the daemons
#
# What this host needs and what it does without (found on a host with no systemd and no cgroup
# delegation): ProctrackType=proctrack/linuxproc, TaskPlugin=task/none, the first cgroup plugin slurmd
# starts with, no accounting (squeue answers the executor's status queries; sacct would need slurmdbd).
# Two links outside the unpack folder, made by `up` only where nothing is there: /usr/sbin/slurmstepd
# (slurmd starts job steps through that compiled-in path) and /etc/slurm/slurm.conf (see `up`).
# Everything else (state, spool, logs, munge's key and socket) lives under SLURM_ROOT (default
# /tmp/slurm-gpu-host). `up` prints `sinfo` with the node's GRES and a test job's CUDA_VISIBLE_DEVICES.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SR=${SLURM_ROOT:-/tmp/slurm-gpu-host}
DEBS=(slurmd slurmctld slurm-client slurm-wlm-basic-plugins munge libmunge2 libhwloc15 libjson-c5 liblua5.1-0
      libnuma1 libyaml-0-2 liblz4-1 libdbus-1-3 libgcrypt20 libgpg-error0 libpam0g libltdl7
      libpciaccess0 libudev1 libreadline8)
WHEELS=(snakemake-executor-plugin-slurm==2.8.0 snakemake-executor-plugin-slurm-jobstep==0.6.1 throttler==1.2.3)
LIB=$SR/usr/lib/x86_64-linux-gnu
export PATH="$SR/usr/sbin:$SR/usr/bin:$SR/sbin:$PATH"
export LD_LIBRARY_PATH="$LIB/slurm-wlm:$LIB:$SR/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SLURM_CONF=$SR/etc/slurm.conf

trap 'echo "slurm_gpu_host: a command failed at line $LINENO (logs: $SR/log)" >&2' ERR
die() { echo "slurm_gpu_host: $*" >&2; exit 1; }

fetch() {
  local dir=${1:-$ROOT/.slurm}
  mkdir -p "$dir/debs" "$dir/wheels"
  (cd "$dir/debs" && apt-get download "${DEBS[@]}" >/dev/null) || die "apt-get download failed (Debian 12 apt sources needed)"
  python3 -m pip download --no-deps -q -d "$dir/wheels" "${WHEELS[@]}" || die "pip download of the executor's wheels failed"
  echo "fetched: $(ls "$dir/debs" | wc -l) .debs, $(ls "$dir/wheels" | wc -l) wheels into $dir ($(du -sh "$dir" | cut -f1))"
}

stop() {
  for pid in "$SR/run/slurmd.pid" "$SR/run/slurmctld.pid" "$SR/run/munged.pid"; do
    [ -f "$pid" ] && kill "$(cat "$pid")" 2>/dev/null || true
    rm -f "$pid"
  done
}

up() {
  local dir=${1:-$ROOT/.slurm}
  [ "$(id -u)" = 0 ] || die "up needs root (munged and slurmd run as root here)"
  [ -d "$dir/debs" ] || die "no $dir/debs: run 'bash tools/slurm_gpu_host.sh fetch' on a Debian 12 machine and carry the folder"
  stop
  mkdir -p "$SR"
  for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$SR"; done
  [ -x "$SR/usr/sbin/slurmd-wlm" ] || die "the .debs did not unpack slurmd-wlm into $SR"
  # Debian installs the daemons as *-wlm and names them through alternatives. The name matters: SLURM
  # decides from its program name whether it runs as slurmd or slurmctld, and only then reads the node's
  # GRES from slurm.conf (run as slurmd-wlm, slurmd warns that gres.conf has "1 more configured than
  # expected" and the controller shows the node's GRES as (null)). So the daemons run through links.
  for d in slurmd slurmctld slurmstepd; do ln -sfn "$d-wlm" "$SR/usr/sbin/$d"; done
  # The executor's job step (snakemake-executor-plugin-slurm-jobstep) drops every SLURM_* variable but the
  # job's identity before its nested srun, SLURM_CONF included, so that srun reads the compiled-in
  # /etc/slurm/slurm.conf: a link there to this configuration (a real file there is left alone: refused).
  if [ -e /etc/slurm/slurm.conf ] && [ ! -L /etc/slurm/slurm.conf ]; then
    die "/etc/slurm/slurm.conf exists (a SLURM installed here?): not replacing it"
  fi
  mkdir -p /etc/slurm
  ln -sfn "$SLURM_CONF" /etc/slurm/slurm.conf
  if [ ! -e /usr/sbin/slurmstepd ]; then ln -s "$SR/usr/sbin/slurmstepd" /usr/sbin/slurmstepd; fi
  local host gpus=() mem
  host=$(hostname -s)
  for dev in /dev/nvidia[0-9]*; do [ -e "$dev" ] && gpus+=("$dev"); done
  [ ${#gpus[@]} -gt 0 ] || die "no /dev/nvidiaN on this host: no GPU to declare"
  rm -rf "${SR:?}/state" "${SR:?}/spool" "${SR:?}/log" "${SR:?}/run" "${SR:?}/etc"
  mkdir -p "$SR/state" "$SR/spool" "$SR/log" "$SR/run" "$SR/etc"
  # slurmd refuses a node whose RealMemory exceeds what it measures: take 90% of its own figure
  mem=$(slurmd -C | tr ' ' '\n' | sed -n 's/^RealMemory=//p')
  cat > "$SLURM_CONF" <<EOF
ClusterName=gpuhost
SlurmctldHost=$host
SlurmctldAddr=127.0.0.1
AuthType=auth/munge
AuthInfo=socket=$SR/run/munge.socket
PluginDir=$LIB/slurm-wlm
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SlurmctldPidFile=$SR/run/slurmctld.pid
SlurmdPidFile=$SR/run/slurmd.pid
StateSaveLocation=$SR/state
SlurmdSpoolDir=$SR/spool
SlurmctldLogFile=$SR/log/slurmctld.log
SlurmdLogFile=$SR/log/slurmd.log
SlurmUser=root
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
MinJobAge=3600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$((mem * 9 / 10)) Gres=gpu:${#gpus[@]} State=UNKNOWN
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  {
    echo "AutoDetect=off"
    for dev in "${gpus[@]}"; do echo "NodeName=$host Name=gpu File=$dev"; done
  } > "$SR/etc/gres.conf"
  head -c 1024 /dev/urandom > "$SR/etc/munge.key"
  chmod 600 "$SR/etc/munge.key"
  munged --force --key-file="$SR/etc/munge.key" --socket="$SR/run/munge.socket" --pid-file="$SR/run/munged.pid" \
    --log-file="$SR/log/munged.log" --seed-file="$SR/state/munged.seed"
  slurmctld
  # slurmd initialises a cgroup plugin even where nothing uses cgroups (proctrack/linuxproc, task/none).
  # Where cgroup v2 is mounted but systemd's dbus is absent, the default (autodetect -> cgroup/v2) fails
  # ("cannot connect to dbus system daemon ... slurmd initialization failed"). The first variant that
  # lets slurmd start is kept, and named.
  local variant ok=0
  for variant in "CgroupPlugin=autodetect" "CgroupPlugin=cgroup/v2|IgnoreSystemd=yes" \
                 "CgroupPlugin=cgroup/v2|IgnoreSystemd=yes|CgroupAutomount=yes" "CgroupPlugin=cgroup/v1"; do
    tr '|' '\n' <<< "$variant" > "$SR/etc/cgroup.conf"
    rm -f "$SR/run/slurmd.pid"
    if slurmd 2>> "$SR/log/slurmd.start" && sleep 2 && [ -f "$SR/run/slurmd.pid" ] && kill -0 "$(cat "$SR/run/slurmd.pid")" 2>/dev/null; then
      ok=1
      break
    fi
    echo "slurmd did not start with cgroup.conf: ${variant//|/ }" >&2
  done
  [ $ok = 1 ] || { tail -20 "$SR/log/slurmd.log" >&2; die "slurmd starts with no cgroup.conf variant tried"; }
  echo "cgroup.conf: ${variant//|/ }"
  for _ in $(seq 30); do
    sinfo -h -o %T 2>/dev/null | grep -q idle && break
    sleep 1
  done
  sinfo -o '%N %T %c %m %G'
  sinfo -h -o %T | grep -q idle || { tail -20 "$SR/log/slurmd.log" "$SR/log/slurmctld.log"; die "the node did not come up idle"; }
  echo "test job: $(srun --gpus=1 -n1 bash -c 'echo job $SLURM_JOB_ID CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES')"
}

run() {
  local run=$1; shift
  sinfo -h -o %T 2>/dev/null | grep -q -E 'idle|mix|alloc' || die "no SLURM node up: run 'bash tools/slurm_gpu_host.sh up' first"
  export ROOT
  # shellcheck source=env/_venv.sh
  source "$ROOT/env/_venv.sh"
  ensure_env pipeline env/pipeline.txt 3.12 >/dev/null
  "$PY" -m pip install -q --no-index --find-links "${SLURM_WHEELS:-$ROOT/.slurm/wheels}" "${WHEELS[@]}"
  cd "$ROOT"
  local rc=0 start
  start=$(date +%s)
  # CONFIG: further config items, e.g. CONFIG="seed=1" (words; one --config flag only, so they go in it)
  local -a extra
  read -r -a extra <<< "${CONFIG:-}"
  # the target and --config before the flags that take several values; squeue for status (no accounting)
  # the shipped profile with this node's answers (tools/site_profile.py): one partition "main" for CPU and
  # GPU jobs, GPUs without a GRES type, no accounting (so squeue for status)
  "$PY" tools/site_profile.py /tmp/sgemm-lab-site-profile --cpu-partition main --gpu-partition main --no-account \
    --untyped-gpus --status-command squeue --set slurm-init-seconds-before-status-checks=5 \
    --set slurm-keep-successful-logs=true > /dev/null
  "$PY" -m snakemake --workflow-profile /tmp/sgemm-lab-site-profile --config run="$run" "${extra[@]}" \
    "$@" || rc=$?
  echo "snakemake through SLURM: exit $rc after $(( $(date +%s) - start )) s"
  # beside the run's tables: every SLURM job of it (ids, rule, GPU request, submission, start, end) and
  # the jobs' own logs
  mkdir -p "reports/$run"
  squeue --json | "$PY" tools/slurm_jobs.py > "reports/$run/slurm_jobs.csv" || rc=1
  rm -rf "reports/$run/slurm_logs"
  [ -d .snakemake/slurm_logs ] && cp -r .snakemake/slurm_logs "reports/$run/slurm_logs"
  return $rc
}

action=${1:-}
shift || true
case "$action" in
  fetch) fetch "$@" ;;
  up) up "$@" ;;
  run) [ $# -ge 1 ] || die "usage: run RUN [snakemake args]"; run "$@" ;;
  down) stop; echo "stopped" ;;
  *) sed -n '2,12p' "$0"; exit 2 ;;
esac
