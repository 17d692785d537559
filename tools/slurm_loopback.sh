#!/usr/bin/env bash
# A real SLURM on this machine, on loopback, set up as a site runs one (two partitions, accounting with an
# enforced account), and part of the workflow run through Snakemake's SLURM executor with the shipped
# profile edited as a site admin edits it. Needs root and apt (Debian 12: slurm-wlm 22.05, slurmdbd,
# MariaDB, munge).
#   bash tools/slurm_loopback.sh [OUT_DIR]     # default OUT_DIR: reports/slurm-loopback
# 1. installs what is missing, starts MariaDB and slurmdbd (accounting_storage/slurmdbd), registers the
#    cluster, an account `lab` and root in it (AccountingStorageEnforce=associations: a job without a valid
#    account is refused), writes a one-node slurm.conf with two partitions, `cpu` (the default) and `gpu`,
#    and starts munged, slurmctld and slurmd;
# 2. writes the site's profile with tools/site_profile.py: the shipped one with the account line filled in
#    (the shipped partitions are `cpu` and `gpu`, the shipped status command is sacct), and the difference;
# 3. in a scratch copy of the checkout, runs the CPU-only `compare` target on two committed probe runs,
#    each job a SLURM job, with that profile and no resource given on the command line;
# 4. checks the outputs, and from accounting (sacct) that each job ran in partition `cpu` under account
#    `lab`; checks that SLURM refuses a job of an account that does not exist; copies the outputs, the
#    logs and the accounting rows to OUT_DIR, stops the daemons.
# The GPU steps need GPU nodes (gres); this machine has none, so they are not part of this test (the GPU
# rules' partition and GRES string are checked by tests/test_slurm_profile.py against the executor).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$ROOT/reports/slurm-loopback}
HOST=$(hostname)
ACCOUNT=lab
DBPASS=loopback-only

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null || ! command -v slurmdbd >/dev/null \
   || ! command -v mariadbd >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm slurmdbd mariadb-server munge >/dev/null
fi
mkdir -p /etc/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /run/munge /run/mysqld /var/log/slurm
chown munge:munge /run/munge
chown mysql:mysql /run/mysqld
cat > /etc/slurm/slurmdbd.conf <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DBPASS
StorageLoc=slurm_acct_db
PidFile=/run/slurmdbd.pid
LogFile=/var/log/slurm/slurmdbd.log
EOF
chmod 600 /etc/slurm/slurmdbd.conf
cat > /etc/slurm/slurm.conf <<EOF
ClusterName=loopback
SlurmctldHost=$HOST
SlurmctldAddr=127.0.0.1
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmUser=root
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageEnforce=associations
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$(( $(free -m | awk '/^Mem:/ {print $2}') * 3 / 4 )) State=UNKNOWN
PartitionName=cpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=ALL MaxTime=INFINITE State=UP
EOF

stop() {
  for pid in /run/slurmd.pid /run/slurmctld.pid /run/slurmdbd.pid; do
    [ -f "$pid" ] && kill "$(cat "$pid")" 2>/dev/null || true
  done
  pkill -x munged 2>/dev/null || true
  pkill -x mariadbd 2>/dev/null || true
}
trap stop EXIT
pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
if ! pgrep -x mariadbd >/dev/null; then
  runuser -u mysql -- /usr/sbin/mariadbd --bind-address=127.0.0.1 > /var/log/slurm/mariadb.log 2>&1 &
fi
for _ in $(seq 30); do mariadb -e "select 1" >/dev/null 2>&1 && break; sleep 1; done
mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost'; ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$DBPASS';
            GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
pgrep -x slurmdbd >/dev/null || /usr/sbin/slurmdbd
for _ in $(seq 30); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 1; done
# the cluster, the account and its user, as a site's admin registers them (again: no change)
sacctmgr -i add cluster loopback >/dev/null 2>&1 || true
sacctmgr -i add account "$ACCOUNT" Description="the lab's jobs" Organization=lab >/dev/null 2>&1 || true
sacctmgr -i add user root Account="$ACCOUNT" DefaultAccount="$ACCOUNT" >/dev/null 2>&1 || true
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
# the shipped profile with this site's answer put in (tools/site_profile.py): the account; its partitions
# (cpu, gpu) and status command (sacct) are this cluster's as shipped. The two --set items make the test
# quicker and keep the jobs' logs; they are no site's answer.
"$PY" "$ROOT/tools/site_profile.py" /tmp/sgemm-lab-site-profile --account "$ACCOUNT" \
  --set slurm-init-seconds-before-status-checks=5 --set slurm-keep-successful-logs=true > /dev/null
"$PY" "$ROOT/tools/site_profile.py" --diff /tmp/sgemm-lab-site-profile | tee profile.diff
# the target first: --config takes several values
"$PY" -m snakemake compare --workflow-profile /tmp/sgemm-lab-site-profile \
  --config "compare={\"runs\": [\"${RUNS[0]}\", \"${RUNS[1]}\"]}" 2>&1 | tee snakemake.log
echo "== $(( $(date +%s) - start )) s"

dir="reports/compare/probes_11_general-a6e82da-vs-probes_14_split_tree-e7e2deb"
test -s "$dir/compare.md" && test -s "$dir/compare.csv" && test -s "$dir/compare.png"
grep -q "## Comparing runs" "$dir/compare.md"
jobid=$(grep -oE "SLURM (run )?[Jj]ob ?[Ii][Dd]:? ?[0-9]+|jobid [0-9]+|SLURM jobid [0-9]+" snakemake.log | grep -oE "[0-9]+" | head -1)
test -n "$jobid"
echo "== outputs present; rule compare_runs ran as SLURM job $jobid"

# what accounting recorded of every job of the run: each in partition cpu, under account lab, completed
ids=$(grep -oE "SLURM jobid [0-9]+" snakemake.log | grep -oE "[0-9]+" | paste -sd, -)
sacct -X -n -P -j "$ids" --format=JobID,JobName,Partition,Account,State,AllocCPUS,ReqMem,Timelimit > sacct.txt
echo "== sacct (JobID|JobName|Partition|Account|State|AllocCPUS|ReqMem|Timelimit)"
cat sacct.txt
test -s sacct.txt
if awk -F'|' -v acct="$ACCOUNT" '$3 != "cpu" || $4 != acct || $5 != "COMPLETED" {bad = 1} END {exit bad}' sacct.txt; then
  echo "== every job in partition cpu under account $ACCOUNT, completed"
else
  echo "slurm-loopback: a job ran elsewhere, under another account, or did not complete (sacct.txt)" >&2
  exit 1
fi
# the enforcement is real: a job of an account that does not exist is refused at submission
if refused=$(sbatch -A no-such-account -p cpu --wrap true 2>&1); then
  echo "slurm-loopback: SLURM took a job of an account that does not exist ($refused)" >&2
  exit 1
fi
echo "== a job of account no-such-account: $refused" | tee refused.txt

mkdir -p "$OUT"
cp -r "$dir"/. "$OUT/"
cp snakemake.log sacct.txt refused.txt profile.diff "$OUT/"
find .snakemake/slurm_logs -name '*.log' -exec cp {} "$OUT/" \; 2>/dev/null || true
sinfo > "$OUT/sinfo.txt"
echo "slurm-loopback: ok (job $jobid); outputs and logs in $OUT"
