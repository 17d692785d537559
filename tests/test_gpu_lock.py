"""GPU arbitration between jobs: timing steps get the GPU to themselves, checks may share it."""

import fcntl

import pytest

from sgemm_lab import gpulock


def _try(path, mode):
    """True if a lock of ``mode`` could be taken on ``path`` right now (from a second open file)."""
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fh, fcntl.LOCK_UN)
        return True


def test_shared_holders_coexist_and_exclude_a_timing_step(tmp_path):
    path = tmp_path / ".gpu.lock"  # no GPU found: the one lock
    with gpulock.gpu_lock(exclusive=False, path=path, devices=[]):
        assert _try(path, fcntl.LOCK_SH)        # another check or sanitizer may run
        assert not _try(path, fcntl.LOCK_EX)    # a timing step may not
    with gpulock.gpu_lock(exclusive=True, path=path, devices=[]):
        assert not _try(path, fcntl.LOCK_SH) and not _try(path, fcntl.LOCK_EX)
    assert _try(path, fcntl.LOCK_EX)            # released


def test_lock_modes(lab):
    timing = ["bench", "sweep", "epilogue", "ceilings"]
    checking = ["environment", "build", "check"]
    for step in timing:
        assert gpulock.lock_mode(step, lab, "08_warptiling") == "exclusive"
    for step in checking:
        assert gpulock.lock_mode(step, lab, "08_warptiling") == "shared"
    assert gpulock.lock_mode("bench", lab, "cublas") == "exclusive"
    assert gpulock.lock_mode("bench", lab, "10_autotuned") == "exclusive"
    host = next(k.id for k in lab.kernels if k.backend == "host")
    assert gpulock.lock_mode("bench", lab, host) is None and gpulock.lock_mode("check", lab, host) is None
    assert gpulock.lock_mode("build", lab, host) is None
    assert gpulock.lock_mode("bench", lab, "numpy") is None
    for step in ("aggregate", "plot", "report"):
        assert gpulock.lock_mode(step, lab, None) is None


@pytest.mark.parametrize("step", sorted(gpulock.SELF_LOCKING))
def test_self_locking_steps_are_gpu_steps(step):
    assert step in gpulock.GPU_LOCK


# ----------------------------------------------------------------------------------- several GPUs
TWO = [gpulock.Gpu(0, "GPU-aaaa"), gpulock.Gpu(1, "GPU-bbbb")]


