"""Measurements nobody else disturbs: around every timed point the driver (NVML, simulated here by
``fake_nvml``) is asked which other processes hold the GPU and how busy they kept it; a point that
shared its GPU is timed again, then recorded as ``disturbed``, never as a clean median."""

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from fake_nvml import FakeGpu, FakeNvml, install
from sgemm_lab.measure import foreign, processes

ME = os.getpid()
MiB = 2**20
# PIDs no process of this machine can have (above the kernel's limit): /proc gives them no name
_MAX = int(Path("/proc/sys/kernel/pid_max").read_text())
P1, P2, P3 = _MAX + 1, _MAX + 2, _MAX + 3


@pytest.fixture(autouse=True)
def no_pause(monkeypatch):
    monkeypatch.setattr(foreign, "RETRY_PAUSE_S", 0.0)


def _watch(monkeypatch, fake):
    install(monkeypatch, fake)
    return foreign.Watch.on("0000:01:00.0")


def _now_us() -> int:
    return int(time.time() * 1e6)


def _binding(**calls):
    """A stand-in for cuda.bindings.nvml's functions and errors (its structures are the real ones)."""
    from types import SimpleNamespace

    import cuda.bindings.nvml as real

    class NvmlError(Exception):
        pass

    class NotFoundError(NvmlError):
        pass

    class InsufficientSizeError(NvmlError):
        pass

    return SimpleNamespace(NvmlError=NvmlError, NotFoundError=NotFoundError, InsufficientSizeError=InsufficientSizeError,
                           ClockType=real.ClockType, **calls), real


def test_the_adapter_reads_the_binding_s_structures_and_turns_its_errors_into_no_answer():
    """gpu.nvml.Nvml on the binding's own structure arrays: used bytes the driver cannot give become
    None, samples older than asked are dropped, a list the driver refuses is None, no sample is []."""
    import numpy as np

    from sgemm_lab.gpu.nvml import VALUE_NOT_AVAILABLE, Nvml

    fake, real = _binding()
    infos = real.ProcessInfo(2)
    infos.pid = np.array([11, 12])
    infos.used_gpu_memory = np.array([5 * MiB, VALUE_NOT_AVAILABLE], dtype=np.uint64)

    def refuse(*args):
        raise fake.NvmlError("not supported")

    fake.device_get_compute_running_processes_v3 = lambda h: infos
    fake.device_get_mps_compute_running_processes_v3 = lambda h: real.ProcessInfo(0)
    fake.device_get_graphics_running_processes_v3 = refuse
    fake.system_get_process_name = lambda pid: "/usr/bin/python3" if pid == 11 else refuse()
    fake.device_get_clock_info = lambda h, clock: 1980 if clock == real.ClockType.SM else 0
    fake.device_get_handle_by_pci_bus_id_v2 = refuse
    now = _now_us()
    sampled = real.ProcessUtilizationInfo_v1(2)
    sampled.pid, sampled.sm_util = np.array([11, 12]), np.array([40, 9])
    sampled.time_stamp = np.array([now - 5_000_000, now - 1_000_000], dtype=np.uint64)
    info = real.ProcessesUtilizationInfo_v1()
    info.proc_util_array = sampled
    fake.device_get_processes_utilization_info = lambda h, since: info if since == now - 2_000_000 else refuse()
    lib = Nvml(fake)
    assert lib.processes(1, "compute") == [(11, 5 * MiB), (12, None)]
    assert lib.processes(1, "mps") == [] and lib.processes(1, "graphics") is None
    assert lib.utilisation(1, now - 2_000_000) == [(12, 9)] and lib.utilisation(1, 0) is None
    assert lib.process_name(11) == "python3" and lib.process_name(12) is None
    assert lib.sm_clock(1) == 1980 and lib.handle_by_pci("0000:01:00.0") is None


