#!/usr/bin/env bash
# A probe of a change on trial, kept as a patch beside its probe configuration (reports/probes/<name>/:
# one or more *.patch against the committed sources, and probe.yaml): apply, run tools/probe.sh, put the
# tree back. A stage of probe.yaml whose source is X_before.cu times the committed kernels/X.cu beside
# the patched one: the copy is made from HEAD for the run (the patch is made against HEAD, so the copy
# is what it replaces) and removed after.
#   bash tools/probe_patch.sh reports/probes/narrow_loads [KEY=VALUE config items]
# Exits with the probe's status. The tree is restored whatever happens (files the patches change checked
# out again, files they add removed, the copies removed; a failed restore is an error); the probe's
# results stay in results/<run> and reports/<run>. Refuses to start on a tree whose patched files have
# uncommitted changes, since restoring them would lose those.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
dir=${1:?usage: tools/probe_patch.sh reports/probes/<name> [KEY=VALUE ...]}
shift
[ -f "$dir/probe.yaml" ] || { echo "probe_patch: no $dir/probe.yaml" >&2; exit 2; }
shopt -s nullglob
patches=("$dir"/*.patch)
mapfile -t befores < <(grep -oE "[A-Za-z0-9_]+_before\.cu" "$dir/probe.yaml" | sort -u)
[ ${#patches[@]} -gt 0 ] || { echo "probe_patch: no *.patch in $dir" >&2; exit 2; }
mapfile -t files < <(git apply --numstat "${patches[@]}" | cut -f3)
tracked=() added=()
for f in "${files[@]}"; do
  if git cat-file -e "HEAD:$f" 2>/dev/null; then tracked+=("$f"); else added+=("$f"); fi
done
if [ ${#tracked[@]} -gt 0 ] && ! git diff --quiet HEAD -- "${tracked[@]}"; then
  echo "probe_patch: uncommitted changes in ${tracked[*]}: commit or stash them first" >&2
  exit 2
fi
for f in "${added[@]+"${added[@]}"}"; do
  [ -e "$f" ] && { echo "probe_patch: $f, which a patch adds, exists already" >&2; exit 2; }
done
copies=()
for name in "${befores[@]+"${befores[@]}"}"; do
  [ -e "kernels/$name" ] && { echo "probe_patch: kernels/$name exists already" >&2; exit 2; }
  git cat-file -e "HEAD:kernels/${name%_before.cu}.cu" 2>/dev/null \
    || { echo "probe_patch: $dir/probe.yaml names $name, but HEAD has no kernels/${name%_before.cu}.cu" >&2; exit 2; }
  copies+=("kernels/$name")
done
restore() {
  local ok=0
  if [ ${#tracked[@]} -gt 0 ]; then git checkout -q HEAD -- "${tracked[@]}" || ok=1; fi
  rm -f -- "${added[@]+"${added[@]}"}" "${copies[@]+"${copies[@]}"}" || ok=1
  if [ "$ok" != 0 ]; then
    echo "probe_patch: the tree could not be put back: check git status" >&2
    exit 3
  fi
}
trap restore EXIT
for name in "${befores[@]+"${befores[@]}"}"; do git show "HEAD:kernels/${name%_before.cu}.cu" > "kernels/$name"; done
git apply "${patches[@]}" || { echo "probe_patch: ${patches[*]} do not apply to this tree" >&2; exit 2; }
bash tools/probe.sh "$dir/probe.yaml" "$@"
