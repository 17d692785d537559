#!/usr/bin/env bash
# A GPU inside a container on a host that has an NVIDIA driver but no container runtime, no image and
# no network: runc (Debian's package, given as .deb files and unpacked into a folder, never onto /)
# runs COMMAND in a container of its own mount, PID, IPC, UTS and network namespaces, whose root is
# the host's root filesystem bound read-only, with the checkout bound read-write at /lab, /tmp
# writable, and the NVIDIA device nodes passed in the way the NVIDIA container toolkit passes them
# (the driver's libraries are part of the host's root there). It tests the runtime and the device
# passing, not the lab's image (docker/Dockerfile), which such a host can neither pull nor build.
#   sudo bash docker/runc_gpu.sh DEB_DIR -- COMMAND [ARG...]
# Prints one line with the container's exit status; exits with it.
set -euo pipefail
usage() { echo "usage: runc_gpu.sh DEB_DIR -- COMMAND [ARG...]" >&2; exit 2; }
[ $# -ge 3 ] && [ "$2" = "--" ] || usage
debs=$(cd "$1" && pwd)
shift 2
[ "$(id -u)" = 0 ] || { echo "runc_gpu: needs root (runc creates namespaces and device nodes)" >&2; exit 2; }
compgen -G "$debs/runc_*.deb" > /dev/null || { echo "runc_gpu: no runc_*.deb in $debs" >&2; exit 2; }
compgen -G "/dev/nvidia[0-9]*" > /dev/null || { echo "runc_gpu: no /dev/nvidia<N>: no NVIDIA GPU here" >&2; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d /tmp/runc-gpu.XXXXXX)
bundle=$work/bundle
cleanup() { umount -R "$bundle/rootfs" 2> /dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

for d in "$debs"/*.deb; do dpkg -x "$d" "$work/pkg"; done
export LD_LIBRARY_PATH=$work/pkg/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
runc=$work/pkg/usr/sbin/runc
echo "runc_gpu: $("$runc" --version | head -1)"

mkdir -p "$bundle/rootfs"
mount --rbind / "$bundle/rootfs"      # every mount of the host, the driver's folder included
mount --make-rslave "$bundle/rootfs"  # so that unmounting it later leaves the host's mounts alone
(cd "$bundle" && "$runc" spec)

# The spec runc writes, changed: the command, its environment, a read-only root, the checkout and
# /tmp bound in, the GPU's device nodes created and allowed, and CAP_SYS_ADMIN so that Nsight Compute
# may read the performance counters (docker run --cap-add SYS_ADMIN in the README).
python3 - "$bundle/config.json" "$ROOT" "$@" <<'PYEOF'
import glob, json, os, stat, sys

path, lab, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
spec = json.load(open(path))
keep = ("PATH", "LANG", "PYTHONUNBUFFERED", "PIP_NO_INDEX", "PIP_FIND_LINKS", "NCCL_NVLS_ENABLE")
env = [f"{k}={v}" for k, v in os.environ.items() if k in keep or k.startswith("SGEMM_LAB_")]
# the environment record's container entry: no image, and what stands in for one
env += ["HOME=/tmp/runc-gpu-home", "SGEMM_LAB_IMAGE_BASE=none: the host's root filesystem, read-only",
        "SGEMM_LAB_CONTAINER_IMAGE=none: runc bundle of docker/runc_gpu.sh"]
spec["process"].update(terminal=False, args=argv, cwd="/lab", env=env)
for kind in ("bounding", "effective", "permitted"):
    spec["process"]["capabilities"][kind].append("CAP_SYS_ADMIN")
spec["root"] = {"path": "rootfs", "readonly": True}
spec["hostname"] = "lab-container"
spec["mounts"] += [{"destination": "/lab", "type": "bind", "source": lab, "options": ["rbind", "rw"]},
                   {"destination": "/tmp", "type": "bind", "source": "/tmp", "options": ["rbind", "rw"]}]
devices, allow = [], []
for node in sorted(glob.glob("/dev/nvidia*")):
    st = os.stat(node)
    if not stat.S_ISCHR(st.st_mode):
        continue
    major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
    devices.append({"path": node, "type": "c", "major": major, "minor": minor, "fileMode": 0o666, "uid": 0, "gid": 0})
    allow.append({"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"})
spec["linux"]["devices"] = devices
spec["linux"].setdefault("resources", {}).setdefault("devices", []).extend(allow)
spec["linux"]["maskedPaths"] = [p for p in spec["linux"].get("maskedPaths", []) if not p.startswith("/proc/driver")]
json.dump(spec, open(path, "w"), indent=1)
print(f"runc_gpu: {len(devices)} device nodes passed in: {' '.join(d['path'] for d in devices)}")
PYEOF

mkdir -p /tmp/runc-gpu-home
set +e
"$runc" run --bundle "$bundle" "lab-$$"
rc=$?
set -e
echo "runc_gpu: the container exited with status $rc"
exit "$rc"
