"""Stages sharing jobs (sgemm_lab.pipeline.batches) and a stage's results kept inside a run when nothing its
step reads changed (sgemm_lab.pipeline.reuse): host builds through the real entry point, with the C compiler."""

import json
import shutil
from types import SimpleNamespace

import pytest

from sgemm_lab.pipeline import entry, reuse
from sgemm_lab.pipeline.batches import BATCHED, batches
from sgemm_lab.pipeline.steps import uses_gpu


def test_every_stage_is_in_exactly_one_batch_of_each_step(lab):
    for step in BATCHED:
        groups = batches(lab, step)
        members = [impl for ids in groups.values() for impl in ids]
        want = {"build": [k.id for k in lab.kernels], "sweep": [k.id for k in lab.swept]}.get(step,
                                                                                            list(lab.implementations))
        assert sorted(members) == sorted(want) and len(members) == len(set(members)), step
        assert all(ids for ids in groups.values())


def test_batches_follow_what_a_job_needs(lab):
    build = batches(lab, "build")
    for k in lab.kernels:
        where = next(name for name, ids in build.items() if k.id in ids)
        assert where == ("tuned" if k.autotuned or k.dispatched else "host" if k.backend == "host" else "gpu")
    bench = batches(lab, "bench")
    assert "numpy" in bench["host"] and "cublas" in bench["gpu"]
    assert batches(lab, "check") == bench
    assert not uses_gpu(lab, "bench", bench["host"]) and uses_gpu(lab, "bench", bench["gpu"])
    assert not uses_gpu(lab, "build", build["host"]) and uses_gpu(lab, "build", build["gpu"])
    # a host stage's check calls cuBLAS for its FP32 limit: its job asks for the GPU too
    assert uses_gpu(lab, "check", batches(lab, "check")["host"])


def test_the_key_follows_inputs_and_the_stage_own_configuration(raw_config, tmp_path):
    src = tmp_path / "a.c"
    src.write_text("int x;\n")
    k0 = reuse.key("build", "00_hostmult0", [str(src)], raw_config)
    assert reuse.key("build", "00_hostmult0", [str(src)], raw_config) == k0
    assert reuse.key("bench", "00_hostmult0", [str(src)], raw_config) != k0
    other = json.loads(json.dumps(raw_config))
    other["kernels"][-1]["title"] = "another stage's entry"  # not the stage's own: same key
    assert reuse.key("build", "00_hostmult0", [str(src)], other) == k0
    other["kernels"][0]["title"] = "its own entry"
    assert reuse.key("build", "00_hostmult0", [str(src)], other) != k0
    other = dict(raw_config, bench=dict(raw_config["bench"], target_ms=1))  # the rest of the configuration
    assert reuse.key("build", "00_hostmult0", [str(src)], other) != k0
    src.write_text("int y;\n")
    assert reuse.key("build", "00_hostmult0", [str(src)], raw_config) != k0


