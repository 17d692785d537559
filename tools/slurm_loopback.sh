#!/usr/bin/env bash
# A real SLURM on this machine, on loopback, and part of the workflow run through Snakemake's SLURM
# executor with workflow/profiles/slurm. Needs root and apt (Debian 12: slurm-wlm 22.05, munge).
#   bash tools/slurm_loopback.sh [OUT_DIR]     # default OUT_DIR: reports/slurm-loopback
# 1. installs slurm-wlm and munge if missing, writes a one-node /etc/slurm/slurm.conf (this host,
#    127.0.0.1, every core, partition "main", no accounting), starts munged, slurmctld and slurmd;
# 2. in a scratch copy of the checkout, runs the CPU-only `compare` target on two committed H100 probe
#    runs, each job a SLURM job (`--workflow-profile workflow/profiles/slurm` plus the loopback overrides:
#    partition main, no account, squeue for status since sacct needs accounting);
# 3. checks the outputs and that SLURM ran the job (its job id in Snakemake's log and its own log file),
#    copies the outputs and the logs to OUT_DIR, stops the daemons.
# The GPU steps need GPU nodes (gres); this machine has none, so they are not part of this test.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$ROOT/reports/slurm-loopback}
HOST=$(hostname)

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi
mkdir -p /etc/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /run/munge
chown munge:munge /run/munge
cat > /etc/slurm/slurm.conf <<EOF
ClusterName=loopback
SlurmctldHost=$HOST
SlurmctldAddr=127.0.0.1
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmUser=root
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=4000 State=UNKNOWN
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF

stop() {
  for pid in /run/slurmd.pid /run/slurmctld.pid; do
    [ -f "$pid" ] && kill "$(cat "$pid")" 2>/dev/null || true
  done
  pkill -x munged 2>/dev/null || true
}
trap stop EXIT
pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld
pgrep -x slurmd >/dev/null || /usr/sbin/slurmd
for _ in $(seq 30); do
  sinfo -h -o %T 2>/dev/null | grep -q idle && break
  sleep 1
done
echo "== sinfo"
sinfo

source "$ROOT/env/_venv.sh"
cd "$ROOT"
ensure_env slurm env/slurm.txt

WORK=$(mktemp -d)
for item in Snakefile workflow config kernels src env; do cp -r "$ROOT/$item" "$WORK/"; done
RUNS=(probes/11_general-a6e82da probes/14_split_tree-e7e2deb)
for run in "${RUNS[@]}"; do
  mkdir -p "$WORK/reports/$run"
  cp "$ROOT/reports/$run/bench.csv" "$WORK/reports/$run/"
done
cd "$WORK"
echo "== snakemake compare through the SLURM executor"
start=$(date +%s)
# the shipped profile with this machine's answers (tools/site_profile.py): partition "main", no accounting
"$PY" "$ROOT/tools/site_profile.py" /tmp/sgemm-lab-site-profile --cpu-partition main --gpu-partition main --no-account \
  --status-command squeue --set slurm-init-seconds-before-status-checks=5 --set slurm-keep-successful-logs=true
# the target first: --default-resources and --config take several values
"$PY" -m snakemake compare --workflow-profile /tmp/sgemm-lab-site-profile --jobs 2 \
  --config "compare={\"runs\": [\"${RUNS[0]}\", \"${RUNS[1]}\"]}" \
  --default-resources slurm_partition=main runtime=10 mem_mb=1000 cpus_per_task=1 2>&1 | tee snakemake.log
echo "== $(( $(date +%s) - start )) s"

dir="reports/compare/probes_11_general-a6e82da-vs-probes_14_split_tree-e7e2deb"
test -s "$dir/compare.md" && test -s "$dir/compare.csv" && test -s "$dir/compare.png"
grep -q "## Comparing runs" "$dir/compare.md"
jobid=$(grep -oE "SLURM (run )?[Jj]ob ?[Ii][Dd]:? ?[0-9]+|jobid [0-9]+|SLURM jobid [0-9]+" snakemake.log | grep -oE "[0-9]+" | head -1)
test -n "$jobid"
echo "== outputs present; rule compare_runs ran as SLURM job $jobid"

mkdir -p "$OUT"
cp -r "$dir"/. "$OUT/"
cp snakemake.log "$OUT/snakemake.log"
find .snakemake/slurm_logs -name '*.log' -exec cp {} "$OUT/" \; 2>/dev/null || true
sinfo > "$OUT/sinfo.txt"
echo "slurm-loopback: ok (job $jobid); outputs and logs in $OUT"