def test_utilisation_keeps_only_entries_that_can_be_samples_of_the_window():
    """Entries later than asked, not from the future, at most 100% SM; no sample is [], a list that grew
    between the driver's sizing and filling is asked for again, a binding without the call gives None."""
    import numpy as np
    import cuda.bindings.nvml as real

    from sgemm_lab.gpu.nvml import Nvml, samples

    now = _now_us()
    e = real.ProcessUtilizationInfo_v1(4)  # (pid, time stamp, SM %): one older than asked, two made up
    e.pid = np.array([11, 12, 33620068, 13])
    e.time_stamp = np.array([now - 10, now - 900, now - 20, now + 3_600_000_000], dtype=np.uint64)
    e.sm_util = np.array([7, 9, 2037543968, 5])
    assert samples(e, now - 500, now) == [(11, 7)]
    assert samples([], now - 500, now) == []

    asked = []

    def grows(handle, since):
        asked.append(since)
        if len(asked) == 1:
            raise fake.InsufficientSizeError("a process started")
        info = real.ProcessesUtilizationInfo_v1()
        info.proc_util_array = e
        return info

    fake, _ = _binding(device_get_processes_utilization_info=grows)
    assert Nvml(fake).utilisation(1, now - 500) == [(11, 7)] and asked == [now - 500] * 2

    def quiet(handle, since):
        raise fake.NotFoundError("no sample")

    fake.device_get_processes_utilization_info = quiet
    assert Nvml(fake).utilisation(1, now) == []
    del fake.device_get_processes_utilization_info
    assert Nvml(fake).utilisation(1, now) is None


def test_without_a_driver_there_is_no_nvml(monkeypatch):
    """cuda-bindings raises a RuntimeError where the driver's library is missing: nvml() is None."""
    import cuda.bindings.nvml as real

    from sgemm_lab.gpu import nvml as nvml_mod

    def missing():
        raise RuntimeError('"nvml" is an NVIDIA driver library and can only be found via system search')

    monkeypatch.setattr(real, "init_v2", missing)
    monkeypatch.setattr(nvml_mod, "_lib", None)
    assert nvml_mod.nvml() is None


def test_a_point_alone_on_its_gpu_is_clean_at_the_first_try(monkeypatch):
    gpu = FakeGpu("GPU-aaaa", compute=[(ME, 300 * MiB)], samples=[(ME, _now_us() + 10**6, 99)])
    tries = []
    watch = _watch(monkeypatch, FakeNvml([gpu]))
    result, text, disturbed = foreign.undisturbed(lambda: tries.append(1) or "timing", watch)
    assert (result, text, disturbed) == ("timing", "none", False) and len(tries) == 1


def test_another_process_on_the_gpu_disturbs_every_try(monkeypatch):
    gpu = FakeGpu("GPU-aaaa", compute=[(ME, 300 * MiB)])
    fake = FakeNvml([gpu], names={P1: "/usr/bin/python3"})
    tries = []

    def measure():  # another program starts on the GPU while the first try runs, and stays
        tries.append(len(tries) + 1)
        if (P1, 812 * MiB) not in gpu.compute:
            gpu.compute.append((P1, 812 * MiB))
            gpu.samples.append((P1, _now_us() + 10**6, 97))
        return tries[-1]

    result, text, disturbed = foreign.undisturbed(measure, _watch(monkeypatch, fake))
    assert disturbed and tries == [1, 2, 3] and result == 3  # RETRIES more, the last one's timing kept
    assert text.startswith(f"all 3 tries disturbed; last: pid {P1} python3 (compute; 812 MiB; before, after; SM 97%)")


def test_a_short_burst_of_other_work_is_waited_out(monkeypatch):
    gpu = FakeGpu("GPU-aaaa", compute=[(ME, 300 * MiB), (P2, 100 * MiB)])
    monkeypatch.setattr(foreign, "LOOKBACK_S", 0.0)  # (its samples in the first try only)
    monkeypatch.setattr(foreign, "RETRY_PAUSE_S", 0.01)

    def measure():
        if len(gpu.compute) > 1:  # the other process ends during the first try
            gpu.samples.append((P2, _now_us(), 60))
            gpu.compute[:] = [(ME, 300 * MiB)]
        return "t"

    result, text, disturbed = foreign.undisturbed(measure, _watch(monkeypatch, FakeNvml([gpu])))
    assert not disturbed
    assert text == f"none; clean on try 2 of 3, after: pid {P2} (compute; 100 MiB; before; SM 60%)"