@pytest.fixture
def host_batch(lab, raw_config, tmp_path, monkeypatch):
    """The host build batch as its Snakemake job would hand it to the entry point, in a scratch folder."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    from conftest import ROOT

    from sgemm_lab.config import records
    from sgemm_lab.config.load import validate

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(records, "KERNEL_DIR", tmp_path / "kernels")  # the builds compile these copies
    config = validate(raw_config, source="test")
    results = tmp_path / "results"
    env = results / "environment.json"
    env.parent.mkdir(parents=True)
    env.write_text('{"gpu": {"arch": "sm_90"}}\n')
    ids = batches(lab, "build")["host"]
    sources = {i: tmp_path / "kernels" / lab.kernel(i).source for i in ids}
    for i, s in sources.items():
        s.parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / "kernels" / lab.kernel(i).source, s)
    members = {i: {"input": [["env", str(env)], ["source", str(sources[i])]],
                   "output": [["binary", str(results / f"build/{i}.bin")], ["record", str(results / f"build/{i}.json")],
                              ["status", str(results / f"status/build/{i}.json")]],
                   "log": str(results / f"logs/build/{i}.log"), "params": {}} for i in ids}
    smk = SimpleNamespace(params=SimpleNamespace(members=members), config=config,
                          log=[str(results / "logs/build/host.batch.log")], input=[], output=[],
                          wildcards=SimpleNamespace())
    return smk, ids, sources, results


def test_a_batch_reruns_only_the_stage_whose_inputs_changed(host_batch, capsys):
    smk, ids, sources, results = host_batch
    assert len(ids) >= 2, "the default config has two host stages"
    entry.main("build", smk)
    first = {i: (results / f"build/{i}.bin").read_bytes() for i in ids}
    assert all(first.values())
    assert all(json.loads((results / f"status/build/{i}.json").read_text())["status"] == "ok" for i in ids)
    capsys.readouterr()

    entry_of = next(k for k in smk.config["kernels"] if k["id"] == ids[0])
    entry_of["title"] += " (edited)"  # its configuration entry (the two host stages share one source file)
    log_before = (results / f"logs/build/{ids[1]}.log").read_text()
    for i in ids:  # Snakemake removes a job's outputs and logs before it runs
        (results / f"build/{i}.bin").unlink()
        (results / f"logs/build/{i}.log").unlink()
    entry.main("build", smk)
    err = capsys.readouterr().err
    assert f"{ids[0]}: ok in" in err and f"{ids[1]}: ok, inputs unchanged: results kept" in err
    assert (results / f"build/{ids[1]}.bin").read_bytes() == first[ids[1]]
    kept_log = (results / f"logs/build/{ids[1]}.log").read_text()  # the log of the step that made them
    assert kept_log.startswith(log_before) and "results kept from" in kept_log
    status = json.loads((results / f"status/build/{ids[1]}.json").read_text())
    assert status["status"] == "ok" and status["log"].endswith(f"{ids[1]}.log")
    batch_log = (results / "logs/build/host.batch.log").read_text()
    assert f"[build 2/{len(ids)}] {ids[1]}" in batch_log

    smk.config["reuse"] = False  # --config reuse=false: every stage again
    entry.main("build", smk)
    assert "results kept" not in capsys.readouterr().err
    smk.config["reuse"] = True
    sources[ids[1]].write_text(sources[ids[1]].read_text() + "\n/* edited */\n")  # an input file
    entry.main("build", smk)
    assert "results kept" not in capsys.readouterr().err


def test_a_failed_stage_is_recorded_and_not_kept(host_batch, capsys):
    smk, ids, sources, results = host_batch
    sources[ids[0]].write_text("this is not C\n")  # (both host stages are in this file)
    entry.main("build", smk)  # a failed build is the stage's problem: recorded, the job goes on
    status = json.loads((results / f"status/build/{ids[0]}.json").read_text())
    assert status["status"] == "failed" and status["log"].endswith(f"{ids[0]}.log")
    assert not (results / "reuse" / "build" / ids[0]).exists()
    entry.main("build", smk)
    assert f"{ids[0]}: failed in" in capsys.readouterr().err  # tried again, not kept


def test_a_sweep_batch_keeps_each_stage_rows_and_log_apart(lab, tmp_path, monkeypatch):
    """sweep.sweep_many: the points of several stages' sweeps in one supervisor (faked here: the points
    come back with a hang among them); each stage gets its own rows in order, its log and its verdict,
    and a stage whose planning failed is that stage's failure alone."""
    from sgemm_lab.errors import CompileError
    from sgemm_lab.measure import isolate
    from sgemm_lab.measure.isolate import Outcome
    from sgemm_lab.pipeline import sweep as sweep_step

    def plan(cfg, kernel, env_json, say):
        if kernel == "c":
            raise CompileError("kernel c: nvcc failed")
        say("[sweep %s] planned", kernel)
        filtered = [dict(kernel=kernel, params=f"{kernel}-f", status="filtered", reason="too much shared memory")]
        return filtered, [(dict(kernel=kernel, params=f"{kernel}{i}"), (f"{kernel}{i}", b"cubin")) for i in range(2)]

    def run_split(points, gates, *, factory, args, timeout_s, log=None, on_outcome=None):
        assert factory.__name__ == "sweep_batch_worker" and [p[0] for p in points] == ["a", "a", "b", "b"]
        outs = [Outcome(i, p, "timeout", message="no result after 3 s (watchdog)") if p[1] == "a1" else
                Outcome(i, p, "ok", rows=[dict(status="ok", verified=True, tflops=1.0, registers=32, local_bytes=0)])
                for i, p in enumerate(points)]
        for o in outs:
            on_outcome(o)
        return outs

    monkeypatch.setattr(sweep_step, "_plan", plan)
    monkeypatch.setattr(isolate, "run_split", run_split)
    monkeypatch.setattr(sweep_step, "child_gates", lambda exclusive: [None])
    parts = [(k, tmp_path / f"{k}.csv", tmp_path / f"{k}.log") for k in ("a", "b", "c")]
    got = sweep_step.sweep_many(lab, parts, env_json=tmp_path / "env.json")
    assert isinstance(got["c"][0], CompileError) and not (tmp_path / "c.csv").exists()
    assert got["b"][0] is None and got["a"][0].status == "failed" and "TIMEOUT" in got["a"][0].message
    import pandas as pd

    a, b = pd.read_csv(tmp_path / "a.csv"), pd.read_csv(tmp_path / "b.csv")
    assert list(a.params) == ["a-f", "a0", "a1"] and list(a.status) == ["filtered", "ok", "timeout"]
    assert list(b.params) == ["b-f", "b0", "b1"] and list(b.status) == ["filtered", "ok", "ok"]
    log_a, log_b = (tmp_path / "a.log").read_text(), (tmp_path / "b.log").read_text()
    assert "[sweep a] a1 (2/2): TIMEOUT" in log_a and "[sweep b]" not in log_a
    assert "[sweep b] b1 (2/2): 1.00 TFLOP/s" in log_b and "[sweep a]" not in log_b


def test_a_batch_worker_makes_each_stage_worker_once_in_order():
    from sgemm_lab.measure.isolate import per_stage

    made = []

    def make(stage):
        made.append(stage)
        return lambda point: [(stage, *point)]

    work = per_stage(make)
    got = [work(p) for p in [("a", 1), ("a", 2), ("b", 1), ("b", 2), ("b", 3)]]
    assert made == ["a", "b"] and got[3] == [("b", 2)]
