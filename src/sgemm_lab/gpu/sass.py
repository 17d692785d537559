"""What a kernel compiled to: instruction counts from its SASS (``cuobjdump -sass``).

The counts are static (instructions in the code, not executed ones; ncu counts those) and grouped by
mnemonic without modifiers: ``HMMA.1684.F32.TF32`` counts as HMMA, ``LDS.128`` as LDS. They show what a
stage's source became: FFMA against tensor-core HMMA (mma.sync, WMMA) or HGMMA (Hopper wgmma), shared
loads (LDS, LDSM) against generic ones (LD), asynchronous copies (LDGSTS) and bulk tensor copies (UTMALDG).
Instructions under the never-true predicate ``@!PT`` are padding and are not counted.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

# The mnemonics the build record keeps (as sass_<name> columns), in the report's order.
FAMILIES = ("FFMA", "HMMA", "HGMMA", "LDS", "LDSM", "LD", "LDG", "LDGSTS", "UTMALDG", "STS", "BAR")

_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:(@!?U?P[T0-9]+)\s+)?([A-Z][A-Z0-9_]*)")


def counts(sass_text: str, entry: str) -> Counter:
    """Instructions of function ``entry`` in a ``cuobjdump -sass`` listing, by mnemonic."""
    out: Counter = Counter()
    current = None
    for line in sass_text.splitlines():
        m = _FUNCTION.match(line)
        if m:
            current = m.group(1)
            continue
        if current != entry:
            continue
        m = _INSTRUCTION.match(line)
        if m and m.group(1) != "@!PT":
            out[m.group(2)] += 1
    return out


def cuobjdump() -> str | None:
    """cuobjdump on PATH, next to nvcc (a CUDA toolkit's bin directory), or from the
    nvidia-cuda-cuobjdump wheel."""
    exe = shutil.which("cuobjdump")
    if exe:
        return exe
    nvcc = shutil.which("nvcc")
    if nvcc and (Path(nvcc).resolve().parent / "cuobjdump").is_file():
        return str(Path(nvcc).resolve().parent / "cuobjdump")
    try:
        import nvidia  # namespace package of NVIDIA's wheels
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for found in sorted(Path(root).glob("*/bin/cuobjdump")):
            return str(found)
    return None


def listing(cubin: Path) -> str | None:
    """``cuobjdump -sass`` of the cubin file ``cubin``; None when cuobjdump is not available or cannot
    read it."""
    exe = cuobjdump()
    if exe is None:
        return None
    try:
        # cuobjdump runs nvdisasm, which sits beside it (toolkit or wheel)
        env = dict(os.environ, PATH=os.pathsep.join([str(Path(exe).parent), os.environ.get("PATH", "")]))
        # at a lower CPU priority, as the compiles (gpu.build): a measurement in another job keeps its CPU
        nice = shutil.which("nice")
        cmd = [nice, "-n", "10"] if nice else []
        out = subprocess.run([*cmd, exe, "-sass", str(cubin)], capture_output=True, text=True, timeout=120, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


# What record() found, by the binary's hash and entry: a build job lists every stage's SASS ahead, side
# by side, before its first module load (``records_ahead``), since a listing takes cuobjdump 0.4-0.8 s and
# the job holds the GPU from that load to its end.
_RECORDS: dict[tuple[str, str], dict] = {}


def _memo_key(cubin: bytes, entry: str) -> tuple[str, str]:
    import hashlib

    return hashlib.sha256(cubin).hexdigest(), entry


def records_ahead(items: list[tuple[bytes, str]], jobs: int) -> None:
    """``record`` of each (cubin, entry) in ``items``, in ``jobs`` threads (each waits on a cuobjdump
    process), kept for the later calls of this process."""
    from concurrent.futures import ThreadPoolExecutor

    todo = list({_memo_key(c, e): (c, e) for c, e in items if c}.values())
    if not todo:
        return
    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(todo)))) as pool:
        list(pool.map(lambda item: record(*item), todo))


def record(cubin: bytes, entry: str) -> dict:
    """``sass_<family>`` counts (lower case) and ``sass_total`` of ``entry`` in ``cubin``; empty when
    cuobjdump is not available or cannot read it (the build goes on without them)."""
    key = _memo_key(cubin, entry)
    if key in _RECORDS:
        return dict(_RECORDS[key])
    rec = _record(cubin, entry)
    if rec:  # (a listing that failed is tried again by the next call)
        _RECORDS[key] = rec
    return dict(rec)


def _record(cubin: bytes, entry: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        text = listing(path)
    if text is None:
        return {}
    c = counts(text, entry)
    if not c:
        return {}
    return {f"sass_{f.lower()}": int(c.get(f, 0)) for f in FAMILIES} | {"sass_total": int(sum(c.values()))}
