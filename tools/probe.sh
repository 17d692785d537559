#!/usr/bin/env bash
# A probe: the pipeline on a probe configuration (tools/probes/*.yaml: a few stages or variants on the
# check shapes and the suite), then the ratio of each to cuBLAS per shape (tools/bench_table.py).
#   bash tools/probe.sh tools/probes/11_general.yaml [KEY=VALUE config items, e.g. failure_tests=false]
# Exits with Snakemake's status.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
cfg=$1
shift
PY=${PY:-python3}
run=$("$PY" -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['run'])" "$cfg")
start=$(date +%s)
"$PY" -m snakemake --cores all --config strict=false "$@" --configfile "$cfg"
rc=$?
echo "probe $cfg: exit $rc, $(( $(date +%s) - start )) s; results/$run, reports/$run"
"$PY" tools/bench_table.py "reports/$run/bench.csv"
exit "$rc"  # the pipeline's status: a failed step fails the probe, after what it did measure is shown
