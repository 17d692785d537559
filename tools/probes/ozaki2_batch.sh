#!/usr/bin/env bash
# GPU calls for stage 22's measurements, in steps (STEPS, default all): "nvml": which cuda-bindings the
# pipeline's environment has and the watch's selftest against a real foreign load with NVML's versioned
# per-process utilisation call; "roof": the INT8 tensor roof (int8_roof.py); "ozaki": stage 22's kernels
# by hand (ozaki2.py: accuracy and time per part); "ncu": Nsight Compute on one chain of them at 8192^3.
#   PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/.whl STEPS="ozaki ncu" bash tools/probes/ozaki2_batch.sh [CUDA_BINDINGS_WHEEL_DIR]
# With a wheel folder, cuda-bindings is installed from it when the environment's lacks the NVML call.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
source env/_venv.sh
ensure_env pipeline env/pipeline.txt 3.12 >/dev/null
set +e
out=${OUT:-/tmp/ozaki2-out}
steps=" ${STEPS:-nvml roof ozaki ncu} "
mkdir -p "$out"
has_call() {
  "$PY" -c "import cuda.bindings, sys; from cuda.bindings import nvml
print('cuda-bindings', cuda.bindings.__version__, 'versioned utilisation call:', hasattr(nvml, 'device_get_processes_utilization_info'))
sys.exit(not hasattr(nvml, 'device_get_processes_utilization_info'))"
}
if [[ $steps == *" nvml "* ]]; then
  if ! has_call && [ -n "${1:-}" ]; then
    "$PY" -m pip install -q --no-deps --no-index "$1"/cuda_bindings-*.whl "$1"/cuda_pathfinder-*.whl && has_call
  fi
  start=$(date +%s)
  "$PY" tools/probes/nvml_watch.py --selftest > "$out/nvml_selftest.log" 2>&1
  echo "nvml selftest: exit $?, $(( $(date +%s) - start )) s"; tail -4 "$out/nvml_selftest.log"
fi
if [[ $steps == *" roof "* ]]; then
  "$PY" tools/probes/int8_roof.py --out "$out/int8_roof.json" 2>&1 | tail -3
fi
if [[ $steps == *" ncu "* ]]; then
  start=$(date +%s)
  timeout 300 ncu -k regex:ozaki -c 6 --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
    --metrics sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,dram__bytes.sum --csv --page details \
    "$PY" tools/probes/ozaki2.py --check-shapes --bench-shapes 8192x8192x8192 --out "$out/ncu_run.json" \
    > "$out/ncu_8192.csv" 2> "$out/ncu.log"
  echo "ncu: exit $?, $(( $(date +%s) - start )) s"
  "$PY" - "$out/ncu_8192.csv" <<'PY'
import sys
import pandas as pd
t = pd.read_csv(sys.argv[1], skiprows=lambda i: False, on_bad_lines="skip")
want = ["Duration", "Compute (SM) Throughput", "Memory Throughput", "DRAM Throughput", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
        "dram__bytes.sum", "Registers Per Thread", "Achieved Occupancy", "Executed Ipc Active"]
t = t[t["Metric Name"].isin(want)]
print(t.pivot_table(index="Kernel Name", columns="Metric Name", values="Metric Value", aggfunc="first").to_string())
PY
fi
if [[ $steps == *" ozaki "* ]]; then
  start=$(date +%s)
  timeout 400 "$PY" tools/probes/ozaki2.py --out "$out/ozaki2.json" > "$out/ozaki2.log" 2>&1
  echo "ozaki2: exit $?, $(( $(date +%s) - start )) s"
  tail -70 "$out/ozaki2.log"
fi
