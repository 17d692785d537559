"""Profiling: ncu's raw CSV into tidy rows, and 'unavailable' instead of a failure when ncu cannot run."""

import os
import stat

import pandas as pd
import pytest

from sgemm_lab.config.records import Shape
from sgemm_lab.profiling import ncu as profile
from sgemm_lab.profiling import step as profile_step

RAW = ('"ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum","launch__registers_per_thread",'
       '"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"\n'
       '"","","ns","byte","register/thread","inst"\n'
       '"0","sgemm_x","1234","1,048,576","128","0.25"\n'
       '"1","sgemm_x","98765","67,108,864","128","0.5"\n')


BIG, SMALL = Shape(m=4096, n=4096, k=4096), Shape(m=1024, n=1024, k=1024)


def _item(impl, entry, *shapes):
    return profile.ProfileItem(impl=impl, entry=entry, shapes=tuple(shapes))


def test_tidy_from_raw_csv():
    df = profile.tidy(RAW, items=[_item("x", "sgemm_x", SMALL, BIG)])
    assert set(df.metric) == {"duration", "dram_bytes_read", "registers_per_thread", "stall_barrier"}
    big = df[df.m == 4096].set_index("metric")
    assert big.loc["dram_bytes_read", "value"] == 67108864 and big.loc["duration", "unit"] == "ns"
    with pytest.raises(Exception, match="expected 3"):
        profile.tidy(RAW, items=[_item("x", "sgemm_x", SMALL, BIG, SMALL)])


def test_launches_are_attributed_in_order_and_checked_by_name():
    raw = RAW.replace('"1","sgemm_x"', '"1","sm90_xmma_gemm_f32f32_nn"')
    items = [_item("x", "sgemm_x", BIG), _item("cublas", None, BIG)]
    df = profile.tidy(raw, items=items)
    assert df.groupby("kernel").ncu_kernel.first().to_dict() == {"x": "sgemm_x", "cublas": "sm90_xmma_gemm_f32f32_nn"}
    assert df[df.kernel == "cublas"].set_index("metric").loc["duration", "value"] == 98765
    with pytest.raises(Exception, match="launch 0 is sgemm_x, expected a cuBLAS gemm or gemv kernel for cublas"):
        profile.tidy(raw, items=items[::-1])
    with pytest.raises(Exception, match="launch 1 is sgemm_x, expected sgemm_y"):
        profile.tidy(RAW, items=[_item("x", "sgemm_x", BIG), _item("y", "sgemm_y", BIG)])
    # a few-row output on which cuBLAS runs a matrix-vector kernel is still cuBLAS's launch
    gemv = RAW.replace('"1","sgemm_x"', '"1","gemv2T_kernel_val"')
    assert profile.tidy(gemv, items=items).groupby("kernel").ncu_kernel.first()["cublas"] == "gemv2T_kernel_val"


def test_kernel_regex_names_every_entry_and_cublas():
    items = [_item("a", "sgemm_b", BIG), _item("c", "sgemm_a", BIG), _item("d", "sgemm_a", BIG)]
    assert profile.kernel_regex(items) == "regex:^(sgemm_a|sgemm_b)$"
    assert profile.kernel_regex(items + [_item("cublas", None, BIG)]) == "regex:^(sgemm_a|sgemm_b)$|gemm|gemv"
    assert profile.kernel_regex([_item("cublas", None, BIG)]) == "regex:gemm|gemv"
    # items named without shapes (tools/ncu_probe.sh builds the regex so): their entries still
    assert profile.kernel_regex([_item("a", "sgemm_b"), _item("cublas", None)]) == "regex:^(sgemm_b)$|gemm|gemv"
    assert [(i.impl, s, e) for i, s, e in profile.launches([_item("a", "e", SMALL, BIG), _item("b", "f", BIG)])] == \
        [("a", SMALL, "e"), ("a", BIG, "e"), ("b", BIG, "f")]


def test_every_kernel_of_a_stage_of_several_is_profiled_and_marked_by_its_phase():
    """A stage of several kernels: each call's launches in launch order, every entry in the regex, the main
    kernel's rows as any stage's (no phase), the others' marked with their entry; out of order, nothing."""
    staged = profile.ProfileItem(impl="s", entry="main_k", shapes=(BIG,), kernels=(("prep_k", "main_k", "post_k"),))
    items = [_item("x", "sgemm_x", BIG), staged, _item("cublas", None, BIG)]
    assert profile.kernel_regex(items) == "regex:^(main_k|post_k|prep_k|sgemm_x)$|gemm|gemv"
    assert [(i.impl, e) for i, _, e in profile.launches(items)] == \
        [("x", "sgemm_x"), ("s", "prep_k"), ("s", "main_k"), ("s", "post_k"), ("cublas", None)]
    names = ["sgemm_x", "prep_k", "main_k", "post_k", "sm90_xmma_gemm_f32f32_nn"]
    raw = RAW.split("\n")[:2] + [f'"{i}","{n}","{100 * (i + 1)}","1,024","64","0.5"' for i, n in enumerate(names)]
    df = profile.tidy("\n".join(raw) + "\n", items=items)
    dur = df[df.metric == "duration"].set_index(["kernel", "phase"]).value
    assert dur.to_dict() == {("x", ""): 100, ("s", "prep_k"): 200, ("s", ""): 300, ("s", "post_k"): 400, ("cublas", ""): 500}
    swapped = raw[:3] + [raw[4], raw[3]] + raw[5:]
    with pytest.raises(Exception, match="launch 1 is main_k, expected prep_k for s"):
        profile.tidy("\n".join(swapped) + "\n", items=items)


