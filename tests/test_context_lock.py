"""No step is on the GPU outside its lock: a process that started a CUDA context keeps the lock it started
it under until it ends, and never waits for a lock with a context of its own.

The failure this guards against, as it happened on the H100 with the parallel default: the build job
took the shared lock for each stage in turn, loaded the stage's module (a CUDA context, about 518 MiB),
released the lock and went on to the next stage with the context still alive; a shape sweep then took
the exclusive lock, and every one of its points saw the build's idle context beside it ("60 of 60
points disturbed"). Here the real build step runs on simulated GPU parts (the driver, the module load,
the device query): the context is a file in a registry that a simulated NVML lists, and a timing
process checks, under the exclusive lock, who else is on the GPU.
"""

import multiprocessing as mp
import os
import time
from pathlib import Path

import pytest

from fake_nvml import FakeGpu, FakeNvml
from sgemm_lab.config import load as cfgmod
from sgemm_lab.errors import LabError
from sgemm_lab.gpu import device
from sgemm_lab.measure import foreign, gpulock, lockfiles


class RegistryNvml(FakeNvml):
    """A simulated driver whose compute processes are those that hold a context: a file of the registry
    folder open, as a real process holds the driver's device files (a process that ends closes them
    with its other files, in the order of their numbers)."""

    def __init__(self, registry: Path):
        super().__init__([FakeGpu("GPU-aaaa")])
        self.registry = registry

    def processes(self, handle, kind):
        if kind == "compute":
            self._gpu(handle).compute = [(pid, 518 * 2**20) for pid in _holders(self.registry)]
        return super().processes(handle, kind)


def _holders(registry: Path) -> list[int]:
    """The processes with a file of ``registry`` open."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(fd)
            except OSError:  # closed meanwhile (the listing's own descriptor, say)
                continue
            if link.startswith(str(registry) + "/"):
                out.append(int(entry.name))
                break
    return out


def _start_context(registry: Path) -> None:
    """This process's context: a file of the registry held open until the process ends."""
    _OPEN.append(os.open(registry / str(os.getpid()), os.O_CREAT | os.O_RDWR))


_OPEN: list[int] = []


def _fake_gpu_parts(monkeypatch, registry: Path) -> None:
    """CUDA simulated: ``driver()`` starts this process's context (its file in the registry), a module
    load needs it, the device query answers an H100's limits."""
    from sgemm_lab.gpu import build as gpu_build, launch, sass
    from sgemm_lab.gpu.build import BuildRecord

    def driver():
        if device._cuda is None:
            _start_context(registry)
            device._cuda = object()
        return device._cuda

    class Launcher:
        def __init__(self, spec, cubin):
            driver()
            self.spec = spec

        def check_launchable(self, dev):
            pass

        def resources(self, arch, compile_s):
            return BuildRecord(kernel=self.spec.id, entry=self.spec.entry, arch=arch, options=[], registers=32,
                               shared_static_bytes=0, local_bytes=0, max_threads_per_block=1024,
                               compile_s=compile_s)

    monkeypatch.setattr(device, "driver", driver)
    monkeypatch.setattr(device, "device_info", lambda: driver() and None)
    monkeypatch.setattr(launch, "KernelLauncher", Launcher)
    monkeypatch.setattr(sass, "record", lambda binary, entry: {})
    monkeypatch.setattr(gpu_build, "compile_many",
                        lambda specs, arch, jobs, prebuilt=None, keep=False: [(b"cubin", None) for _ in specs])
    monkeypatch.setattr(device, "_cuda", None)


def _builder(raw: dict, stages: list[str], tmp: Path, compile_s: float) -> None:
    """The build job of several stages, one after the other, as a batch job runs them; each stage's
    compile (simulated) takes ``compile_s``."""
    from sgemm_lab.gpu import build as gpu_build
    from sgemm_lab.pipeline import build as build_step

    real = gpu_build.compile_many

    def slow(*a, **k):
        time.sleep(compile_s)
        return real(*a, **k)

    gpu_build.compile_many = slow
    cfg = cfgmod.from_dict(raw)
    for impl in stages:
        build_step.build(cfg, impl, env_json=tmp / "environment.json", binary_out=tmp / f"{impl}.bin",
                         record_out=tmp / f"{impl}.json")
    os._exit(0)


