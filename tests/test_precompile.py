"""The precompile step: what it compiles (everything the builds compile that is known before any sweep),
and that a stage which does not compile is counted, never failed, there."""

import json

from sgemm_lab.dispatch.choice import candidate_specs
from sgemm_lab.gpu import build as gpu_build
from sgemm_lab.gpu.compile import compile_options
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

    def fake_compile_many(specs, arch, jobs):
        calls.append((len(specs), arch, jobs))
        return [(None, CompileError(f"kernel {sp.id}: nvcc failed")) if i == 1 else (b"cubin", None)
                for i, sp in enumerate(specs)]

    monkeypatch.setattr(gpu_build, "compile_many", fake_compile_many)
    env = tmp_path / "env.json"
    env.write_text(json.dumps({"gpu": {"arch": "sm_90"}}))
    out = tmp_path / "precompiled.json"
    build_step.precompile(lab, env_json=env, out=out, jobs=3)
    specs = build_step.precompile_specs(lab)
    rec = json.loads(out.read_text())
    assert calls == [(len(specs), "sm_90", 3)]
    assert rec["failed"] == [specs[1].id]
    assert rec["compiled"] == [sp.id for i, sp in enumerate(specs) if i != 1]
    assert rec["arch"] == "sm_90"
