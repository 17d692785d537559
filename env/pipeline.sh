#!/usr/bin/env bash
# The whole pipeline on an NVIDIA GPU: sets up its environment (pinned, env/pipeline.txt), then
# runs `snakemake --cores all` with any extra arguments given (a later --cores wins), e.g.
#   bash env/pipeline.sh                          # run "local" -> reports/local/report.md
#   bash env/pipeline.sh --config run=h100        # the reference run -> reports/h100/
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/env/_venv.sh"
cd "$ROOT"
ensure_env pipeline env/pipeline.txt
exec "$PY" -m snakemake --workflow-profile workflow/profiles/default --cores all "$@"