def test_an_idle_context_beside_the_point_is_seen_but_no_disturbance(monkeypatch):
    """A process that holds a context but ran nothing on the SMs from LOOKBACK_S before the point to its
    end shares the GPU's memory, not its time: written down, not a disturbance; once it runs kernels, it
    disturbs."""
    gpu = FakeGpu("GPU-aaaa", compute=[(ME, 300 * MiB), (P2, 518 * MiB)],
                  samples=[(ME, _now_us() + 10**6, 99), (P2, _now_us() + 10**6, 0)])
    fake = FakeNvml([gpu], names={P2: "python3"})
    tries = []
    _, text, disturbed = foreign.undisturbed(lambda: tries.append(1), _watch(monkeypatch, fake))
    assert not disturbed and len(tries) == 1
    assert text == f"none busy; seen idle: pid {P2} python3 (compute; 518 MiB; before, after; SM 0%)"
    gpu.samples.append((P2, _now_us() - int(foreign.LOOKBACK_S * 1e6 / 2), 12))  # busy just before the point
    _, text, disturbed = foreign.undisturbed(lambda: 0, _watch(monkeypatch, fake), retries=0)
    assert disturbed and text.endswith(f"pid {P2} python3 (compute; 518 MiB; before, after; SM 12%)")
    gpu.samples[-1] = (P2, _now_us() - int(foreign.LOOKBACK_S * 1e6 * 2), 12)  # long before: not its business
    assert not foreign.undisturbed(lambda: 0, _watch(monkeypatch, fake), retries=0)[2]


@pytest.mark.parametrize("how", ["appeared during the point", "never sampled"])
def test_a_context_that_cannot_be_told_idle_disturbs(monkeypatch, how):
    """Idle needs evidence: there before and after, and sampled at 0% SM. A process that appeared during
    the point (its first kernels may not be sampled yet) or has no sample in the window disturbs it."""
    gpu = FakeGpu("GPU-aaaa", compute=[(ME, 300 * MiB)] + ([(P2, 518 * MiB)] if how == "never sampled" else []))
    watch = _watch(monkeypatch, FakeNvml([gpu]))

    def measure():
        if how == "appeared during the point":
            gpu.compute.append((P2, 518 * MiB))
            gpu.samples.append((P2, _now_us() + 10**6, 0))

    _, text, disturbed = foreign.undisturbed(measure, watch, retries=0)
    assert disturbed and f"pid {P2} (compute; 518 MiB; " in text


def test_without_per_process_samples_a_listed_process_still_disturbs(monkeypatch):
    """Idle can only be told from the driver's samples: without them a listed process counts."""
    gpu = FakeGpu("GPU-aaaa", compute=[(ME, 1), (P2, 518 * MiB)])
    _, text, disturbed = foreign.undisturbed(lambda: 0, _watch(monkeypatch, FakeNvml([gpu], utilization=False)),
                                             retries=0)
    assert disturbed and f"pid {P2} (compute; 518 MiB; before, after)" in text


def test_work_that_came_and_went_within_the_point_is_seen_in_the_samples(monkeypatch):
    gpu = FakeGpu("GPU-aaaa", compute=[(ME, 300 * MiB)],
                  samples=[(P3, _now_us() - 10**7, 80)])  # before the point: not its business

    def measure():
        gpu.samples.append((P3, _now_us() + 10**6, 45))
        return "t"

    _, text, disturbed = foreign.undisturbed(measure, _watch(monkeypatch, FakeNvml([gpu])), retries=0)
    assert disturbed and text == f"the one try disturbed: pid {P3} (not listed before or after; SM 45%)"