def test_a_phase_launched_at_some_shapes_only_is_expected_there_only():
    """A phase with a `when` (a split-K sum) launches at some shapes: the launches ncu is told to expect
    follow each shape's own list, and a launch list that leaves it out where it ran is refused."""
    staged = profile.ProfileItem(impl="s", entry="main_k", shapes=(SMALL, BIG),
                                 kernels=(("prep_k", "main_k", "sum_k"), ("prep_k", "main_k")))
    assert profile.kernel_regex([staged]) == "regex:^(main_k|prep_k|sum_k)$"
    assert [(s, e) for _, s, e in profile.launches([staged])] == \
        [(SMALL, "prep_k"), (SMALL, "main_k"), (SMALL, "sum_k"), (BIG, "prep_k"), (BIG, "main_k")]
    names = ["prep_k", "main_k", "sum_k", "prep_k", "main_k"]
    raw = RAW.split("\n")[:2] + [f'"{i}","{n}","{100 * (i + 1)}","1,024","64","0.5"' for i, n in enumerate(names)]
    df = profile.tidy("\n".join(raw) + "\n", items=[staged])
    dur = df[df.metric == "duration"].set_index(["m", "phase"]).value
    assert dur.to_dict() == {(SMALL.m, "prep_k"): 100, (SMALL.m, ""): 200, (SMALL.m, "sum_k"): 300,
                             (BIG.m, "prep_k"): 400, (BIG.m, ""): 500}
    every = profile.ProfileItem(impl="s", entry="main_k", shapes=(SMALL, BIG),
                                kernels=(("prep_k", "main_k", "sum_k"), ("prep_k", "main_k", "sum_k")))
    with pytest.raises(Exception, match="profiled 5 launches, expected 6"):
        profile.tidy("\n".join(raw) + "\n", items=[every])


def _profile(lab, tmp_path):
    """The profile step with cuBLAS only (no build needed) where ncu cannot profile."""
    out = tmp_path / "cublas.csv"
    status = profile_step.profile(lab, builds={"cublas": (None, None)}, outs={"cublas": out},
                           report=tmp_path / "ladder.ncu-rep")
    assert status.status == "unavailable" and status.message.startswith("profile: ")
    return pd.read_csv(out)


def test_failed_build_is_a_row_not_a_profile(lab, tmp_path, monkeypatch):
    from sgemm_lab.results import io

    monkeypatch.setattr(profile.shutil, "which", lambda name: None)
    kid = lab.gpu_implementations[0]
    rec = tmp_path / f"{kid}.json"
    io.write_json(rec, dict(kernel=kid, status="failed", message="nvcc failed: x.cu(3): error"))
    outs = {kid: tmp_path / f"{kid}.csv", "cublas": tmp_path / "cublas.csv"}
    status = profile_step.profile(lab, builds={kid: (tmp_path / "x.bin", rec), "cublas": (None, None)}, outs=outs,
                           report=tmp_path / "ladder.ncu-rep")
    assert status.status == "unavailable"
    failed = pd.read_csv(outs[kid])
    assert failed.status.str.startswith("not run: build failed: nvcc failed").all()
    assert (pd.read_csv(outs["cublas"]).status == "unavailable: ncu not found on PATH").all()


def test_missing_ncu_is_a_status_not_a_failure(lab, tmp_path, monkeypatch):
    monkeypatch.setattr(profile.shutil, "which", lambda name: None)
    df = _profile(lab, tmp_path)
    assert len(df) == len(lab.profile.shapes)
    assert (df.status == "unavailable: ncu not found on PATH").all()


def test_counter_permission_error_is_a_status(lab, tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "ncu"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    df = _profile(lab, tmp_path)
    assert df.status.str.startswith("unavailable: ERR_NVGPUCTRPERM").all()


def test_the_step_profiles_every_kernel_of_a_stage_of_several_and_keeps_their_rows_apart(lab, tmp_path, monkeypatch):
    """The profile step hands ncu every entry of a phased stage's call, in launch order, and writes their rows;
    read back as the report reads the run's table (the main kernel's empty phase comes back as NaN), the main
    kernel's rows are one a metric and shape, the other kernels' marked by their entry."""
    from sgemm_lab.report.stage_tables import split_phases
    from sgemm_lab.results import io

    stage = next(k for k in lab.kernels if k.geometry == "phases")
    seen = {}

    class Recorded:
        def __init__(self, *, items, **_):
            seen["items"] = items

        def start(self):
            return self

        def kill(self):
            pass

        def wait(self, timeout_s=None):
            return pd.DataFrame([dict(kernel=i.impl, m=s.m, n=s.n, k=s.k, metric="duration", value=1.0, unit="ns",
                                      ncu_metric="gpu__time_duration.sum", ncu_kernel=e, phase="" if e == i.entry else e)
                                 for i, s, e in profile.launches(seen["items"])])

    monkeypatch.setattr(profile, "Profiler", Recorded)
    monkeypatch.setattr(profile_step, "load_spec", lambda cfg, impl, record: cfg.kernel(impl))
    out = tmp_path / f"{stage.id}.csv"
    assert profile_step.profile(lab, builds={stage.id: (tmp_path / "s.bin", tmp_path / "s.json")}, outs={stage.id: out},
                                report=tmp_path / "ladder.ncu-rep") is None
    (item,) = seen["items"]
    entries = tuple(ph["entry"] for ph in stage.phases)
    assert item.entry == stage.entry and item.kernels == tuple(entries for _ in item.shapes) and len(entries) > 1
    main, phases = split_phases(io.read_table(out, required=("kernel", "metric", "value"), rows=False, what="a profile"))
    assert len(main) == len(item.shapes) and set(main.ncu_kernel) == {stage.entry}
    assert sorted(phases.phase.unique()) == sorted(e for e in entries if e != stage.entry)
