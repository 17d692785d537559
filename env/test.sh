#!/usr/bin/env bash
# The test suite; needs no GPU. Sets up its own environment on a fresh machine, then runs:
#   pytest (config/schema, kernel list, launch geometry, statistics, verification maths, report
#   rendering from real results, and an nvcc compile of every configured kernel for sm_90),
#   snakemake --lint, and snakemake -n for the default and .test configs.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/env/_venv.sh"
cd "$ROOT"
ensure_env test env/test.txt
echo "== snakemake --lint"
"$PY" -m snakemake --lint
echo "== snakemake -n (default config)"
"$PY" -m snakemake -n --quiet rules
echo "== snakemake -n (.test config)"
"$PY" -m snakemake -n --quiet rules --configfile .test/config/config.yaml
echo "== pytest"
"$PY" -m pytest "$@"