def test_an_idle_sample_of_a_process_no_longer_there_is_no_disturbance(monkeypatch):
    gpu = FakeGpu("GPU-aaaa", compute=[(ME, 1)], samples=[(P3, _now_us() + 10**6, 0)])
    _, text, disturbed = foreign.undisturbed(lambda: 0, _watch(monkeypatch, FakeNvml([gpu])))
    assert not disturbed and text == "none"


def test_the_pipelines_own_processes_are_not_foreign_but_an_orphan_is(monkeypatch, tmp_path):
    """This process's parent (the step) and its children (a helper it started) are its own; a process
    that left the family (double fork) is someone else's, wherever it came from."""
    if os.getpid() == 1:  # pytest as a container's first process (as docker/test.sh runs it)
        pytest.skip("this process is its PID namespace's init: an orphan is reparented to it, so it is its own")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pidfile = tmp_path / "orphan"
    subprocess.run([sys.executable, "-c",
                    "import os, sys, time\n"
                    "if os.fork() == 0:\n"
                    f"    open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)\n"
                    "os._exit(0)"], check=True)
    while not pidfile.exists() or not pidfile.read_text():
        time.sleep(0.01)
    orphan = int(pidfile.read_text())
    try:
        own = processes.own_pids()
        assert {ME, os.getppid(), child.pid} <= own and orphan not in own
        gpu = FakeGpu("GPU-aaaa", compute=[(ME, 1), (os.getppid(), 1), (child.pid, 1)])
        assert foreign.undisturbed(lambda: 0, _watch(monkeypatch, FakeNvml([gpu])))[1:] == ("none", False)
        gpu.compute.append((orphan, 1))
        gpu.samples.append((orphan, _now_us() + 10**6, 30))
        _, text, disturbed = foreign.undisturbed(lambda: 0, _watch(monkeypatch, FakeNvml([gpu])), retries=0)
        assert disturbed and f"pid {orphan} python" in text  # its name from /proc: the PIDs are ours
    finally:
        child.kill()
        child.wait()
        os.kill(orphan, 9)


def test_in_another_pid_namespace_this_process_is_the_one_that_appeared_with_its_cuda(monkeypatch):
    """NVML lists host PIDs in a container: this process is not found by its own PID, but as the entry
    that was not there before it started CUDA; another entry is foreign."""
    gpu = FakeGpu("GPU-aaaa", compute=[(90001, 5)], samples=[(90001, _now_us() + 10**6, 40)])  # someone else's
    fake = FakeNvml([gpu])
    install(monkeypatch, fake)
    foreign.note_before_cuda()
    gpu.compute.append((90077, 300 * MiB))  # this process, after its CUDA started
    watch = foreign.Watch.on("0000:01:00.0")
    _, text, disturbed = foreign.undisturbed(lambda: 0, watch, retries=0)
    assert disturbed and "pid 90001 (compute; 0 MiB; before, after; SM 40%)" in text and "pid 90077 (" not in text
    assert "(this process is pid 90077 to NVML)" in text
    gpu.compute.remove((90001, 5))
    gpu.samples.clear()
    assert foreign.undisturbed(lambda: 0, watch)[1:] == ("none (this process is pid 90077 to NVML)", False)


def test_in_another_pid_namespace_without_a_first_look_more_than_one_entry_is_disturbed(monkeypatch):
    gpu = FakeGpu("GPU-aaaa", compute=[(90077, 300 * MiB)])
    watch = _watch(monkeypatch, FakeNvml([gpu]))
    _, text, disturbed = foreign.undisturbed(lambda: 0, watch)
    assert not disturbed and text == "none (this process taken as the one listed, pid 90077 to NVML)"
    gpu.compute.append((90001, 5))
    gpu.samples.append((90077, _now_us() + 10**6, 90))  # this one's own kernels, which it cannot tell apart
    _, text, disturbed = foreign.undisturbed(lambda: 0, watch, retries=0)
    assert disturbed and "cannot be told apart" in text and "pid 90001" in text


