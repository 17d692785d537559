#!/usr/bin/env bash
# The user paths, run as a user runs them, on a GPU host from a fresh copy of the checkout; one row each
# (tools/acceptance.py: command, exit status, wall time, step records ok / not ok, steps run / stages
# reused, disturbed points) in reports/acceptance/<commit>/acceptance.csv, with acceptance.md beside it:
#   parallel   bash env/pipeline.sh                                   (all cores, run "local", cold)
#   serial     snakemake --cores 1 --config run=$REF                  (cold: the reference run)
#   forcerun   snakemake --cores 1 --forcerun bench_gpu --config run=$REF remeasure=$EDIT_STAGE: that
#              stage's bench again, the other stages' kept
#   edit       a comment line appended to EDIT_STAGE's source, then snakemake --cores 1 --config run=$REF:
#              that stage rebuilt, checked and timed, every other stage's results kept (the source is put
#              back afterwards with its old time stamp, so that the paths after it find the run complete)
#   report     snakemake --report reports/$REF/report.html --config run=$REF
#   rerender   snakemake --cores 1 rerender --config rerender=$REF    (the report drawn again, CPU only)
#   slurm      the .test configuration through SLURM on this host (tools/slurm_gpu_host.sh), when the
#              folder of its .debs (.slurm, `bash tools/slurm_gpu_host.sh fetch`) is there
# Every GPU lock a path's steps held is logged ($dest/NAME-locks.jsonl, drawn by tools/gpu_timeline.py
# as NAME-gpu.md: when each step held the GPU, and the gaps in which none did).
# "Cold": the run's results and PyCUDA's compile cache removed first. The pipeline's environment is set
# up once before the first path (its minutes are not a path's). The reference's reports/$REF is packed
# as the serial path left it, before the edit path changes it.
# Detached, like tools/reference_run.sh, so that a host that limits one command's time can wait on it:
#   PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/.whl bash tools/acceptance.sh start
#   bash tools/acceptance.sh wait 540        # again while it prints "still running"
# Settings: REF (the GPU's model: h100, h200), EDIT_STAGE (19_narrow), PATHS (all of the above, in that order),
# SGEMM_LAB_GIT_COMMIT (the commit named; else git's HEAD).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
export ROOT=$PWD
action=${1:-start}
limit=${2:-540}
log=/tmp/acceptance.log

