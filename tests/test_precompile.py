"""The precompile step: what it compiles (everything the builds compile that is known before any sweep),
and that a stage which does not compile is counted, never failed, there."""

import json

from conftest import ROOT

from sgemm_lab.dispatch.choice import candidate_specs
from sgemm_lab.gpu import build as gpu_build
from sgemm_lab.gpu.compile import compile_options
from sgemm_lab.gpu.device import DeviceInfo
from sgemm_lab.pipeline import build as build_step


def test_precompile_covers_every_build_known_before_the_sweeps(lab):
    ids = [sp.id for sp in build_step.precompile_specs(lab)]
    assert len(ids) == len(set(ids))
    plain = [k for k in lab.kernels if k.backend != "host" and not k.autotuned and not k.dispatched]
    assert plain and all(k.id in ids for k in plain)
    for k in lab.kernels:
        if k.backend == "host" or k.autotuned:
            assert k.id not in ids
        if k.dispatched:
            assert k.id not in ids  # its candidates are
            assert [c.id for c in candidate_specs(lab, k)] == [i for i in ids if i.startswith(k.id + ".")]
    fused = [k for k in plain if k.signature == "fused"]
    assert fused
    for k in fused:  # the build compiles its epilogue variants beside it: same flags here
        variants = build_step._epilogue_variants(lab, k)
        assert variants
        opts = {" ".join(compile_options(sp)) for sp in build_step.precompile_specs(lab)}
        assert all(" ".join(compile_options(v)) in opts for v in variants)


def test_precompile_counts_a_stage_that_does_not_compile(lab, tmp_path, monkeypatch):
    from sgemm_lab.errors import CompileError

    calls = []

    def fake_compile_many(specs, arch, jobs, *, prebuilt=None, keep=False):
        calls.append((len(specs), arch, jobs, prebuilt, keep))
        return [(None, CompileError(f"kernel {sp.id}: nvcc failed")) if i == 1 else (b"cubin", None)
                for i, sp in enumerate(specs)]

    monkeypatch.setattr(gpu_build, "compile_many", fake_compile_many)
    env = tmp_path / "env.json"
    record = json.loads((ROOT / "tests" / "fixtures" / "h100" / "environment.json").read_text())
    env.write_text(json.dumps(record))
    out = tmp_path / "precompiled.json"
    build_step.precompile(lab, env_json=env, out=out, jobs=3)
    specs = build_step.precompile_specs(lab, DeviceInfo(**record["gpu"]))
    rec = json.loads(out.read_text())
    assert calls == [(len(specs), "sm_90", 3, gpu_build.prebuilt_dir(tmp_path, record), True)]
    assert rec["failed"] == [specs[1].id]
    assert rec["compiled"] == [sp.id for i, sp in enumerate(specs) if i != 1]
    assert rec["arch"] == "sm_90"


def test_precompile_compiles_the_tile_sweeps_points_too(lab, tmp_path):
    """The sweep of each swept stage reads its points' binaries from the precompile step: the same specs,
    filtered against the same device limits (pipeline.sweep.sweep_todo)."""
    from sgemm_lab.pipeline.sweep import sweep_todo

    record = json.loads((ROOT / "tests" / "fixtures" / "h100" / "environment.json").read_text())
    dev = DeviceInfo(**record["gpu"])
    opts = {" ".join(compile_options(sp)) + sp.source for sp in build_step.precompile_specs(lab, dev)}
    assert lab.swept
    for spec in lab.swept:
        filtered, todo = sweep_todo(lab, spec, dev)
        assert todo and all(" ".join(compile_options(sp)) + sp.source in opts for _, sp, _ in todo)
        assert all(r["status"] == "filtered" for r in filtered)
    without = {" ".join(compile_options(sp)) + sp.source for sp in build_step.precompile_specs(lab)}
    assert without < opts  # no device limits known: the stages only


class _Pool:
    """Stands in for the compile workers: runs the jobs in this process, and counts its starts."""

    starts = 0

    def __init__(self, **kwargs):
        type(self).starts += 1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def map(self, fn, jobs):
        return [fn(j) for j in jobs]


