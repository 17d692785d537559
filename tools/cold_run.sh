#!/usr/bin/env bash
# The pipeline as a new user runs it: results of RUN removed, PyCUDA's compile cache emptied, then
# Snakemake with the given arguments; prints the wall time, the exit status and where the time went
# (per rule, from reports/RUN/steps.csv).
#   bash tools/cold_run.sh serial --cores 1        # = snakemake --cores 1 --config run=serial
#   bash tools/cold_run.sh h100 --cores 1          # the reference run
#   CONFIG="seed=1" bash tools/cold_run.sh local-seed1 --cores 1   # more config items (one --config only:
#                                                  # a second one would replace the first)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
run=$1
shift
PY=${PY:-python3}
read -r -a extra <<< "${CONFIG:-}"  # CONFIG's items: words (key=value, no space inside one), never globbed
for item in "${extra[@]}"; do
  case $item in run=*) echo "cold_run.sh: CONFIG may not set run (it is the first argument): $item" >&2; exit 2 ;; esac
done
rm -rf "results/$run" "reports/$run" "${XDG_CACHE_HOME:-$HOME/.cache}/pycuda"
start=$(date +%s%N)
"$PY" -m snakemake "$@" --config run="$run" "${extra[@]}"
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
"$PY" tools/step_times.py "reports/$run/steps.csv"
echo "snakemake $* --config run=$run${CONFIG:+ $CONFIG}: exit $rc, wall $((ms / 1000)).$((ms % 1000 / 100)) s from a cold compile cache"
