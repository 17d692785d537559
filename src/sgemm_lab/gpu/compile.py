"""Compile flags (one function for every build path) and the offline nvcc compile check.

The GPU build (``build.py``) and the CPU-only compile check used by CI both take their flags from
``compile_options`` so that CI compiles exactly what the pipeline runs.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..config.records import KERNEL_DIR, KernelSpec
from ..errors import CompileError


def target_arch(spec: KernelSpec, device_arch: str) -> str:
    """The target ``spec`` is compiled for on a device of ``device_arch`` (e.g. sm_90): the device's own,
    or the stage's arch-specific one (sm_90a), which only that compute capability can run."""
    if not spec.arch:
        return device_arch
    if spec.arch.rstrip("a") != device_arch.rstrip("a"):
        raise CompileError(f"kernel {spec.id}: built for {spec.arch} only (its instructions exist on no other "
                           f"target); this device is {device_arch}")
    return spec.arch


def compile_options(spec: KernelSpec) -> list[str]:
    """nvcc flags for ``spec`` except the target architecture (PyCUDA adds ``-arch`` itself)."""
    return [
        "-O3",
        "-lineinfo",
        "-std=c++17",
        f"-I{KERNEL_DIR}",
        *(f"-D{name}={value}" for name, value in sorted(spec.params.items())),
    ]


_LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')


def _expand(path: Path, done: set[Path]) -> str:
    """``path`` with its local ``#include "..."`` files inlined (each once; ``#line`` keeps file:line in
    compiler messages). Angle-bracket includes are left to the compiler."""
    out = []
    for lineno, line in enumerate(path.read_text().splitlines(keepends=True), start=1):
        m = _LOCAL_INCLUDE.match(line)
        if m and (path.parent / m.group(1)).is_file():
            inc = (path.parent / m.group(1)).resolve()
            if inc not in done:
                done.add(inc)
                out.append(f'#line 1 "{m.group(1)}"\n')
                out.append(_expand(inc, done))
                out.append(f'\n#line {lineno + 1} "{path.name}"\n')
            continue
        if line.strip() == "#pragma once":
            continue
        out.append(line)
    return "".join(out)


def source_text(spec: KernelSpec) -> str:
    """The kernel's source as compiled, local headers inlined: its hash covers everything the compiler
    sees from kernels/, and PyCUDA's compile cache can key on it without running the preprocessor."""
    try:  # the first #line makes nvcc name the stage's own file (not a temporary kernel.cu) in its messages
        return f'#line 1 "{spec.source_path.name}"\n' + _expand(spec.source_path, set())
    except FileNotFoundError:
        raise CompileError(f"kernel {spec.id}: source {spec.source_path} not found") from None