@pytest.mark.parametrize("fake, why", [
    (None, "unchecked: no NVML"),
    (FakeNvml([FakeGpu("GPU-aaaa", bus_id="00000000:41:00.0")]), "unchecked: NVML knows no GPU at 0000:01:00.0"),
    (FakeNvml([FakeGpu("GPU-aaaa")]), "unchecked: NVML lists no process on this GPU, not even this one"),
    (FakeNvml([FakeGpu("GPU-aaaa")], lists=False), "unchecked: NVML cannot list the processes on this GPU"),
])
def test_where_nvml_cannot_tell_the_point_is_timed_once_and_says_unchecked(monkeypatch, fake, why):
    tries = []
    result, text, disturbed = foreign.undisturbed(lambda: tries.append(1) or "t", _watch(monkeypatch, fake))
    assert (result, text, disturbed, len(tries)) == ("t", why, False, 1)


def test_without_per_process_samples_the_process_lists_alone_decide(monkeypatch):
    """A driver that keeps no per-process utilisation: a listed foreign process cannot be told idle."""
    gpu = FakeGpu("GPU-aaaa", compute=[(ME, 1)] + [(P1 + 10 + i, 2 * MiB) for i in range(9)])
    fake = FakeNvml([gpu], utilization=False)
    _, text, disturbed = foreign.undisturbed(lambda: 0, _watch(monkeypatch, fake), retries=0)
    assert disturbed and all(f"pid {P1 + 10 + i} (compute; 2 MiB" in text for i in range(9))
    assert "process lists only: no per-process utilisation" in text


def test_graphics_and_mps_processes_count_too(monkeypatch):
    gpu = FakeGpu("GPU-aaaa", compute=[(ME, 1)], graphics=[(P2, 64 * MiB)], samples=[(P2, _now_us() + 10**6, 7)])
    fake = FakeNvml([gpu], names={P2: "Xorg"})
    _, text, disturbed = foreign.undisturbed(lambda: 0, _watch(monkeypatch, fake), retries=0)
    assert disturbed and f"pid {P2} Xorg (graphics; 64 MiB; before, after; SM 7%)" in text


def test_the_gpu_list_still_comes_from_nvml():
    """``devices.nvml`` is shared: visible GPUs are read through it as before."""
    from sgemm_lab.gpu import discovery as devices

    mp = pytest.MonkeyPatch()
    try:
        install(mp, FakeNvml([FakeGpu("GPU-aaaa"), FakeGpu("GPU-bbbb", bus_id="00000000:02:00.0")]))
        mp.setenv("CUDA_VISIBLE_DEVICES", "1")
        assert devices.visible_gpus() == [devices.Gpu(1, "GPU-bbbb")]
    finally:
        mp.undo()


# ------------------------------------------------------------------------------- the bench row
def _gpu_runner(lab, monkeypatch, timings):
    """A GpuRunner whose GPU is simulated: verification passes, each timing is the next of ``timings``
    (a callable run by the timing, e.g. to start another process)."""
    from sgemm_lab.gpu import buffers, device, reference, timing
    from sgemm_lab.measure import runners
    from sgemm_lab.results.stats import summarize

    class Mem:
        def free(self):
            pass

    class Check:
        def __init__(self, stream):
            pass

        def fill(self, *a):
            pass

        def references(self, bufs, alpha, beta):
            return (Mem(), Mem())

        def compare(self, *a):
            return SimpleNamespace(passed=True, rel_err=1e-7, max_abs_err=1e-6, reason="")

    class Buffers:
        a = b = c = None

        def __init__(self, shape):
            pass

        def poison_c(self):
            pass

        def free(self):
            pass

    calls = []

    def time_launches(run, stream, **kw):
        calls.append(kw["pci_bus_id"])
        timings[len(calls) - 1]()
        ms = float(len(calls))
        return timing.Timing(stats=summarize([ms] * 5), warmup_s=0.1, warmup_launches=4, sm_clock_before_mhz=1980,
                             sm_clock_after_mhz=1980)

    cuda = SimpleNamespace(mem_alloc=lambda n: Mem(), memcpy_dtod_async=lambda *a: None, memcpy_dtod=lambda *a: None)
    monkeypatch.setattr(device, "driver", lambda: cuda)
    monkeypatch.setattr(reference, "DeviceCheck", Check)
    monkeypatch.setattr(buffers, "Buffers", Buffers)
    monkeypatch.setattr(timing, "time_launches", time_launches)
    r = runners.GpuRunner.__new__(runners.GpuRunner)
    r.cfg, r.impl, r.spec = lab, "cublas", None
    r.dev = SimpleNamespace(pci_bus_id="0000:01:00.0", name="Simulated GPU", l2_bytes=1 << 20)
    r.stream = SimpleNamespace(synchronize=lambda: None)
    r.launch = lambda *a: None
    r._flusher = r._ref = None
    return r, calls


