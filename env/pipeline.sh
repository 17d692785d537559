#!/usr/bin/env bash
# The whole pipeline on an NVIDIA GPU: sets up its environment (pinned, env/pipeline.txt; Python 3.12
# or newer), then runs `snakemake --cores all` with any extra arguments given (a later --cores wins), e.g.
#   bash env/pipeline.sh                          # run "local" -> reports/local/report.md
#   bash env/pipeline.sh --config run=h100        # the reference run -> reports/h100/
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/env/_venv.sh"
cd "$ROOT"
# PyCUDA, where it is built from source, finds cuda.h through CUDA_ROOT, else next to nvcc: a wrapper
# nvcc outside the toolkit leaves it without. Take the first toolkit that has the header.
if [ -z "${CUDA_ROOT:-}" ]; then
  nvcc_dir=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /nonexistent/bin/nvcc)")")")
  for dir in "${CUDA_HOME:-}" "${CUDA_PATH:-}" "$nvcc_dir" /usr/local/cuda; do
    if [ -n "$dir" ] && [ -f "$dir/include/cuda.h" ]; then
      export CUDA_ROOT=$dir
      break
    fi
  done
  if [ -z "${CUDA_ROOT:-}" ]; then
    echo "env/pipeline.sh: no CUDA toolkit with include/cuda.h under CUDA_HOME, CUDA_PATH, nvcc's directory or /usr/local/cuda: a PyCUDA built from source will not compile; set CUDA_ROOT" >&2
  fi
fi
ensure_env pipeline env/pipeline.txt 3.12
# The config files of the command line read first as the workflow reads them: Snakemake's own reader,
# which comes before the workflow, answers some hostile files with a traceback or runs their Python (YTE).
case " $* " in
  *" --configfile"*) "$PY" tools/check_config.py --snakemake-args "$@" || exit 1 ;;
esac
exec "$PY" -m snakemake --workflow-profile workflow/profiles/default --cores all "$@"
