#!/usr/bin/env bash
# Which Nsight Compute metrics this GPU's ncu offers for a hierarchical roofline (L1/shared, L2, DRAM
# bytes and their peaks), and their values for a few stages, from a run's own profile plan:
#   bash tools/ncu_probe.sh RESULTS_DIR OUT_DIR [IMPL ...]
# RESULTS_DIR is a finished run's results/<run> (its profile/ladder.plan.json and .config.pickle);
# run from the checkout that made it. Writes to OUT_DIR: ncu's version, every metric of the chip
# (query mode all), ncu's own section files (tar), and values.csv (ncu's raw page, base units) for the
# listed implementations at the plan's shapes. Candidates the chip lacks are left out and listed.
set -uo pipefail
res=${1:?results dir}
out=${2:?out dir}
shift 2
impls=("$@")
[ ${#impls[@]} -gt 0 ] || impls=(03_smem_caching 08_warptiling 15_mma_tf32 17_wgmma_tf32 18_wgmma_3xtf32 cublas)
PY=${PY:-.venv/pipeline/bin/python}
mkdir -p "$out"
ncu=$(command -v ncu) || { echo "ncu_probe: no ncu on PATH" >&2; exit 1; }
"$ncu" --version > "$out/version.txt" 2>&1
chip=$("$ncu" --list-chips 2>/dev/null | tr ', ' '\n\n' | grep -x 'gh100' | head -1)
"$ncu" --query-metrics --chip "${chip:-gh100}" --query-metrics-mode all > "$out/metrics-all.txt" 2>&1
sections=$(dirname "$(readlink -f "$ncu")")/sections
[ -d "$sections" ] || sections=$(find "$(dirname "$(readlink -f "$ncu")")/.." -maxdepth 3 -type d -name sections | head -1)
[ -n "$sections" ] && tar czf "$out/sections.tar.gz" -C "$(dirname "$sections")" "$(basename "$sections")"

candidates=(
  lts__t_bytes.sum lts__t_bytes.sum.peak_sustained lts__t_bytes.sum.per_second lts__cycles_elapsed.avg.per_second
  l1tex__t_bytes.sum l1tex__t_bytes.sum.peak_sustained l1tex__t_bytes.sum.per_second
  l1tex__cycles_elapsed.avg.per_second
  l1tex__data_pipe_lsu_wavefronts_mem_shared.sum l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.peak_sustained
  l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed
  sm__sass_data_bytes_mem_shared.sum sm__sass_data_bytes_mem_shared.sum.peak_sustained
  sm__sass_data_bytes_mem_shared.sum.per_second sm__sass_data_bytes_mem_shared_op_ld.sum
  smsp__sass_data_bytes_mem_shared.sum
  l1tex__lsu_writeback_active_mem_lg.sum.peak_sustained l1tex__lsu_writeback_active_mem_lg.sum.per_second
  dram__bytes.sum dram__bytes.sum.peak_sustained dram__cycles_elapsed.avg.per_second
  sm__cycles_elapsed.avg.per_second gpu__time_duration.sum
  smsp__sass_thread_inst_executed_op_ffma_pred_on.sum
  sm__inst_executed_pipe_tensor.sum sm__inst_executed_pipe_tensor.sum.peak_sustained
)
keep=() missing=()
for m in "${candidates[@]}"; do
  base=${m%%.*}
  if grep -qw -- "$base" "$out/metrics-all.txt"; then keep+=("$m"); else missing+=("$m"); fi
done
printf '%s\n' "${missing[@]}" > "$out/missing.txt"
# the plan cut to the implementations asked for
"$PY" - "$res/profile/ladder.plan.json" "$out/plan.json" "${impls[@]}" <<'EOF'
import json, sys
plan = json.load(open(sys.argv[1]))
want = set(sys.argv[3:])
json.dump([p for p in plan if p["impl"] in want], open(sys.argv[2], "w"), indent=1)
EOF
n=$("$PY" -c "import json,sys; print(sum(len(p['shapes']) for p in json.load(open(sys.argv[1]))))" "$out/plan.json")
regex=$("$PY" - "$out/plan.json" "$res/profile/ladder.config.pickle" <<'EOF'
import json, sys
from pathlib import Path
from sgemm_lab.config import handoff
from sgemm_lab.dispatch.resolve import load_spec
from sgemm_lab.profiling.ncu import ProfileItem, kernel_regex
cfg = handoff.read(Path(sys.argv[2]))
items = []
for p in json.load(open(sys.argv[1])):
    spec = load_spec(cfg, p["impl"], Path(p["record"]) if p.get("record") else None)
    items.append(ProfileItem(impl=p["impl"], entry=None if spec is None else spec.entry, shapes=()))
print(kernel_regex(items))
EOF
)
echo "probe: ${#keep[@]} metrics kept, ${#missing[@]} missing; $n launches; kernels $regex"
"$ncu" --clock-control none --kernel-name-base demangled --kernel-name "$regex" --launch-count "$n" \
  --metrics "$(IFS=,; echo "${keep[*]}")" --csv --page raw --print-units base --log-file "$out/values.csv" \
  "$PY" -m sgemm_lab.profiling.target --config "$res/profile/ladder.config.pickle" --plan "$out/plan.json" \
  > "$out/target.log" 2>&1
echo "ncu exit $?"
"$PY" - "$out/values.csv" <<'EOF'
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if not l.startswith("=="))]
if len(rows) < 3:
    print("no rows"); sys.exit()
head, units, data = rows[0], rows[1], rows[2:]
for i, h in enumerate(head):
    if "__" in h:
        print(f"{h:70s} {units[i]:10s} " + " ".join(f"{r[i][:12]:>12s}" for r in data))
    elif h == "Kernel Name":
        print(f"{h:70s} {'':10s} " + " ".join(f"{r[i][:12]:>12s}" for r in data))
EOF
