#!/usr/bin/env bash
# The .test configuration on the GPU host from a cold cache, then a short table of its check rows
# (class limits and cuBLAS's error on the same inputs) and bench rows (status, disturbance).
#   PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/.whl bash tools/probes/smoke.sh
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
source env/_venv.sh
ensure_env pipeline env/pipeline.txt >/dev/null
PY=${PY:-python}
rm -rf results/smoke reports/smoke
start=$(date +%s)
"$PY" -m snakemake --cores 4 --configfile .test/config/config.yaml --config run=smoke 2>&1 | tail -25
echo "exit ${PIPESTATUS[0]}, $(( $(date +%s) - start )) s"
"$PY" - <<'PYEOF'
import pandas as pd
pd.set_option("display.width", 250)
c = pd.read_csv("reports/smoke/check.csv")
cols = [x for x in ["kernel", "m", "n", "k", "distribution", "mode", "status", "rel_err", "cublas_rel_err", "fp32_limit", "fp32_basis", "seed"] if x in c]
print(c[cols].to_string(max_rows=80))
b = pd.read_csv("reports/smoke/bench.csv")
cols = [x for x in ["kernel", "m", "n", "k", "status", "tflops", "disturbance", "seed"] if x in b]
print(b[cols].to_string(max_rows=60))
PYEOF
cp -r reports/smoke "${OUT:-/tmp}/" 2>/dev/null || true
