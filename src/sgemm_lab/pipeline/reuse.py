"""A stage's results reused inside a run when nothing they depend on changed.

Several stages share one job (``pipeline.batches``), and Snakemake reruns a job whole: an edited kernel
would have every stage of its batch rebuilt, checked and timed again. Instead, each stage's outputs are
kept, after a step that ended ``ok``, under ``results/<run>/reuse/<step>/<stage>/`` with a key: a hash of
the content of every input file of that stage's step, its own configuration entry (and those of the
stages it is picked from), the rest of the configuration but the kernel list, and the harness's own
source. A later job of the same run whose key for that stage is the same copies them back instead of
running the step; the log says so. Anything else (a failed or missing step, a changed input, another
GPU or driver: the environment record is an input) runs the step again.

``reuse: false`` in the configuration runs every stage's step again, ``remeasure: [ids]`` those stages'
(Snakemake's ``--forcerun`` reruns the job, not the measurement: the key would still match; with
``--forcerun bench_gpu --config remeasure=<stage>`` one stage is timed again and the others kept).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from ..results import io

PACKAGE = Path(__file__).resolve().parents[1]


@lru_cache(maxsize=1)
def _package_hash() -> str:
    h = hashlib.sha256()
    for p in sorted(PACKAGE.rglob("*.py")):
        h.update(str(p.relative_to(PACKAGE)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _flat(items: Iterable) -> list[str]:
    out = []
    for item in items:
        if isinstance(item, (list, tuple)):
            out += _flat(item)
        elif item:
            out.append(str(item))
    return out


def stage_config(config: dict, impl: str) -> dict:
    """The configuration a stage's step depends on: everything but the kernel list, plus the entries of
    the stage and of the stages it is picked from (candidates of an autotuned or dispatch stage)."""
    entries = {k["id"]: k for k in config.get("kernels", [])}
    own = entries.get(impl, {})
    related = [impl, *own.get("tune_from", []), *([own["dispatch_from"]] if own.get("dispatch_from") else [])]
    return dict({k: v for k, v in config.items() if k not in ("kernels", "reuse", "remeasure")},
                kernels=[entries[r] for r in related if r in entries])


def key(step: str, impl: str, inputs: Iterable, config: dict, extra: Iterable[Path] = ()) -> str:
    """The hash that decides whether a stage's kept results still stand for ``step`` (``inputs``: the
    files its step reads; ``extra``: files it reads without naming them, such as the kernels' headers)."""
    h = hashlib.sha256()
    h.update(json.dumps(dict(step=step, impl=impl, config=stage_config(config, impl), package=_package_hash()),
                        sort_keys=True, default=str).encode())
    for p in sorted(set(_flat(inputs)) | {str(x) for x in extra}):
        h.update(p.encode())
        h.update(_file_hash(Path(p)).encode() if Path(p).is_file() else b"-")
    return h.hexdigest()


def folder(results: Path, step: str, impl: str) -> Path:
    return results / "reuse" / step / impl


def restore(where: Path, key_: str, outputs: list[str], log: str | None = None) -> dict | None:
    """Copy the kept outputs back when ``where`` holds them under ``key_``, and the stage's log of the step
    that made them (Snakemake removed both before the job), with a line saying so; their status record
    (a dict) or None."""
    meta = where / "key.json"
    if not meta.is_file():
        return None
    try:
        kept = json.loads(meta.read_text())
    except (OSError, ValueError):
        return None
    files = [where / f"{i}.out" for i in range(len(outputs))]
    if kept.get("key") != key_ or kept.get("outputs") != len(outputs) or not all(f.is_file() for f in files):
        return None
    for src, dst in zip(files, outputs):
        io.write_bytes(Path(dst), src.read_bytes())
    if log:
        before = (where / "log.txt").read_text() if (where / "log.txt").is_file() else ""
        io.write_text(Path(log), before + f"(results kept from {where}: nothing this step reads has changed since "
                                          "this log was written)\n")
    return kept.get("status")


def keep(where: Path, key_: str, outputs: list[str], status: dict, log: str | None = None) -> None:
    """Keep a stage's outputs and log (after a step that ended ok) for a later job of the run."""
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    for i, out in enumerate(outputs):
        shutil.copyfile(out, where / f"{i}.out")
    if log and Path(log).is_file():
        shutil.copyfile(log, where / "log.txt")
    io.write_json(where / "key.json", dict(key=key_, outputs=len(outputs), status=status))
