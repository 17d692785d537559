#!/usr/bin/env bash
# Several probes side by side on the GPU host, detached so that they outlive the command that started
# them (a host that limits one command's time). `start DIR...` copies the tree once per probe under /tmp
# (a probe with patches changes its tree while it runs), and runs in each, in a session of its
# own, tools/probe_patch.sh DIR (a folder with *.patch) or tools/probe.sh DIR/probe.yaml. The host's GPU
# lock (sgemm_lab.measure.gpulock) keeps every timed step of one probe apart from all GPU work of the
# others, so their builds and checks overlap and their timings do not. `wait SECONDS` waits that long at
# most; once all have ended it packs each probe's reports/RUN, results/RUN/logs and console log into $OUT
# (or /tmp/probes-out). Call `wait` again while it prints "still running".
#   PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/.whl bash tools/probes_detached.sh start reports/probes/a reports/probes/b
#   bash tools/probes_detached.sh wait 540
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
export ROOT=$PWD  # (env/_venv.sh reads it)
action=${1:?usage: tools/probes_detached.sh start DIR... | wait SECONDS}
shift
base=/tmp/probes-detached
if [ "$action" = start ]; then
  [ $# -gt 0 ] || { echo "probes_detached: start needs at least one probe folder" >&2; exit 2; }
  # shellcheck source=env/_venv.sh
  source env/_venv.sh
  ensure_env pipeline env/pipeline.txt 3.12 >/dev/null
  rm -rf "$base" && mkdir -p "$base"
  for dir in "$@"; do
    [ -f "$dir/probe.yaml" ] || { echo "probes_detached: no $dir/probe.yaml" >&2; exit 2; }
    name=$(basename "$dir")
    # A copy of the tree as it is here (the host's copy of .git need not know the latest commits), made a
    # commit of its own when it differs from that HEAD, since probe_patch.sh restores files from HEAD.
    mkdir -p "$base/$name"
    tar --exclude=./.venv --exclude=./.whl --exclude=./results --exclude=./.snakemake -cf - . | tar -xf - -C "$base/$name" || exit 1
    (cd "$base/$name" && git add -A && { git diff --cached --quiet || git -c user.name=probe -c user.email=probe@localhost \
      commit -qm "the tree as sent to the probe"; }) || exit 1
    if compgen -G "$dir/*.patch" > /dev/null; then cmd="bash tools/probe_patch.sh '$dir'"; else cmd="bash tools/probe.sh '$dir/probe.yaml'"; fi
    PY=$PY setsid nohup bash -c "cd '$base/$name' && $cmd > '$base/$name.log' 2>&1; echo \$? > '$base/$name.rc'" \
      > /dev/null 2>&1 < /dev/null &
    echo "started: $cmd (log $base/$name.log)"
  done
  limit=${PROBES_WAIT:-540}
else
  limit=${1:-540}
fi
deadline=$(( $(date +%s) + limit ))
pending() { local n=0 f; for f in "$base"/*.log; do [ -f "${f%.log}.rc" ] || n=$((n + 1)); done; echo "$n"; }
while [ "$(pending)" -gt 0 ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
if [ "$(pending)" -gt 0 ]; then
  echo "still running after ${limit} s: $(pending) probe(s)"
  for f in "$base"/*.log; do [ -f "${f%.log}.rc" ] || { echo "== $(basename "$f")"; tail -2 "$f"; }; done
  exit 3
fi
out=${OUT:-/tmp/probes-out}
mkdir -p "$out"
status=0
for f in "$base"/*.log; do
  name=$(basename "$f" .log) tree="$base/$(basename "$f" .log)"
  cp "$f" "$out/$name.console.log"
  run=$(grep -oE '^run: *[A-Za-z0-9_.-]+' "$tree/reports/probes/$name/probe.yaml" | awk '{print $2}')
  tar czf "$out/$name.tar.gz" -C "$tree" "reports/$run" "results/$run/logs" 2>/dev/null
  rc=$(cat "${f%.log}.rc")
  echo "== $name: exit $rc"
  tail -30 "$f"
  [ "$rc" = 0 ] || status=1
done
exit "$status"
