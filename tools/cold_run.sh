#!/usr/bin/env bash
# The pipeline as a new user runs it: results of RUN removed, PyCUDA's compile cache emptied, then
# Snakemake with the given arguments; prints the wall time, the exit status and where the time went
# (per rule, from reports/RUN/steps.csv).
#   bash tools/cold_run.sh serial --cores 1        # = snakemake --cores 1 --config run=serial
#   bash tools/cold_run.sh h100 --cores 1          # the reference run
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
run=$1
shift
PY=${PY:-python3}
rm -rf "results/$run" "reports/$run" "${XDG_CACHE_HOME:-$HOME/.cache}/pycuda"
start=$(date +%s%N)
"$PY" -m snakemake "$@" --config run="$run"
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
"$PY" tools/step_times.py "reports/$run/steps.csv"
echo "snakemake $* --config run=$run: exit $rc, wall $((ms / 1000)).$((ms % 1000 / 100)) s from a cold compile cache"
