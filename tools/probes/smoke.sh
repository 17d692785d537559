#!/usr/bin/env bash
# The .test configuration on the GPU host from a cold cache, then the full configuration's checks of a
# few implementations (their time, for the reference run's budget); short tables of the check rows
# (class limits, cuBLAS's error on the same inputs) and bench rows (status, disturbance) last.
#   PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/.whl bash tools/probes/smoke.sh [implementation ...]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
source env/_venv.sh
ensure_env pipeline env/pipeline.txt 3.12 >/dev/null
set +e  # (env/_venv.sh sets -e): report each part's exit status and go on
out=${OUT:-/tmp/smoke-out}
mkdir -p "$out"
rm -rf results/smoke reports/smoke results/est
start=$(date +%s)
"$PY" -m snakemake --cores 4 --configfile .test/config/config.yaml --config run=smoke > "$out/smoke.log" 2>&1
echo "smoke: exit $?, $(( $(date +%s) - start )) s"
tail -3 "$out/smoke.log"
start=$(date +%s)
targets=()
for impl in "${@:-cublas_tf32 01_naive 00_hostmult1 16_3xtf32 18_wgmma_3xtf32}"; do
  for i in $impl; do targets+=("results/est/check/$i.json"); done
done
"$PY" -m snakemake --cores 1 "${targets[@]}" --config run=est > "$out/est.log" 2>&1
echo "full-config checks of ${#targets[@]} implementations: exit $?, $(( $(date +%s) - start )) s"
tar czf "$out/smoke-reports.tar.gz" reports/smoke results/smoke/logs results/est/check results/est/logs 2>/dev/null
"$PY" - <<'PYEOF' | tee "$out/tables.txt"
import glob, json
import pandas as pd
pd.set_option("display.width", 250)
b = pd.read_csv("reports/smoke/bench.csv")
print(b[[c for c in ["kernel", "m", "n", "k", "status", "tflops", "disturbance", "seed"] if c in b]].to_string())
c = pd.read_csv("reports/smoke/check.csv")
print(c[c["mode"] == "beta"][[x for x in ["kernel", "m", "n", "k", "distribution", "status", "rel_err", "cublas_rel_err",
                                          "fp32_limit", "fp32_basis", "seed"] if x in c]].to_string())
for f in sorted(glob.glob("results/est/check/*.json")):
    for p in json.load(open(f))["points"]:
        if p["status"] != "skipped" and p.get("mode") == "beta":
            print(f"{p['kernel']:16s} {p['m']}x{p['n']}x{p['k']:<6} {p.get('distribution', '?'):10s} {p['status']:5s} "
                  f"err {p['rel_err']:.2e} cuBLAS {p.get('cublas_rel_err', float('nan')):.2e} "
                  f"limit {p.get('fp32_limit', float('nan')):.2e} {p.get('fp32_basis')}")
PYEOF
grep -h "finished\|seconds" results/est/logs/check/*.log 2>/dev/null | tail -5
