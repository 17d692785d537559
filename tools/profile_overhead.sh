#!/usr/bin/env bash
# Where the fixed cost of one Nsight Compute job goes, on one built stage (default 08_warptiling):
# the profiled process alone, ncu around a bare CUDA start, and ncu with all or one metric, two or one shape.
#   bash tools/profile_overhead.sh [kernel]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
k=${1:-08_warptiling}
run=overhead
PY=${PY:-python3}
"$PY" -m snakemake --cores 8 "results/$run/build/$k.json" --config run=$run >/dev/null 2>&1 || { echo "build of $k failed"; exit 1; }
export PYTHONPATH=$PWD/src
cfg=results/$run/overhead.config.pickle  # the run's configuration as the profile step hands it to its target
"$PY" -c "import sys, yaml; from sgemm_lab.config import handoff, load; handoff.write(load.from_dict(yaml.safe_load(open('config/config.yaml'))), sys.argv[1])" "$cfg" || exit 1
args=(--config "$cfg" --impl "$k" --binary "results/$run/build/$k.bin" --record "results/$run/build/$k.json")
metrics=$("$PY" -c "from sgemm_lab.profiling.ncu import METRICS; print(','.join(METRICS))")
t() { local name=$1 s rc; shift; s=$(date +%s%N); "$@" >/dev/null 2>&1; rc=$?; echo "$name: $(( ($(date +%s%N) - s) / 1000000 )) ms (exit $rc)"; }
for _ in 1 2; do
  t "python -c pass" "$PY" -c pass
  t "target alone, 2 shapes" "$PY" -m sgemm_lab.profiling.target "${args[@]}" --shapes 1024x1024x1024 4096x4096x4096
  t "target alone, 1 shape" "$PY" -m sgemm_lab.profiling.target "${args[@]}" --shapes 4096x4096x4096
  t "ncu, cuInit + context only" ncu "$PY" -c "import pycuda.driver as c; c.init(); import pycuda.autoprimaryctx"
  t "ncu, all metrics, 2 shapes" ncu --clock-control none --kernel-name-base function --kernel-name "regex:^sgemm" --launch-count 2 --metrics "$metrics" -f -o /tmp/o1 "$PY" -m sgemm_lab.profiling.target "${args[@]}" --shapes 1024x1024x1024 4096x4096x4096
  t "ncu, all metrics, 1 shape" ncu --clock-control none --kernel-name-base function --kernel-name "regex:^sgemm" --launch-count 1 --metrics "$metrics" -f -o /tmp/o2 "$PY" -m sgemm_lab.profiling.target "${args[@]}" --shapes 4096x4096x4096
  t "ncu, one metric, 1 shape" ncu --clock-control none --kernel-name-base function --kernel-name "regex:^sgemm" --launch-count 1 --metrics gpu__time_duration.sum -f -o /tmp/o3 "$PY" -m sgemm_lab.profiling.target "${args[@]}" --shapes 4096x4096x4096
  t "ncu, all metrics, 1 shape, no spin" ncu --clock-control none --kernel-name-base function --kernel-name "regex:^sgemm" --launch-count 1 --metrics "$metrics" -f -o /tmp/o4 "$PY" -m sgemm_lab.profiling.target "${args[@]}" --shapes 4096x4096x4096 --no-warmup
done
