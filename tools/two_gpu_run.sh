#!/usr/bin/env bash
# The pipeline on one GPU and then on two GPUs of the same host, each from a cold compile cache, and the
# comparison of the two runs (does the second GPU change any timing beyond its spread?).
#   bash tools/two_gpu_run.sh [RUN_ONE [RUN_TWO]]      # defaults: gpu1, gpu2
# Prints both wall times; the comparison lands in reports/compare/<RUN_ONE>-vs-<RUN_TWO>/.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
one=${1:-gpu1}
two=${2:-gpu2}
PY=${PY:-python3}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
count=$("$PY" -c "from sgemm_lab.gpu.discovery import visible_gpus; print(len(visible_gpus()))" 2>/dev/null || echo 0)
if [ "$count" -lt 2 ]; then
  echo "two_gpu_run: needs two visible GPUs, this host shows $count" >&2
  exit 2
fi
first=$("$PY" -c "from sgemm_lab.gpu.discovery import visible_gpus; print(visible_gpus()[0].uuid)")
CUDA_VISIBLE_DEVICES=$first bash tools/cold_run.sh "$one" --cores all 2>&1 | tail -3
bash tools/cold_run.sh "$two" --cores all 2>&1 | tail -3
"$PY" -m snakemake --cores 1 compare --config "compare={\"runs\": [\"$one\", \"$two\"]}" > /dev/null 2>&1 \
  && echo "comparison: reports/compare/$one-vs-$two/compare.md"
