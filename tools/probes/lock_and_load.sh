#!/usr/bin/env bash
# Probe on the GPU host: are timed points left to themselves?
#  (a) Two pipelines on one host: the .test configuration from this checkout (run probe-lock-a) and,
#      started while the first runs, from a copy of it in /tmp (run probe-lock-b), both with the default
#      lock folder. Every GPU lock held is logged ($SGEMM_LAB_LOCK_LOG): no hold of one pipeline may
#      overlap an exclusive hold of the other, and the second waits for the first.
#  (b) A foreign GPU load (tools/probes/gpu_load.py: spinning kernels on every SM, no lab lock) started
#      once a bench step of a re-run of the GPU bench job (--forcerun bench_gpu) has begun: the points it
#      overlaps are `disturbed` rows, the others `ok`.
# Records under reports/probes/<name>/ (and, when OUT is set, $OUT/<name>.tar.gz and <name>.summary.md);
# a summary table at the end.
#   bash tools/probes/lock_and_load.sh [name]        # name: lock_and_load-<commit> by default
# The pipeline's Python environment: .venv/pipeline when it exists, else made as env/pipeline.sh makes
# it (offline: PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/.whl bash tools/probes/lock_and_load.sh).
# Limits (seconds): LIMIT_A (part a, 240), LIMIT_B (part b, 120); LOAD_S (the load's length, 10).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
ROOT=$(pwd -P)  # (as the steps' os.getcwd() gives it: the lock log names pipelines by it)
# SGEMM_LAB_GIT_COMMIT first: a copy of the tree may carry a .git older than its files
commit=${SGEMM_LAB_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
commit=${commit:0:7}
probe=${1:-lock_and_load-$commit}
DEST=$ROOT/reports/probes/$probe
RUN_A="probe-lock-a"
RUN_B="probe-lock-b"
LIMIT_A=${LIMIT_A:-240}
LIMIT_B=${LIMIT_B:-120}
LOAD_S=${LOAD_S:-10}
rm -rf "$DEST"
mkdir -p "$DEST"
t_start=$(date +%s)

say() { echo "== $*" | tee -a "$DEST/probe.log"; }

pipeline_python() {
  if [ -x "$ROOT/.venv/pipeline/bin/python" ]; then
    echo "$ROOT/.venv/pipeline/bin/python"
    return 0
  fi
  (  # as env/pipeline.sh sets it up (pip honours PIP_NO_INDEX and PIP_FIND_LINKS)
    # shellcheck source=env/_venv.sh
    source "$ROOT/env/_venv.sh"
    ensure_env pipeline env/pipeline.txt 3.12 >&2
    "$PY" -c 'import sys; print(sys.executable)'
  )
}

PY=$(pipeline_python) || { say "no pipeline environment"; exit 1; }
say "python: $PY; commit $commit; $(date -Is)"
command -v nvidia-smi >/dev/null && nvidia-smi > "$DEST/nvidia-smi.txt" 2>&1

# The defaults are what is probed: the host's lock folder, no override.
unset SGEMM_LAB_GPU_LOCK SGEMM_LAB_LOCK_DIR
SMK=("$PY" -m snakemake --workflow-profile workflow/profiles/default --cores all
     --configfile .test/config/config.yaml)
CFG=(failure_tests=false sanitize=false)

# ------------------------------------------------------------------ (a) two checkouts, one GPU
CLONE=$(cd "$(mktemp -d /tmp/sgemm-lab-copy.XXXXXX)" && pwd -P)
trap 'rm -rf "$CLONE"' EXIT
# the working tree as it is (tracked and untracked files git does not ignore; no results, no reports)
if git rev-parse --git-dir >/dev/null 2>&1; then
  git ls-files -z -co --exclude-standard -- . ':!reports' | tar --null -T - -cf - | tar -C "$CLONE" -xf -
else
  tar --exclude=./results --exclude=./reports --exclude=./.venv --exclude=./.snakemake --exclude=./.git \
      --exclude=./.whl -cf - . | tar -C "$CLONE" -xf -
fi
full_commit=$(git rev-parse HEAD 2>/dev/null || echo "")
export SGEMM_LAB_LOCK_LOG=$DEST/locks-a.jsonl
rm -rf "results/$RUN_A" "reports/$RUN_A"
say "(a) first pipeline: $ROOT, run $RUN_A"
t0=$(date +%s)
timeout "$LIMIT_A" "${SMK[@]}" --config run="$RUN_A" "${CFG[@]}" > "$DEST/pipeline-a.log" 2>&1 &
pid_a=$!
for _ in $(seq 1 600); do  # the second starts once the first has held the GPU (its environment step)
  [ -s "$SGEMM_LAB_LOCK_LOG" ] && break
  sleep 0.1
done
say "(a) second pipeline: $CLONE, run $RUN_B, $(( $(date +%s) - t0 )) s after the first"
(cd "$CLONE" && SGEMM_LAB_GIT_COMMIT=$full_commit timeout "$LIMIT_A" "${SMK[@]}" --config run="$RUN_B" "${CFG[@]}") \
  > "$DEST/pipeline-b.log" 2>&1 &
pid_b=$!
wait "$pid_a"; rc_a=$?
wait "$pid_b"; rc_b=$?
wall_a=$(( $(date +%s) - t0 ))
say "(a) exit status: first $rc_a, second $rc_b; ${wall_a} s"
cp "reports/$RUN_A/steps.csv" "$DEST/steps-a.csv" 2>/dev/null
cp "$CLONE/reports/$RUN_B/steps.csv" "$DEST/steps-b.csv" 2>/dev/null
grep -rh "waited .* for the GPU" "results/$RUN_A/logs" > "$DEST/waits-a.txt" 2>/dev/null
grep -rh "waited .* for the GPU" "$CLONE/results/$RUN_B/logs" > "$DEST/waits-b.txt" 2>/dev/null
ls -la /tmp/sgemm-lab-locks > "$DEST/lock-folder.txt" 2>&1
"$PY" tools/probes/lock_and_load.py turns "$SGEMM_LAB_LOCK_LOG" "$ROOT" "$CLONE" > "$DEST/turns.md"
rc_turns=$?

# ------------------------------------------------------------------ (b) a foreign load during bench
export SGEMM_LAB_LOCK_LOG=$DEST/locks-b.jsonl
marker=$DEST/.bench-start
touch "$marker"
say "(b) bench steps of $RUN_A again, a ${LOAD_S} s foreign load once the first has begun"
t0=$(date +%s)
# (the GPU stages' bench job, every stage timed again: a forced batch job alone copies kept results back)
timeout "$LIMIT_B" "${SMK[@]}" --config run="$RUN_A" "${CFG[@]}" reuse=false --forcerun bench_gpu \
  > "$DEST/pipeline-load.log" 2>&1 &
pid_p=$!
for _ in $(seq 1 600); do
  if [ -n "$(find "results/$RUN_A/logs/bench" -name '*.log' -newer "$marker" 2>/dev/null)" ]; then break; fi
  sleep 0.1
done
"$PY" tools/probes/gpu_load.py --seconds "$LOAD_S" --out "$DEST/load.json" > "$DEST/load.log" 2>&1 &
pid_l=$!
wait "$pid_p"; rc_p=$?
wait "$pid_l"; rc_l=$?
rm -f "$marker"
say "(b) exit status: pipeline $rc_p, load $rc_l; $(( $(date +%s) - t0 )) s"
mkdir -p "$DEST/bench" "$DEST/status"
cp "results/$RUN_A"/bench/*.csv "$DEST/bench/" 2>/dev/null
cp "results/$RUN_A"/status/bench/*.json "$DEST/status/" 2>/dev/null
grep -h "DISTURBED\|disturbed" "results/$RUN_A"/logs/bench/*.log > "$DEST/disturbed-lines.txt" 2>/dev/null
if [ -s "$DEST/load.json" ]; then
  "$PY" tools/probes/lock_and_load.py load "results/$RUN_A" "$DEST/load.json" > "$DEST/load.md"
  rc_load=$?
else
  echo "no load record (see load.log)" > "$DEST/load.md"
  rc_load=1
fi

# ------------------------------------------------------------------------------------- summary
verdict() { [ "$1" = 0 ] && echo "as expected" || echo "NOT as expected (exit $1)"; }
{
  echo "| part | what | result |"
  echo "|---|---|---|"
  echo "| a | pipelines: this checkout / the copy in /tmp | exit $rc_a / $rc_b, ${wall_a} s |"
  echo "| a | $(grep -m1 '^overlapping holds' "$DEST/turns.md") | $(verdict "$rc_turns") |"
  echo "| a | $(grep -m1 '^second pipeline' "$DEST/turns.md") | |"
  echo "| a | lock files used | $(grep -o '/[^ |,]*\.lock' "$DEST/turns.md" | sort -u | tr '\n' ' ') |"
  echo "| b | $(grep -m1 '^foreign load' "$DEST/load.md") | exit $rc_l |"
  echo "| b | $(grep -m1 '^bench rows' "$DEST/load.md") | $(verdict "$rc_load") |"
  "$PY" tools/probes/lock_and_load.py steps "$DEST/status"
  echo "| | whole probe | $(( $(date +%s) - t_start )) s |"
} > "$DEST/summary.md"
tee -a "$DEST/probe.log" < "$DEST/summary.md"
if [ -n "${OUT:-}" ]; then  # one archive of the records, and the summary beside it
  mkdir -p "$OUT"
  tar -czf "$OUT/$probe.tar.gz" -C "$(dirname "$DEST")" "$probe"
  cp "$DEST/summary.md" "$OUT/$probe.summary.md"
fi
echo "records: $DEST"
