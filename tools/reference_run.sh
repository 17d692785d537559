#!/usr/bin/env bash
# A reference run on the GPU host, detached so that it outlives the command that started it (a host
# that limits one command's time): `start` runs `tools/cold_run.sh RUN --cores 1` in a session of its
# own, in a copy of the checkout under /tmp; `wait SECONDS` waits for it that long at most and, once it
# has ended, puts reports/RUN and the steps' logs (packed by the run the moment it ended) and its console
# log into $OUT (or /tmp/RUN-out). Call `wait` again while it prints "still running". CONFIG="k=v ..."
# passes config items on (see tools/cold_run.sh).
#   PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/.whl bash tools/reference_run.sh h100 start
#   bash tools/reference_run.sh h100 wait 540
# A copy of the tree whose .git is not its own (a working tree synced to the GPU host) names its commit,
# SGEMM_LAB_GIT_COMMIT=<the full hash it was synced from>, worked out where the tree came from: the copy's
# own `git rev-parse HEAD` names the stale .git's commit (the record then shows the tree as changed).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
export ROOT=$PWD  # (env/_venv.sh reads it)
run=$1 action=$2 limit=${3:-540}
log="/tmp/reference-$run.log"
if [ "$action" = start ]; then
  # shellcheck source=env/_venv.sh
  source env/_venv.sh
  ensure_env pipeline env/pipeline.txt 3.12 >/dev/null
  set +e
  rm -f "$log.rc" "$log.tar.gz"
  # The run works in a copy of the checkout outside it, and packs its outputs there the moment it ends: a
  # host that copies the working tree in again before each command (as the GPU host does) would otherwise
  # overwrite reports/RUN, tracked files, with the committed ones under the running pipeline.
  work="/tmp/reference-$run.tree"
  rm -rf "$work" && mkdir -p "$work"
  tar --exclude=./.venv --exclude=./.whl --exclude=./results --exclude=./.snakemake -cf - . | tar -xf - -C "$work"
  PY=$PY CONFIG=${CONFIG:-} setsid nohup bash -c "cd '$work' && bash tools/cold_run.sh '$run' --cores 1 > '$log' 2>&1; rc=\$?; \
    tar czf '$log.tar.gz' -C '$work' 'reports/$run' 'results/$run/logs'; echo \$rc > '$log.rc'" > /dev/null 2>&1 < /dev/null &
  echo "started: tools/cold_run.sh $run --cores 1 (log $log)"
  action="wait"
fi
deadline=$(( $(date +%s) + limit ))
while [ ! -f "$log.rc" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
if [ ! -f "$log.rc" ]; then
  echo "still running after ${limit} s: $(grep -c 'Finished jobid' "$log") jobs done"
  tail -2 "$log"
  exit 3
fi
out=${OUT:-/tmp/$run-out}
mkdir -p "$out"
cp "$log" "$out/console.log"
cp "$log.tar.gz" "$out/reports-$run.tar.gz"
tail -25 "$log"
echo "cold_run exit $(cat "$log.rc")"