def test_gpu_bench_times_again_and_records_what_it_saw(lab, monkeypatch):
    from sgemm_lab.config.records import Shape
    from sgemm_lab.measure.runners import TimingSettings

    gpu = FakeGpu("GPU-aaaa", compute=[(ME, 300 * MiB)])
    install(monkeypatch, FakeNvml([gpu]))
    timing = TimingSettings(warmup_ms=1, target_ms=1, min_reps=5, max_reps=5, l2_policy="none")

    def burst():  # a kernel of another process runs during the first try only
        gpu.samples.append((P1, _now_us() + 10**6, 50))

    def quiet():
        gpu.samples.clear()

    runner, calls = _gpu_runner(lab, monkeypatch, [burst, quiet])
    row = runner.bench(Shape(m=64, n=64, k=64), 1, timing)
    assert calls == ["0000:01:00.0"] * 2 and row["median_ms"] == 2.0  # the clean second try's timing
    assert not row["disturbed"]
    assert row["disturbance"] == f"none; clean on try 2 of 3, after: pid {P1} (not listed before or after; SM 50%)"

    def intruder():
        if (P2, MiB) not in gpu.compute:
            gpu.compute.append((P2, MiB))
            gpu.samples.append((P2, _now_us() + 10**6, 20))

    runner, calls = _gpu_runner(lab, monkeypatch, [intruder] * 3)
    row = runner.bench(Shape(m=64, n=64, k=64), 1, timing)
    assert len(calls) == 3 and row["disturbed"] and row["verified"] and row["median_ms"] == 3.0
    assert f"pid {P2} (compute; 1 MiB; before, after; SM 20%)" in row["disturbance"]  # the last try: there throughout
# ------------------------------------------------------------------------------ the point and step
def _point_rows(monkeypatch, cfg, bench_row: dict) -> list[dict]:
    """What point_worker's bench branch makes of a runner's row."""
    from sgemm_lab.pipeline import points

    class Runner:
        def skip_reason(self, shape, kind="bench"):
            return None

        def bench(self, shape, seed, timing):
            return dict(bench_row)

    monkeypatch.setattr(points, "runner_for", lambda *a: Runner())
    monkeypatch.setattr(foreign, "note_before_cuda", lambda: None)
    return points.point_worker(cfg, "cublas", None, None, "bench")(((64, 64, 64), 7))


def test_a_disturbed_point_is_never_an_ok_row(monkeypatch, lab):
    def row_of(**over) -> dict:
        (row,) = _point_rows(monkeypatch, lab,
                             {**dict(verified=True, reason="", median_ms=1.0, tflops=0.5), **over})
        return row

    row = row_of(disturbance="all 3 tries disturbed; last: pid 9 (compute)", disturbed=True)
    assert row["status"] == "disturbed" and row["median_ms"] == 1.0 and "disturbed" not in row
    assert row["reason"] == "other work on the GPU: all 3 tries disturbed; last: pid 9 (compute)"
    row = row_of(disturbance="none", disturbed=False)
    assert row["status"] == "ok" and row["disturbance"] == "none"
    row = row_of(verified=False, reason="beta: wrong", disturbance="x", disturbed=True)
    assert row["status"] == "failed" and row["reason"] == "beta: wrong"  # a wrong result stays a failure
    row = row_of()  # a host stage's row: timed on the CPU
    assert row["status"] == "ok" and row["disturbance"] == "n/a (CPU timing)"