if [ "$action" = start ]; then
  # (in a subshell: ensure_env exits on failure, and _venv.sh turns on errexit)
  # shellcheck disable=SC1091
  if ! PY=$(source env/_venv.sh && ensure_env pipeline env/pipeline.txt 3.12 > /tmp/acceptance-setup.log 2>&1 \
            && "$PY" -c 'import sys; print(sys.executable)'); then
    cat /tmp/acceptance-setup.log
    echo "acceptance.sh: setting up the pipeline's environment failed (above)" >&2
    exit 1
  fi
  commit=${SGEMM_LAB_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
  work=/tmp/acceptance.tree
  rm -rf "$work" "$log" "$log.rc" "$log.tar.gz" && mkdir -p "$work"
  tar --exclude=./.venv --exclude=./results --exclude=./.snakemake -cf - . | tar -xf - -C "$work"
  ln -s "$ROOT/.venv" "$work/.venv"  # the environment set up above (env/pipeline.sh finds it there)
  SGEMM_LAB_GIT_COMMIT=$commit PY=$PY setsid nohup bash -c "cd '$work' && bash tools/acceptance.sh paths > '$log' 2>&1; \
    echo \$? > '$log.rc'" > /dev/null 2>&1 < /dev/null &
  echo "started in $work (log $log), commit $commit"
  action="wait"
fi

if [ "$action" = wait ]; then
  deadline=$(( $(date +%s) + limit ))
  while [ ! -f "$log.rc" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
  if [ ! -f "$log.rc" ]; then
    echo "still running after ${limit} s"
    grep '^== ' "$log" | tail -3
    exit 3
  fi
  out=${OUT:-/tmp/acceptance-out}
  mkdir -p "$out"
  cp "$log" "$out/console.log"
  cp "$log.tar.gz" "$out/acceptance.tar.gz" 2>/dev/null
  cat /tmp/acceptance.tree/reports/acceptance/*/acceptance.md 2>/dev/null
  echo "acceptance exit $(cat "$log.rc")"
  exit 0
fi

[ "$action" = paths ] || { echo "usage: bash tools/acceptance.sh start|wait [SECONDS]" >&2; exit 2; }
# ------------------------------------------------------------------------------ the paths (detached)
PY=${PY:-.venv/pipeline/bin/python}
# the reference's run is named by the GPU's model (h100, h200), as reports/<run> names the lab's references
REF=${REF:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -o 'H[0-9][0-9][0-9]' \
  | tr '[:upper:]' '[:lower:]')}
REF=${REF:-reference}
EDIT_STAGE=${EDIT_STAGE:-19_narrow}
PATHS=${PATHS:-parallel serial forcerun edit report rerender slurm}
commit=${SGEMM_LAB_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
export SGEMM_LAB_GIT_COMMIT=$commit
dest=reports/acceptance/${commit:0:7}
rm -rf "$dest" && mkdir -p "$dest"
csv=$dest/acceptance.csv
cold() { rm -rf "results/$1" "reports/$1" "${XDG_CACHE_HOME:-$HOME/.cache}/pycuda"; }

# path NAME RUN EXPECT -- COMMAND...: run COMMAND (its output in $dest/NAME.log), then its row
path() {
  local name=$1 run=$2 expect=$3
  shift 4
  echo "== $name: $* ($(date -Is))"
  local t0 t1
  t0=$(date +%s%N)
  SGEMM_LAB_LOCK_LOG="$PWD/$dest/$name-locks.jsonl" "$@" > "$dest/$name.log" 2>&1
  local rc=$?
  t1=$(date +%s%N)
  tail -3 "$dest/$name.log"
  # who held the GPU when (tools/gpu_timeline.py), for the paths that used it
  [ -s "$dest/$name-locks.jsonl" ] && "$PY" tools/gpu_timeline.py "$dest/$name-locks.jsonl" > "$dest/$name-gpu.md" 2>&1
  "$PY" tools/acceptance.py row --csv "$csv" --path "$name" --command "$*" --rc "$rc" \
    --wall-ns "$((t1 - t0))" --started-ns "$t0" --run "$run" --expect-rerun "$expect"
}

for p in $PATHS; do
  case $p in
    parallel)
      cold local
      path parallel local "" -- bash env/pipeline.sh ;;
    serial)
      cold "$REF"
      path serial "$REF" "" -- "$PY" -m snakemake --cores 1 --config run="$REF"
      tar czf "$dest/reference-$REF.tar.gz" "reports/$REF" "results/$REF/logs" ;;
    edit)
      source=$("$PY" -c "import sys; sys.path.insert(0, 'src'); import yaml; from sgemm_lab.config import load; \
print(load.from_dict(yaml.safe_load(open('config/config.yaml'))).kernel('$EDIT_STAGE').source)")
      cp -p "kernels/$source" "/tmp/acceptance-$source"
      echo "// an edit: the acceptance run's rerun of one stage" >> "kernels/$source"
      path edit "$REF" "$EDIT_STAGE" -- "$PY" -m snakemake --cores 1 --config run="$REF"
      cp -p "/tmp/acceptance-$source" "kernels/$source" ;;
    forcerun)
      path forcerun "$REF" "bench:$EDIT_STAGE" -- "$PY" -m snakemake --cores 1 --forcerun bench_gpu \
        --config run="$REF" remeasure="$EDIT_STAGE" ;;
    report)
      path report "" "" -- "$PY" -m snakemake --report "reports/$REF/report.html" --config run="$REF" ;;
    rerender)
      path rerender "" "" -- "$PY" -m snakemake --cores 1 rerender --config rerender="$REF" ;;
    slurm)
      if [ -d .slurm/debs ]; then
        bash tools/slurm_gpu_host.sh up > "$dest/slurm-up.log" 2>&1
        CONFIG="seed=1" path slurm acc-slurm "" -- bash tools/slurm_gpu_host.sh run acc-slurm \
          --configfile .test/config/config.yaml
        bash tools/slurm_gpu_host.sh down > /dev/null 2>&1
      else
        echo "== slurm: skipped (no .slurm/debs: bash tools/slurm_gpu_host.sh fetch, then carry .slurm)"
      fi ;;
    *) echo "unknown path $p" >&2 ;;
  esac
done
"$PY" tools/acceptance.py md "$csv" > "$dest/acceptance.md"
cat "$dest/acceptance.md"
# the parallel path's own files where it ran; each path's outcome is its row, and a file a path did not
# write is no failure of the packing
extra=()
for f in reports/local/steps.csv reports/local/run.json reports/local/report.md; do
  [ -f "$f" ] && extra+=("$f")
done
tar czf "$log.tar.gz" "$dest" ${extra[@]+"${extra[@]}"}
exit 0
