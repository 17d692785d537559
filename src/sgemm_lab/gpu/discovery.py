"""Which GPUs this process may use, found without initialising CUDA: NVML (``gpu.nvml``, milliseconds)
or, failing that, nvidia-smi; narrowed by CUDA_VISIBLE_DEVICES as CUDA would. A GPU is named by its NVML
index (PCI bus order, as nvidia-smi prints it) and its UUID; the UUID is what pins a process to it
(CUDA_VISIBLE_DEVICES=GPU-...), since CUDA's own order may differ.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    index: int  # NVML / nvidia-smi index
    uuid: str   # GPU-xxxxxxxx-...

    @property
    def label(self) -> str:
        return f"{self.index}:{self.uuid}"

    @classmethod
    def from_label(cls, label: str) -> "Gpu":
        index, uuid = label.split(":", 1)
        return cls(int(index), uuid)


def _nvml() -> list[Gpu] | None:
    from .nvml import nvml

    lib = nvml()
    count = lib.count() if lib is not None else None
    if count is None:
        return None
    out = []
    for i in range(count):
        handle = lib.handle_by_index(i)
        uuid = lib.uuid(handle) if handle is not None else None
        if uuid is None:
            return None
        out.append(Gpu(i, uuid))
    return out


def _smi() -> list[Gpu]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        res = subprocess.run([exe, "--query-gpu=index,uuid", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
    except subprocess.SubprocessError:
        return []
    out = []
    for line in res.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            out.append(Gpu(int(parts[0]), parts[1]))
    return out


def narrow(gpus: list[Gpu], cuda_visible: str | None) -> list[Gpu]:
    """``gpus`` as CUDA_VISIBLE_DEVICES = ``cuda_visible`` leaves them, in its order: a comma list of
    indices or UUIDs (a UUID prefix is enough); unset: all of them; CUDA stops at the first entry it
    cannot match, and so does this."""
    if cuda_visible is None:
        return list(gpus)
    out = []
    for item in (s.strip() for s in cuda_visible.split(",")):
        match = None
        if item.isdigit():
            match = next((g for g in gpus if g.index == int(item)), None)
        elif item:
            uuid = item if item.startswith("GPU-") else f"GPU-{item}"
            hits = [g for g in gpus if g.uuid.startswith(uuid)]
            match = hits[0] if len(hits) == 1 else None
        if match is None or match in out:
            break
        out.append(match)
    return out


_cache: dict[str | None, list[Gpu]] = {}


def visible_gpus() -> list[Gpu]:
    """The GPUs this process may use (empty without a driver), looked up once per process and
    CUDA_VISIBLE_DEVICES value."""
    key = os.environ.get("CUDA_VISIBLE_DEVICES")
    if key not in _cache:
        found = _nvml()
        _cache[key] = narrow(found if found is not None else _smi(), key)
    return _cache[key]


def allocation() -> dict[str, str | None]:
    """The GPUs this job was given, as its environment says before the lab pins anything (call it first):
    ``gpus``, the UUIDs that CUDA_VISIBLE_DEVICES leaves visible (comma-separated; a scheduler's
    allocation, or every GPU of the host); ``visible``, CUDA_VISIBLE_DEVICES itself; ``slurm_job`` and
    ``slurm_gpus``, SLURM's job id and GPU list where SLURM started the job."""
    env = os.environ
    return dict(gpus=",".join(g.uuid for g in visible_gpus()) or None, visible=env.get("CUDA_VISIBLE_DEVICES"),
                slurm_job=env.get("SLURM_JOB_ID"), slurm_gpus=env.get("SLURM_JOB_GPUS") or env.get("SLURM_STEP_GPUS"))