def test_disturbed_points_leave_the_step_ok_but_counted(tmp_path, monkeypatch, caplog, raw_config):
    from sgemm_lab.config import load as cfgmod
    from sgemm_lab.pipeline import points
    from sgemm_lab.results.outcome import FAILED, OK

    raw = raw_config
    cfg = cfgmod.from_dict(raw)
    ok = dict(kernel="cublas", m=64, n=64, k=64, status="ok", verified=True, median_ms=0.5, tflops=1.0,
              disturbance="none")
    bad = dict(ok, m=128, n=128, k=128, status="disturbed", reason="other work on the GPU: pid 9",
               disturbance="all 3 tries disturbed; last: pid 9 (compute; 5 MiB; before, after)")
    monkeypatch.setattr(points, "_isolated_points", lambda *a, **kw: [ok, bad])
    out = tmp_path / "bench.csv"
    status = points.bench(cfg, "cublas", binary=None, record=None, out=out, gpu="exclusive")
    df = pd.read_csv(out)
    assert list(df.status) == ["ok", "disturbed"] and list(df.disturbance)[0] == "none"
    assert df.median_ms[1] == 0.5  # kept for inspection
    assert status.status == OK and status.message.startswith("1 of 2 shapes disturbed by other work on the GPU")
    assert "pid 9 (compute; 5 MiB" in status.message
    assert any("disturbed" in r.message and r.levelname == "WARNING" for r in caplog.records)

    failed = dict(ok, status="failed", verified=False, reason="beta: relative error 1")
    monkeypatch.setattr(points, "_isolated_points", lambda *a, **kw: [failed, bad])
    status = points.bench(cfg, "cublas", binary=None, record=None, out=out, gpu="exclusive")
    assert status.status == FAILED and status.message.startswith("NOT VERIFIED at 64x64x64: beta: relative error 1")
    assert "; and 1 of 2 shapes disturbed" in status.message and "+1 more" not in status.message


def test_the_log_line_says_what_was_seen_only_when_it_matters():
    assert foreign.log_note(dict(status="ok", disturbance="none")) == ""
    assert foreign.log_note(dict(status="ok", disturbance="n/a (CPU timing)")) == ""
    assert foreign.log_note(dict(status="ok", disturbance="none (this process is pid 5 to NVML)")) == ""
    assert foreign.log_note(dict(status="ok", disturbance="unchecked: no NVML")) == \
        " [other work on the GPU not checked: no NVML]"
    assert "DISTURBED" in foreign.log_note(dict(status="disturbed", disturbance="pid 9"))
    assert foreign.log_note(dict(status="ok", disturbance="none; clean on try 2 of 3, after: pid 9")) == \
        " [none; clean on try 2 of 3, after: pid 9]"


def test_a_job_of_the_same_run_is_named_as_such(tmp_path):
    """``run_pids``: every descendant of the outermost Snakemake process above a point is of its run; a
    process outside that tree is not."""
    fake_smk = tmp_path / "snakemake"  # a command named like Snakemake's, which starts two "jobs"
    fake_smk.write_text("import subprocess, sys, time\n"
                        "jobs = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']) for _ in range(2)]\n"
                        f"open({str(tmp_path / 'pids')!r}, 'w').write(' '.join(str(j.pid) for j in jobs))\n"
                        "time.sleep(60)\n")
    root = subprocess.Popen([sys.executable, str(fake_smk)])
    try:
        while not (tmp_path / "pids").exists() or not (tmp_path / "pids").read_text():
            time.sleep(0.01)
        a, b = map(int, (tmp_path / "pids").read_text().split())
        run = processes.run_pids(a)
        assert {root.pid, a, b} <= run and ME not in run
        assert processes.run_pids(ME) == set() or root.pid not in processes.run_pids(ME)
    finally:
        if (tmp_path / "pids").exists():
            for pid in map(int, (tmp_path / "pids").read_text().split()):
                os.kill(pid, 9)
        root.kill()
        root.wait()
