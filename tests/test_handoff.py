"""The run's configuration crosses to child processes as itself: a LabConfig pickles whole (its read-only
mappings too), and the file handed to a target started as a command reads back as the same object."""

import pickle

import pytest

from sgemm_lab.config import handoff
from sgemm_lab.config.records import FrozenMap, frozen
from sgemm_lab.errors import ConfigError


def test_a_lab_config_pickles_to_an_equal_one(lab):
    back = pickle.loads(pickle.dumps(lab))
    assert back == lab and back is not lab
    spec = next(k for k in back.kernels if k.params)
    assert isinstance(spec.params, FrozenMap) and dict(spec.params) == dict(lab.kernel(spec.id).params)


def test_a_changed_config_crosses_with_its_change(lab):
    """What a child receives is the object the step holds, not the dict it was first made from."""
    from dataclasses import replace

    changed = replace(lab, run="elsewhere", kernels=lab.kernels[:2])
    back = pickle.loads(pickle.dumps(changed))
    assert back.run == "elsewhere" and [k.id for k in back.kernels] == [k.id for k in lab.kernels[:2]]


def test_frozen_mappings_refuse_changes_and_merge_into_dicts():
    m = frozen({"BM": 64, "BN": 128})
    with pytest.raises(TypeError):
        m["BM"] = 32
    with pytest.raises(AttributeError):
        m.extra = 1
    assert m | {"BM": 32} == {"BM": 32, "BN": 128} and {"BK": 8} | m == {"BK": 8, "BM": 64, "BN": 128}
    assert m == {"BM": 64, "BN": 128} and repr(m) == "{'BM': 64, 'BN': 128}"
    assert pickle.loads(pickle.dumps(m)) == m


def test_the_handoff_file_reads_back_as_the_same_config(lab, tmp_path):
    path = handoff.write(lab, tmp_path / "profile" / "ladder.config.pickle")
    assert handoff.read(path) == lab
    assert not list(path.parent.glob(".*.tmp"))


def test_a_file_that_is_not_a_config_is_one_line_naming_it(tmp_path):
    other = tmp_path / "other.pickle"
    other.write_bytes(pickle.dumps({"run": "x"}))
    with pytest.raises(ConfigError, match="other.pickle: holds a dict, not the run's configuration"):
        handoff.read(other)
    cut = tmp_path / "cut.pickle"
    cut.write_bytes(b"\x80\x05garbage")
    with pytest.raises(ConfigError, match="cut.pickle: not a configuration written by the pipeline"):
        handoff.read(cut)
    with pytest.raises(ConfigError, match="missing.pickle"):
        handoff.read(tmp_path / "missing.pickle")


def test_the_profiler_hands_its_target_the_config_it_was_given(lab, tmp_path, monkeypatch, capsys):
    """The profile step's ncu command names a config file that holds the step's own LabConfig, and the
    profiled process reads it (here ncu is a stand-in that records its command and exits)."""
    import logging
    import sys
    from dataclasses import replace

    from sgemm_lab.config.records import Shape
    from sgemm_lab.errors import LabError
    from sgemm_lab.profiling import ncu, target

    argv = tmp_path / "argv.txt"
    fake = tmp_path / "ncu"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv}\n')
    fake.chmod(0o755)
    monkeypatch.setattr(ncu, "ncu_path", lambda: str(fake))
    mine = replace(lab, run="handed-over")
    item = ncu.ProfileItem(impl="cublas", entry=None, shapes=(Shape(m=64, n=64, k=64),))
    profiler = ncu.Profiler(items=[item], cfg=mine, report=tmp_path / "profile" / "ladder.ncu-rep",
                            log=logging.getLogger("test"))
    with pytest.raises(LabError, match="unavailable: ncu exited"):  # the stand-in wrote no report
        profiler.start().wait(timeout_s=60)
    args = argv.read_text().splitlines()
    assert args[args.index("-m") - 1] == sys.executable and args[args.index("-m") + 1] == "sgemm_lab.profiling.target"
    path = args[args.index("--config") + 1]
    assert handoff.read(path) == mine and handoff.read(path).run == "handed-over"
    with pytest.raises(SystemExit) as stop:  # read, then refused for want of a plan: nothing reaches the GPU
        target.main(["--config", path])
    assert stop.value.code == 2 and "give --plan, or --impl with --shapes" in capsys.readouterr().err


def test_a_spawned_point_process_receives_the_config_object(lab):
    """Several GPUs spawn the point processes (fresh interpreters), so the LabConfig crosses pickled: a
    NumPy bench point, timed on the CPU in such a child, comes back measured."""
    from sgemm_lab.measure import isolate
    from sgemm_lab.pipeline import points

    (out,) = list(isolate.run([((48, 40, 56), 7)], factory=points.point_worker,
                              args=(lab, "numpy", None, None, "bench"), timeout_s=120, start_method="spawn"))
    assert out.status == "ok", out.message
    (row,) = out.rows
    assert row["status"] == "ok" and row["verified"] and (row["m"], row["n"], row["k"]) == (48, 40, 56)