def source_hash(spec: KernelSpec) -> str:
    """sha256 of the kernel source: identifies exactly which code produced a result."""
    return hashlib.sha256(source_text(spec).encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class Resources:
    """Per-function resource use as reported by ptxas (bytes are per thread unless noted)."""

    function: str
    registers: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    shared_bytes: int  # static shared memory per block

    @property
    def local_bytes(self) -> int:
        return max(self.stack_bytes, self.spill_store_bytes, self.spill_load_bytes)


def _int_before(words: list[str], unit: str) -> int:
    """The integer just before ``unit`` in a ptxas info line's words (0 when absent)."""
    for i, w in enumerate(words[1:], start=1):
        if w.rstrip(",") == unit and words[i - 1].isdigit():
            return int(words[i - 1])
    return 0


def parse_ptxas_info(text: str) -> dict[str, Resources]:
    """Read ``ptxas -v`` (``--resource-usage``) output into one record per entry function."""
    out: dict[str, dict] = {}
    current = None
    for raw in text.splitlines():
        line = raw.replace("ptxas info    :", "").strip()
        if line.startswith("Compiling entry function"):
            current = line.split("'")[1]
            out[current] = dict(registers=0, stack_bytes=0, spill_store_bytes=0, spill_load_bytes=0, shared_bytes=0)
        elif current is None:
            continue
        elif "stack frame" in line:
            parts = [p.strip().split() for p in line.split(",")]
            for words in parts:
                if words[1:3] == ["bytes", "stack"]:
                    out[current]["stack_bytes"] = int(words[0])
                elif words[1:4] == ["bytes", "spill", "stores"]:
                    out[current]["spill_store_bytes"] = int(words[0])
                elif words[1:4] == ["bytes", "spill", "loads"]:
                    out[current]["spill_load_bytes"] = int(words[0])
        elif line.startswith("Used "):
            words = line.replace(",", " ,").split()
            out[current]["registers"] = _int_before(words, "registers")
            # "... 8192 bytes smem ..." is static shared memory per block
            for i, w in enumerate(words):
                if w == "smem" and i >= 2 and words[i - 1] == "bytes":
                    out[current]["shared_bytes"] = int(words[i - 2])
    return {name: Resources(function=name, **vals) for name, vals in out.items()}


def nvcc_compile(spec: KernelSpec, arch: str, workdir: Path, nvcc: str = "nvcc") -> tuple[Resources, str]:
    """Compile ``spec`` to a cubin with the harness's flags; return its entry's resources and the log."""
    exe = shutil.which(nvcc)
    if exe is None:
        raise CompileError(f"kernel {spec.id}: nvcc not found on PATH")
    src = workdir / spec.source  # the text the pipeline compiles (headers inlined); a missing source
    src.write_text(source_text(spec))  # fails here with the kernel's name, not nvcc's message
    cubin = workdir / f"{spec.id}.cubin"
    cmd = [exe, "-cubin", f"-arch={target_arch(spec, arch)}", "--resource-usage", *compile_options(spec),
           "-o", str(cubin), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log = " ".join(cmd) + "\n" + proc.stdout + proc.stderr
    if proc.returncode != 0:
        first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr.strip()[:200])
        raise CompileError(f"kernel {spec.id}: nvcc failed: {first.strip()}", log)
    info = parse_ptxas_info(proc.stdout + proc.stderr)
    if spec.entry not in info:
        found = ", ".join(info) or "none"
        raise CompileError(f"kernel {spec.id}: entry '{spec.entry}' not in {spec.source} (found: {found})", log)
    return info[spec.entry], log


def check_resources(spec: KernelSpec, res: Resources) -> None:
    if res.local_bytes > spec.max_local_bytes:
        raise CompileError(
            f"kernel {spec.id}: {res.local_bytes} bytes of local memory per thread "
            f"(stack {res.stack_bytes}, spill stores {res.spill_store_bytes}, loads {res.spill_load_bytes}); "
            f"config allows {spec.max_local_bytes}"
        )


def compile_check(specs, arch: str, log_dir: Path,
                  host_cflags=("-O3", "-march=native")) -> list[tuple[KernelSpec, Resources | None, str | None]]:
    """Compile every kernel offline; return (spec, resources, error-or-None) per kernel.

    Host stages are compiled with the C compiler (no resources to report); autotuned stages are
    skipped (their candidates are compiled as themselves). Each kernel's full compiler output is kept
    in ``log_dir/<id>.log`` whether it compiled or not.
    """
    from .host import compile_shared

    log_dir.mkdir(parents=True, exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in specs:
            if spec.autotuned:  # compiled as the stages it tunes
                continue
            log_path = log_dir / f"{spec.id}.log"
            try:
                if spec.backend == "host":
                    _, _, log = compile_shared(spec, host_cflags)
                    log_path.write_text(log)
                    results.append((spec, None, None))
                    continue
                res, log = nvcc_compile(spec, arch, Path(tmp))
                log_path.write_text(log)
                check_resources(spec, res)
                results.append((spec, res, None))
            except CompileError as exc:
                if len(exc.args) > 1:
                    log_path.write_text(exc.args[1])
                results.append((spec, None, f"{exc.args[0]} (log: {log_path})"))
    return results
