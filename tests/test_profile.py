"""Profiling: ncu's raw CSV into tidy rows, and 'unavailable' instead of a failure when ncu cannot run."""

import os
import stat

import pandas as pd
import pytest

from sgemm_lab import profile, steps
from sgemm_lab.config import Shape

RAW = ('"ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum","launch__registers_per_thread",'
       '"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"\n'
       '"","","ns","byte","register/thread","inst"\n'
       '"0","sgemm_x","1234","1,048,576","128","0.25"\n'
       '"1","sgemm_x","98765","67,108,864","128","0.5"\n')


def test_tidy_from_raw_csv():
    shapes = [Shape(m=1024, n=1024, k=1024), Shape(m=4096, n=4096, k=4096)]
    df = profile.tidy(RAW, kernel="x", shapes=shapes)
    assert set(df.metric) == {"duration", "dram_bytes_read", "registers_per_thread", "stall_barrier"}
    big = df[df.m == 4096].set_index("metric")
    assert big.loc["dram_bytes_read", "value"] == 67108864 and big.loc["duration", "unit"] == "ns"
    with pytest.raises(Exception, match="expected 3"):
        profile.tidy(RAW, kernel="x", shapes=shapes + [shapes[0]])


def _profile(lab, raw_config, tmp_path):
    """What the bench step does around its timing: start ncu, then read it back."""
    out = tmp_path / "cublas.csv"
    profiler = steps.start_profile(lab, "cublas", None, binary=None, record=None, raw_config=raw_config, out=out)
    status = steps.finish_profile(lab, "cublas", profiler, out=out)
    assert status.status == "unavailable" and status.message.startswith("profile: ")
    return pd.read_csv(out)


def test_missing_ncu_is_a_status_not_a_failure(lab, raw_config, tmp_path, monkeypatch):
    monkeypatch.setattr(profile.shutil, "which", lambda name: None)
    df = _profile(lab, raw_config, tmp_path)
    assert len(df) == len(lab.profile.shapes)
    assert (df.status == "unavailable: ncu not found on PATH").all()


def test_counter_permission_error_is_a_status(lab, raw_config, tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "ncu"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    df = _profile(lab, raw_config, tmp_path)
    assert df.status.str.startswith("unavailable: ERR_NVGPUCTRPERM").all()