def _timer(registry: Path, rounds: int, out) -> None:
    """A timing step: under the exclusive lock, who else holds a context on the GPU (any process the
    simulated driver lists, idle or not), ``rounds`` times."""
    install_nvml(registry)
    _start_context(registry)  # its own context, as a timing point's
    seen = []
    for _ in range(rounds):
        with gpulock.gpu_lock(exclusive=True):
            watch = foreign.Watch.on("0000:01:00.0")
            watch.start()
            time.sleep(0.01)
            seen.append(watch.seen().describe())
        time.sleep(0.005)
    out.put(seen)


def install_nvml(registry: Path) -> None:
    from sgemm_lab.gpu import nvml

    fake = RegistryNvml(registry)
    nvml._open = lambda: fake
    nvml._lib = None


@pytest.fixture
def gpu_sim(tmp_path, monkeypatch, raw_config):
    registry = tmp_path / "contexts"
    registry.mkdir()
    monkeypatch.setenv(lockfiles.LOCK_ENV, str(tmp_path / ".gpu.lock"))
    monkeypatch.setattr(gpulock, "visible_gpus", lambda: [])
    _fake_gpu_parts(monkeypatch, registry)
    (tmp_path / "environment.json").write_text('{"gpu": {"arch": "sm_90"}}\n')
    plain = [k["id"] for k in raw_config["kernels"]
             if str(k.get("source", "")).endswith(".cu") and not k.get("tune_from") and not k.get("dispatch_from")]
    return registry, raw_config, plain[2:5], tmp_path


def _build_beside_a_timer(registry: Path, raw: dict, stages: list[str], tmp: Path):
    """The build job and, once its first stage has loaded its module, a timing step beside it: (the
    builder process, what the timer saw in each of its 5 rounds)."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    builder = ctx.Process(target=_builder, args=(raw, stages, tmp, 0.3))
    builder.start()
    while not _holders(registry):  # the builder's first stage has loaded its module
        time.sleep(0.005)
    timer = ctx.Process(target=_timer, args=(registry, 5, out))
    timer.start()
    seen = out.get(timeout=60)
    timer.join(10)
    builder.join(10)
    return builder, seen


def test_a_build_keeps_the_lock_of_its_context_and_a_timing_step_never_sees_it(gpu_sim):
    registry, raw, stages, tmp = gpu_sim
    builder, seen = _build_beside_a_timer(registry, raw, stages, tmp)
    assert builder.exitcode == 0
    # each stage's record written (the build went on under the lock it kept)
    assert all((tmp / f"{s}.json").is_file() for s in stages)
    assert seen == ["none"] * 5, seen


def test_today_s_failure_is_what_the_timer_would_see(gpu_sim, monkeypatch):
    """The same build with the lock given back after each stage (as before): the timing step gets the
    lock between two stages and sees the builder's context beside it. (The check is not blind.)"""
    registry, raw, stages, tmp = gpu_sim
    monkeypatch.setattr(gpulock, "_context_started", lambda: False)  # the lock no longer knows of the context
    builder, seen = _build_beside_a_timer(registry, raw, stages, tmp)
    assert any(f"pid {builder.pid} " in s and "518 MiB" in s for s in seen), seen


def test_a_process_with_a_context_asks_for_no_lock_it_does_not_hold(gpu_sim):
    registry, raw, stages, tmp = gpu_sim
    device.driver()  # CUDA started outside any lock
    with pytest.raises(LabError, match="before it took the GPU lock"):
        with gpulock.gpu_lock(exclusive=False):
            pass


def test_a_kept_lock_serves_the_process_s_later_steps_without_a_wait(gpu_sim):
    registry, raw, stages, tmp = gpu_sim
    gpulock._KEPT.clear()
    try:
        with gpulock.gpu_lock(exclusive=False) as first:
            device.driver()
        assert gpulock.kept_lock() is first  # the context outlives the block: so does the lock
        with gpulock.gpu_lock(exclusive=False) as again:  # no second flock: it is held already
            assert again.fh is first.fh
        with pytest.raises(LabError, match="asks for the exclusive one"):
            with gpulock.gpu_lock(exclusive=True):
                pass
        # another process can share it, not time beside it
        import fcntl

        with open(tmp / ".gpu.lock", "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fh, fcntl.LOCK_UN)
            with pytest.raises(BlockingIOError):
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        for _, lk in gpulock._KEPT:
            lk.fh.close()
            if getattr(lk, "_late", None) is not None:
                os.close(lk._late)
        gpulock._KEPT.clear()


def test_a_lock_without_a_context_is_given_back(gpu_sim):
    registry, raw, stages, tmp = gpu_sim
    gpulock._KEPT.clear()
    with gpulock.gpu_lock(exclusive=True):
        pass
    assert gpulock.kept_lock() is None
    import fcntl

    with open(tmp / ".gpu.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
