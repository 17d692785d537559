#!/usr/bin/env bash
# A probe of a change on trial, kept as a patch beside its probe configuration (reports/probes/<name>/:
# one or more *.patch against the configured sources, the sources they replace as *_before.cu when the
# probe times before and after in one run, and probe.yaml): apply, run tools/probe.sh, put the tree back.
#   bash tools/probe_patch.sh reports/probes/narrow_loads [KEY=VALUE config items]
# The tree is restored whatever happens (the patched files checked out again, the copies removed); the
# probe's results stay in results/<run> and reports/<run>. Refuses to start on a tree whose patched
# files have uncommitted changes, so that restoring them loses nothing.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
dir=${1:?usage: tools/probe_patch.sh reports/probes/<name> [KEY=VALUE ...]}
shift
[ -f "$dir/probe.yaml" ] || { echo "probe_patch: no $dir/probe.yaml" >&2; exit 2; }
shopt -s nullglob
patches=("$dir"/*.patch)
befores=("$dir"/*_before.cu)
[ ${#patches[@]} -gt 0 ] || { echo "probe_patch: no *.patch in $dir" >&2; exit 2; }
mapfile -t files < <(git apply --numstat "${patches[@]}" | cut -f3)
if ! git diff --quiet HEAD -- "${files[@]}"; then
  echo "probe_patch: uncommitted changes in ${files[*]}: commit or stash them first" >&2
  exit 2
fi
for f in "${befores[@]}"; do
  [ -e "kernels/$(basename "$f")" ] && { echo "probe_patch: kernels/$(basename "$f") exists already" >&2; exit 2; }
done
restore() {
  git checkout -q HEAD -- "${files[@]}"
  for f in "${befores[@]}"; do rm -f "kernels/$(basename "$f")"; done
}
trap restore EXIT
for f in "${befores[@]}"; do cp "$f" kernels/; done
git apply "${patches[@]}" || { echo "probe_patch: ${patches[*]} do not apply to this tree" >&2; exit 2; }
bash tools/probe.sh "$dir/probe.yaml" "$@"
