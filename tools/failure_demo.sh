#!/usr/bin/env bash
# A failed stage as a user meets it, on the .test config: the run goes on, the report lists the failure,
# and the exit status is non-zero with one line. Each case runs on a copy of kernels/ (SGEMM_LAB_KERNELS)
# with one line changed:
#   compile   02_coalesced does not compile
#   wrong     04_1d_blocktiling, the only tuning candidate of 10_autotuned, computes wrong results
#   bash tools/failure_demo.sh compile [more snakemake arguments]     # run test-compile
# Needs an NVIDIA GPU (the .test config builds and times GPU stages) and the pipeline's environment.
# Exits 0 when the failure showed as designed (the pipeline exits non-zero, its report lists the stage
# in Failures), 1 when it did not, 2 when it cannot run here.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
case=${1:?compile or wrong}
shift
if ! nvidia-smi -L > /dev/null 2>&1; then
  echo "failure_demo: needs an NVIDIA GPU (the .test config builds and times GPU stages); nvidia-smi -L finds none" >&2
  exit 2
fi
PY=${PY:-python3}
kdir=$(mktemp -d)
trap 'rm -rf "$kdir"' EXIT
cp kernels/* "$kdir/"
case $case in
  compile) file=02_coalesced.cu; stage=02_coalesced; from='float acc = 0.0f;'; to='float acc = 0.0f undeclared_symbol;' ;;
  wrong) file=04_1d_blocktiling.cu; stage=04_1d_blocktiling; from='epilogue(alpha, acc\[r\], beta, c);'; to='epilogue(alpha, acc[r], beta, c) + 1e-3f;' ;;
  *) echo "failure_demo: unknown case '$case' (compile or wrong)" >&2; exit 2 ;;
esac
grep -q "$from" "$kdir/$file" || { echo "failure_demo: '$from' not found in kernels/$file" >&2; exit 2; }
sed -i "s/$from/$to/" "$kdir/$file"
run="test-$case"
rm -rf "results/$run" "reports/$run"
SGEMM_LAB_KERNELS=$kdir "$PY" -m snakemake --cores 1 "$@" --configfile .test/config/config.yaml --config run="$run" \
  > "/tmp/failure_demo_$case.log" 2>&1
rc=$?
echo "== $case: kernels/$file changed to '$to'; exit $rc; last line:"
grep -v '^\s*$' "/tmp/failure_demo_$case.log" | tail -n 1
echo "== reports/$run/report.md, Failures:"
failures=$(sed -n '/^## Failures/,/^## [^F]/p' "reports/$run/report.md" 2>/dev/null)
echo "${failures:-(no report)}" | head -n 20
if [ "$rc" -ne 0 ] && grep -q "$stage" <<< "$failures"; then
  echo "failure_demo $case: shown as designed (pipeline exit $rc, $stage listed in the report's Failures)"
  exit 0
fi
echo "failure_demo $case: not shown as designed (pipeline exit $rc; $stage in the report's Failures: $(grep -q "$stage" <<< "$failures" && echo yes || echo no)); log /tmp/failure_demo_$case.log" >&2
exit 1
