#!/usr/bin/env bash
# The container, built and run for real on a machine without a GPU or a container registry:
#   bash docker/test.sh
# 1. podman (installed if missing: needs root) and the local base (docker/make_local_base.sh: Debian +
#    the CUDA 13.0 toolkit + a libcuda stub), as no registry serves NVIDIA's image here;
# 2. the image from docker/Dockerfile on that base (PyCUDA compiled inside, as on the users' path;
#    Nsight Compute left out, the one step only NVIDIA's base can do);
# 3. inside it, with the checkout mounted at /lab as the README documents: the test suite, `snakemake -n`,
#    and a CPU-only target of the pipeline (`compare` on two committed runs) writing into the checkout;
# 4. checks those outputs: present, non-empty, owned by the checkout's owner (so that the user can
#    delete them). Prints the timings, the image size and its digest; exits non-zero on any failure,
#    with one line naming the step.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
source docker/podman.sh
BASE=localhost/sgemm-lab-base:cuda13.0
IMAGE=localhost/sgemm-lab:test
LOG=${DOCKER_TEST_LOG:-/tmp/sgemm-lab-docker-test}
mkdir -p "$LOG"
fail() { echo "docker/test.sh: $1 (log: $2)" >&2; exit 1; }
now() { date +%s; }

t0=$(now)
ensure_podman || exit 2
bash docker/make_local_base.sh "$BASE" > "$LOG/base.log" 2>&1 || fail "the local base could not be made" "$LOG/base.log"
t_base=$(( $(now) - t0 ))
tail -1 "$LOG/base.log"

t0=$(now)
# --network host: the build fetches from Debian and PyPI; the host's CA bundle, mounted aside and named
# by PIP_CERT, lets pip trust what the host trusts (mounting it over the image's own would break the
# image's ca-certificates package)
pod build --network host -f docker/Dockerfile --build-arg BASE_IMAGE="$BASE" --build-arg NCU_PACKAGE= \
  -v /etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt:ro --env PIP_CERT=/run/host-ca.crt \
  -t "$IMAGE" . > "$LOG/build.log" 2>&1 \
  || fail "podman build failed at: $(grep -m1 -oE 'building at STEP "[^"]{0,80}' "$LOG/build.log" || echo '?')" "$LOG/build.log"
t_build=$(( $(now) - t0 ))
size=$(pod image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1 / 1e6}')
digest=$(pod image inspect --format '{{.Digest}}' "$IMAGE")
echo "image $IMAGE: built in ${t_build} s, $size, $digest"

run() {  # the README's way: the checkout mounted at /lab, working directory /lab
  pod run --rm --network none -v "$ROOT":/lab -w /lab -e SGEMM_LAB_CONTAINER_IMAGE="$IMAGE@$digest" "$IMAGE" "$@"
}
t0=$(now)
run python -m pytest -q -p no:cacheprovider > "$LOG/pytest.log" 2>&1 || fail "the test suite failed inside the image: $(tail -1 "$LOG/pytest.log")" "$LOG/pytest.log"
t_tests=$(( $(now) - t0 ))
echo "inside: $(tail -1 "$LOG/pytest.log") in ${t_tests} s"

t0=$(now)
run snakemake -n --quiet rules > "$LOG/dryrun.log" 2>&1 || fail "snakemake -n failed inside the image" "$LOG/dryrun.log"
runs='{"runs": ["probes/11_general-a6e82da", "probes/14_split_tree-e7e2deb"]}'
out=reports/compare/probes_11_general-a6e82da-vs-probes_14_split_tree-e7e2deb
rm -rf "$out"
run snakemake --cores 1 compare --config "compare=$runs" > "$LOG/compare.log" 2>&1 \
  || fail "the compare target failed inside the image" "$LOG/compare.log"
t_cpu=$(( $(now) - t0 ))
owner=$(stat -c %u "$ROOT")
for f in compare.md compare.csv compare.png; do
  [ -s "$out/$f" ] || fail "$out/$f is missing or empty after the in-container run" "$LOG/compare.log"
  [ "$(stat -c %u "$out/$f")" = "$owner" ] || fail "$out/$f is owned by uid $(stat -c %u "$out/$f"), not the checkout's owner ($owner)" "$LOG/compare.log"
done
rm -rf "$out"
echo "inside: snakemake -n and the compare target in ${t_cpu} s; outputs present and owned by uid $owner"
echo "docker/test.sh: ok (base ${t_base} s, build ${t_build} s, tests ${t_tests} s, pipeline ${t_cpu} s; $size)"