def test_prebuilt_binaries_are_read_and_kept_by_what_the_compiler_sees(lab, tmp_path, monkeypatch):
    import concurrent.futures
    from dataclasses import replace

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", _Pool)
    monkeypatch.setattr(gpu_build, "_compile_job", lambda job: (f"cubin of {job[0]}".encode(), None))
    _Pool.starts = 0
    specs = build_step.precompile_specs(lab)[:3]
    env = {"nvcc": "Build cuda_13.0", "packages": {"pycuda": "2026.1"}}
    folder = gpu_build.prebuilt_dir(tmp_path, env)
    assert folder.parent == tmp_path / "build" / "precompiled"
    assert gpu_build.prebuilt_dir(tmp_path, dict(env, nvcc="Build cuda_12.8")) != folder  # another compiler
    # the precompile step compiles and keeps
    kept = gpu_build.compile_many(specs, "sm_90", jobs=2, prebuilt=folder, keep=True)
    assert [c for c, _ in kept] == [f"cubin of {sp.id}".encode() for sp in specs] and _Pool.starts == 1
    assert all(gpu_build.prebuilt_file(folder, sp, "sm_90") for sp in specs)
    # a build finds them: no worker starts, the same bytes (under its own id: the name is what nvcc sees)
    again = gpu_build.compile_many([replace(specs[1], id="another id")], "sm_90", jobs=1, prebuilt=folder)
    assert again == [(kept[1][0], None)] and _Pool.starts == 1
    # any change of what the compiler sees is compiled, not taken
    changed = replace(specs[0], params={**specs[0].params, "MINBLOCKS": 7})
    assert gpu_build.prebuilt_file(folder, changed, "sm_90") is None
    assert gpu_build.prebuilt_file(folder, specs[0], "sm_80") is None
    gpu_build.compile_many([changed], "sm_90", jobs=1, prebuilt=folder)
    assert _Pool.starts == 2
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temporary files left


def _slow_compile(job):
    """A compile that takes a while and leaves a mark for each binary it made."""
    import os
    import time

    time.sleep(0.3)
    with open(os.environ["COMPILE_MARKS"], "a") as fh:
        fh.write(f"{job[0]}\n")
    return f"cubin of {job[0]}".encode(), None


def _compile_in_child(n, specs, folder, out):
    out.put((n, [c for c, _ in gpu_build.compile_many(specs, "sm_90", jobs=2, prebuilt=folder)]))


def test_jobs_compiling_at_once_share_the_folder_and_compile_each_binary_once(lab, tmp_path, monkeypatch):
    """The builds, sweeps and the precompile step run at once under the parallel default: a binary one of
    them is compiling is waited for by the others and read, not compiled again."""
    import concurrent.futures
    import multiprocessing as mp

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", _Pool)
    monkeypatch.setattr(gpu_build, "_compile_job", _slow_compile)
    monkeypatch.setenv("COMPILE_MARKS", str(tmp_path / "marks"))
    keys, specs = set(), []
    for sp in build_step.precompile_specs(lab):  # four that compile to four binaries
        key = gpu_build._key((sp.id, gpu_build.source_text(sp), gpu_build.compile_options(sp), "sm_90"))
        if key not in keys and len(specs) < 4:
            keys.add(key)
            specs.append(sp)
    folder = tmp_path / "prebuilt"
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    jobs = [ctx.Process(target=_compile_in_child, args=(n, order, folder, out))
            for n, order in enumerate((specs, list(reversed(specs)), specs[1:3]))]
    for j in jobs:
        j.start()
    got = dict(out.get(timeout=60) for _ in jobs)
    for j in jobs:
        j.join(10)
    want = {sp.id: f"cubin of {sp.id}".encode() for sp in specs}
    assert got[0] == [want[sp.id] for sp in specs] and got[1] == [want[sp.id] for sp in reversed(specs)]
    assert got[2] == [want[sp.id] for sp in specs[1:3]]
    marks = (tmp_path / "marks").read_text().split()
    assert sorted(marks) == sorted(want)  # each compiled once, by whichever job claimed it first


def test_a_binary_whose_compiler_failed_is_compiled_by_the_one_waiting(lab, tmp_path, monkeypatch):
    specs = build_step.precompile_specs(lab)[:1]
    folder = tmp_path / "prebuilt"
    job = (specs[0].id, gpu_build.source_text(specs[0]), gpu_build.compile_options(specs[0]),
           gpu_build.target_arch(specs[0], "sm_90"))
    lock = gpu_build._claim(folder, job)  # another process compiling it...
    monkeypatch.setattr(gpu_build, "_compile_job", lambda j: (b"compiled here", None))
    import threading

    threading.Timer(0.2, lock.close).start()  # ...ends without writing it
    assert gpu_build.compile_many(specs, "sm_90", jobs=1, prebuilt=folder) == [(b"compiled here", None)]
