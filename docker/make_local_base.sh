#!/usr/bin/env bash
# A local stand-in for the NVIDIA CUDA devel base image, for machines that reach no container registry
# (only Debian's and PyPI's package servers): Debian trixie from debootstrap, the CUDA 13.0 toolkit at
# /usr/local/cuda-13.0 (symlinked as /usr/local/cuda: nvcc, headers, runtime, NVVM) copied from this
# machine (CUDA_SRC; here it is made of NVIDIA's CUDA wheels) with cuRAND, cuobjdump and nvdisasm
# added from NVIDIA's wheels, and a libcuda stub in lib64/stubs, as the NVIDIA image has, so that
# PyCUDA links; at run time the real libcuda comes from the host driver.
#   bash docker/make_local_base.sh [TAG]      # default TAG: localhost/sgemm-lab-base:cuda13.0
# Needs root, podman and debootstrap (docker/test.sh installs them).
set -euo pipefail
TAG=${1:-localhost/sgemm-lab-base:cuda13.0}
if [ -z "${CUDA_SRC:-}" ]; then  # the usual prefixes of a CUDA 13.0 toolkit
  for CUDA_SRC in /usr/local/cuda-13.0 /usr/local/cuda; do [ -x "$CUDA_SRC/bin/nvcc" ] && break; done
fi
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PY=${PYTHON:-python3}   # any Python with pip, to fetch NVIDIA's cuRAND wheel
source "$(dirname "${BASH_SOURCE[0]}")/podman.sh"
ensure_podman

if [ ! -x "$CUDA_SRC/bin/nvcc" ]; then
  echo "make_local_base: no CUDA 13.0 toolkit at $CUDA_SRC (set CUDA_SRC to one with bin/nvcc)" >&2
  exit 2
fi
ROOTFS=$(mktemp -d)
trap 'rm -rf "$ROOTFS" "$ROOTFS.wheels"' EXIT
t0=$(date +%s)
if ! debootstrap --variant=minbase trixie "$ROOTFS" "$MIRROR" > "$ROOTFS.debootstrap.log" 2>&1; then
  echo "make_local_base: debootstrap of Debian trixie from $MIRROR failed (no network?); see $ROOTFS.debootstrap.log" >&2
  exit 3
fi
mkdir -p "$ROOTFS/usr/local"
cp -a "$(readlink -f "$CUDA_SRC")" "$ROOTFS/usr/local/cuda-13.0"
ln -sfn cuda-13.0 "$ROOTFS/usr/local/cuda"
# What the NVIDIA devel image has and this toolkit may lack, from NVIDIA's wheels: cuRAND (CUDA 13.0's;
# PyCUDA's build wraps it), cuobjdump and the nvdisasm it runs (the build's SASS counts; the same
# versions as env/test.txt)
CUDA_DIR="$ROOTFS/usr/local/cuda-13.0"
"$PY" -m pip download --quiet --no-deps --dest "$ROOTFS.wheels" nvidia-curand==10.4.0.35 \
  nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37
"$PY" - "$ROOTFS.wheels" "$CUDA_DIR" <<'PYEOF'
import os, sys, zipfile
from pathlib import Path
wheels, cuda = Path(sys.argv[1]), Path(sys.argv[2])
for whl in wheels.glob("nvidia_*.whl"):
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            for part, dest in (("nvidia/cu13/include/", cuda / "include"), ("nvidia/cu13/lib/", cuda / "lib64"),
                               ("nvidia/cu13/bin/", cuda / "bin")):
                if name.startswith(part) and not name.endswith("/") and not (dest / name[len(part):]).exists():
                    out = dest / name[len(part):]
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(z.read(name))
                    if part.endswith("bin/"):
                        out.chmod(0o755)
lib = cuda / "lib64" / "libcurand.so"
if not lib.exists():
    os.symlink("libcurand.so.10", lib)
PYEOF
rm -rf "$ROOTFS.wheels"
mkdir -p "$ROOTFS/usr/local/cuda-13.0/lib64/stubs"
echo 'void sgemm_lab_libcuda_stub(void) {}' \
  | cc -shared -x c - -Wl,-soname,libcuda.so.1 -o "$ROOTFS/usr/local/cuda-13.0/lib64/stubs/libcuda.so"
tar -C "$ROOTFS" -c . | pod import - "$TAG" > /dev/null
echo "make_local_base: $TAG in $(( $(date +%s) - t0 )) s ($(pod image inspect --format '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1 / 1e6}'))"