@pytest.fixture
def clean_pin(monkeypatch):
    """A process that is pinned nowhere and has not started CUDA (the test process)."""
    monkeypatch.delenv(gpulock.PIN_ENV, raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(gpulock, "_cuda_started", lambda: False)
    return monkeypatch


def _hold(base, index, mode, ready, release):
    """A process holding GPU ``index``'s lock until ``release`` is set."""
    import fcntl as f

    fh = open(gpulock.device_lock_path(TWO[index], base), "a")
    f.flock(fh, mode)
    ready.set()
    release.wait(30)


def test_several_gpus_each_timing_step_gets_a_gpu_of_its_own_and_is_pinned_to_it(tmp_path, clean_pin):
    import multiprocessing as mp
    import os

    base = tmp_path / ".gpu.lock"
    ctx = mp.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    other = ctx.Process(target=_hold, args=(base, 0, fcntl.LOCK_EX, ready, release))
    other.start()
    try:
        assert ready.wait(10)
        with gpulock.gpu_lock(exclusive=True, path=base, devices=TWO) as lock:  # GPU 0 is busy timing
            assert lock.device == TWO[1]
            assert os.environ["CUDA_VISIBLE_DEVICES"] == "GPU-bbbb" and gpulock.pinned() == TWO[1]
            assert not _try(gpulock.device_lock_path(TWO[1], base), fcntl.LOCK_SH)
            assert gpulock.handoff(lock) == "pin 1:GPU-bbbb"
            assert gpulock.device_columns() == {"device_index": 1, "device_uuid": "GPU-bbbb"}
        assert _try(gpulock.device_lock_path(TWO[1], base), fcntl.LOCK_EX)  # released
    finally:
        release.set()
        other.join(10)


def test_a_pinned_process_waits_for_its_own_gpu_even_when_another_is_free(tmp_path, clean_pin):
    import multiprocessing as mp
    import threading

    base = tmp_path / ".gpu.lock"
    gpulock.pin(TWO[0])
    ctx = mp.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    other = ctx.Process(target=_hold, args=(base, 0, fcntl.LOCK_EX, ready, release))
    other.start()
    try:
        assert ready.wait(10)
        lock, got = gpulock.gpu_lock(exclusive=False, path=base, devices=TWO), []
        t = threading.Thread(target=lambda: got.append(lock.__enter__().device))
        t.start()
        t.join(0.5)
        assert not got  # GPU 1 is free, but CUDA in this process would be on GPU 0: it waits
        release.set()
        t.join(10)
        assert got == [TWO[0]]
        lock.__exit__(None, None, None)
    finally:
        release.set()
        other.join(10)


def test_shared_steps_spread_over_the_gpus_and_never_sit_beside_a_timing_step(tmp_path, clean_pin):
    base = tmp_path / ".gpu.lock"
    for pid in (10, 11):  # the search starts at a different GPU per process
        clean_pin.setattr(gpulock.os, "getpid", lambda pid=pid: pid)
        clean_pin.delenv(gpulock.PIN_ENV, raising=False)
        with gpulock.gpu_lock(exclusive=False, path=base, devices=TWO) as lock:
            assert lock.device == TWO[pid % 2]
            assert _try(gpulock.device_lock_path(lock.device, base), fcntl.LOCK_SH)
            assert not _try(gpulock.device_lock_path(lock.device, base), fcntl.LOCK_EX)


def test_one_gpu_takes_its_own_lock_and_only_records_the_device(tmp_path, clean_pin):
    import os

    path = tmp_path / ".gpu.lock"
    with gpulock.gpu_lock(exclusive=True, path=path, devices=TWO[:1]) as lock:
        assert lock.device == TWO[0] and not _try(tmp_path / ".gpu.GPU-aaaa.lock", fcntl.LOCK_SH)
        assert "CUDA_VISIBLE_DEVICES" not in os.environ and gpulock.handoff(lock) == "record 0:GPU-aaaa"
    assert not path.exists()


def test_jobs_of_a_cluster_wait_only_for_their_own_gpu(tmp_path, clean_pin):
    """Two nodes sharing results/ on a network filesystem, each job shown its one GPU as index 0: timing
    jobs on different GPUs run side by side, jobs on the same GPU take turns."""
    node_a, node_b = gpulock.Gpu(0, "GPU-aaaa"), gpulock.Gpu(0, "GPU-cccc")
    base = tmp_path / ".gpu.lock"
    with gpulock.gpu_lock(exclusive=True, path=base, devices=[node_a]):
        assert _try(gpulock.device_lock_path(node_b, base), fcntl.LOCK_EX)      # the other node's GPU is free
        assert not _try(gpulock.device_lock_path(node_a, base), fcntl.LOCK_SH)  # this one is not


def test_moving_a_process_whose_cuda_has_started_is_refused(clean_pin):
    clean_pin.setattr(gpulock, "_cuda_started", lambda: True)
    with pytest.raises(gpulock.LabError, match="CUDA has started"):
        gpulock.pin(TWO[1])


def test_point_processes_take_the_gpu_from_the_step(clean_pin):
    import os

    gpulock.take_handoff("pin 1:GPU-bbbb")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "GPU-bbbb" and gpulock.pinned() == TWO[1]
    clean_pin.delenv("CUDA_VISIBLE_DEVICES")
    clean_pin.delenv(gpulock.PIN_ENV)
    gpulock.take_handoff("record 0:GPU-aaaa")
    assert "CUDA_VISIBLE_DEVICES" not in os.environ and gpulock.pinned() == TWO[0]
    gpulock.take_handoff("")  # no GPU (host stages): nothing changes
    assert gpulock.pinned() == TWO[0]


@pytest.mark.parametrize("visible, want", [(None, [0, 1, 2]), ("2,0", [2, 0]), ("GPU-bbb", [1]), ("1,7,2", [1]),
                                           ("", []), ("GPU-a,GPU-a", [0])])
def test_cuda_visible_devices_narrows_as_cuda_does(visible, want):
    from sgemm_lab.devices import Gpu, narrow

    gpus = [Gpu(0, "GPU-aaa1"), Gpu(1, "GPU-bbb2"), Gpu(2, "GPU-ccc3")]
    assert [g.index for g in narrow(gpus, visible)] == want


def test_locks_held_for_children_take_different_gpus_and_leave_the_process_unpinned(tmp_path, clean_pin):
    import os

    base = tmp_path / ".gpu.lock"
    a = gpulock.gpu_lock(exclusive=True, path=base, devices=TWO, pin_self=False)
    b = gpulock.gpu_lock(exclusive=True, path=base, devices=TWO, pin_self=False)
    with a, b:
        assert {a.device, b.device} == set(TWO)
        assert gpulock.handoff(a).startswith("pin ") and gpulock.handoff(b) != gpulock.handoff(a)
        assert gpulock.pinned() is None and "CUDA_VISIBLE_DEVICES" not in os.environ
    assert _try(gpulock.device_lock_path(TWO[0], base), fcntl.LOCK_EX)


def test_child_gates_one_per_gpu_only_when_there_are_several(clean_pin):
    clean_pin.setattr(gpulock, "visible_gpus", lambda: TWO)
    gates = gpulock.child_gates()
    assert len(gates) == 2 and not any(g.pin_self for g in gates)
    clean_pin.setattr(gpulock, "visible_gpus", lambda: TWO[:1])
    assert len(gpulock.child_gates()) == 1
