"""GPU arbitration between jobs: timing steps get the GPU to themselves, checks may share it."""

import fcntl
from pathlib import Path

import pytest

from sgemm_lab.gpu.discovery import Gpu
from sgemm_lab.measure import gpulock, lockfiles


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


# ----------------------------------------------------------------------------------- several GPUs
TWO = [Gpu(0, "GPU-aaaa"), Gpu(1, "GPU-bbbb")]


@pytest.fixture
def clean_pin(monkeypatch):
    """A process that is pinned nowhere and has not started CUDA (the test process); what a test pins
    is undone afterwards (set first, so that the removal is recorded even where the variable was unset)."""
    for name in (gpulock.PIN_ENV, "CUDA_VISIBLE_DEVICES"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setattr(gpulock, "_cuda_started", lambda: False)
    return monkeypatch


def _hold(base, index, mode, ready, release):
    """A process holding GPU ``index``'s lock until ``release`` is set."""
    import fcntl as f

    fh = open(lockfiles.device_lock_path(TWO[index], base), "a")
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
            assert not _try(lockfiles.device_lock_path(TWO[1], base), fcntl.LOCK_SH)
            assert gpulock.handoff(lock) == "pin 1:GPU-bbbb"
            assert gpulock.device_columns() == {"device_index": 1, "device_uuid": "GPU-bbbb"}
        assert _try(lockfiles.device_lock_path(TWO[1], base), fcntl.LOCK_EX)  # released
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
            assert _try(lockfiles.device_lock_path(lock.device, base), fcntl.LOCK_SH)
            assert not _try(lockfiles.device_lock_path(lock.device, base), fcntl.LOCK_EX)


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
    node_a, node_b = Gpu(0, "GPU-aaaa"), Gpu(0, "GPU-cccc")
    base = tmp_path / ".gpu.lock"
    with gpulock.gpu_lock(exclusive=True, path=base, devices=[node_a]):
        assert _try(lockfiles.device_lock_path(node_b, base), fcntl.LOCK_EX)      # the other node's GPU is free
        assert not _try(lockfiles.device_lock_path(node_a, base), fcntl.LOCK_SH)  # this one is not


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
    from sgemm_lab.gpu.discovery import narrow

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
    assert _try(lockfiles.device_lock_path(TWO[0], base), fcntl.LOCK_EX)


def test_child_gates_one_per_gpu_only_when_there_are_several(clean_pin):
    clean_pin.setattr(gpulock, "visible_gpus", lambda: TWO)
    gates = gpulock.child_gates()
    assert len(gates) == 2 and not any(g.pin_self for g in gates)
    clean_pin.setattr(gpulock, "visible_gpus", lambda: TWO[:1])
    assert len(gpulock.child_gates()) == 1


# ------------------------------------------------------------------------- one lock per GPU per host
@pytest.fixture
def no_lock_env(monkeypatch):
    """No lock override in the environment (a test run inside a pipeline would inherit its own)."""
    for name in (lockfiles.LOCK_ENV, lockfiles.LOCK_DIR_ENV):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return monkeypatch


def test_a_gpu_s_lock_is_the_host_s_not_the_checkout_s(no_lock_env, tmp_path):
    gpu = TWO[0]
    assert lockfiles.HOST_LOCK_DIR == Path("/tmp/sgemm-lab-locks")
    assert lockfiles.device_lock_path(gpu) == Path("/tmp/sgemm-lab-locks/gpu.GPU-aaaa.lock")
    assert lockfiles.lock_path([]) == Path("results/.gpu.lock")  # no GPU: nothing on the host to share
    no_lock_env.setenv(lockfiles.LOCK_DIR_ENV, str(tmp_path / "locks"))
    assert lockfiles.device_lock_path(gpu) == tmp_path / "locks" / "gpu.GPU-aaaa.lock"
    assert lockfiles.lock_path(TWO) == tmp_path / "locks" / "gpu.lock"
    no_lock_env.setenv(lockfiles.LOCK_ENV, str(tmp_path / "outer" / ".gpu.lock"))  # a pipeline inside a pipeline
    assert lockfiles.device_lock_path(gpu) == tmp_path / "outer" / ".gpu.GPU-aaaa.lock"
    assert lockfiles.lock_path([]) == tmp_path / "outer" / ".gpu.lock"


def test_the_host_s_lock_folder_and_files_are_open_to_every_user(no_lock_env, tmp_path, clean_pin):
    import os

    folder = tmp_path / "host" / "locks"
    no_lock_env.setenv(lockfiles.LOCK_DIR_ENV, str(folder))
    old = os.umask(0o022)
    try:
        with gpulock.gpu_lock(exclusive=True, devices=TWO[:1]) as lock:
            path = lockfiles.device_lock_path(lock.device, lock.path)
            assert path == folder / "gpu.GPU-aaaa.lock" and not _try(path, fcntl.LOCK_SH)
    finally:
        os.umask(old)
    assert folder.stat().st_mode & 0o7777 == 0o1777
    assert path.stat().st_mode & 0o777 == 0o666
    assert _try(path, fcntl.LOCK_EX)


def test_a_lock_file_removed_while_waiting_for_it_is_not_trusted(tmp_path, monkeypatch):
    """A /tmp cleaner removes the lock file while one process holds it and another waits on the same
    file: the waiter must lock the file now at that path, or a third process could lock a new file of
    the same name beside it."""
    import threading

    path = tmp_path / "gpu.GPU-aaaa.lock"
    holder = lockfiles.take(path, fcntl.LOCK_EX)
    opened, real_open = threading.Event(), lockfiles.open_lock
    opens = []

    def spy(p):
        fh = real_open(p)
        opens.append(lockfiles.os.fstat(fh.fileno()).st_ino)
        opened.set()
        return fh

    monkeypatch.setattr(lockfiles, "open_lock", spy)
    got = []
    waiter = threading.Thread(target=lambda: got.append(lockfiles.take(path, fcntl.LOCK_EX)))
    waiter.start()
    assert opened.wait(10)
    path.unlink()  # removed while held and waited for
    holder.close()
    waiter.join(10)
    (fh,) = got
    try:
        assert len(opens) == 2 and lockfiles.os.fstat(fh.fileno()).st_ino == path.stat().st_ino
        assert not _try(path, fcntl.LOCK_SH)
    finally:
        fh.close()


TAKE_TURNS = r"""
import os, sys, time
from pathlib import Path

from fake_nvml import FakeGpu, FakeNvml
from sgemm_lab.gpu import nvml
from sgemm_lab.measure import gpulock, lockfiles

nvml._open = lambda: FakeNvml([FakeGpu("GPU-5151")])  # the host's one GPU, simulated
me, other, events, inside = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
(events / f"{me}.asking").touch()
with gpulock.gpu_lock.for_mode("exclusive") as lock:  # what a bench step takes
    try:
        os.close(os.open(inside, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        (events / f"{me}.overlap").touch()  # the other pipeline is timing on the GPU too
        sys.exit(0)
    (events / f"{me}.in").write_text(str(lockfiles.device_lock_path(lock.device, lock.path)))
    while not (events / f"{other}.asking").exists():  # the other pipeline wants the GPU now
        time.sleep(0.01)
    time.sleep(0.2)  # were the lock not shared, it would be in meanwhile (and find `inside` there)
    os.unlink(inside)
"""


def test_two_checkouts_on_one_host_take_turns_on_its_gpu(tmp_path):
    """Two pipelines started from two clones (two working directories) on one host, its one GPU
    simulated: their timing steps never hold the GPU at the same time, both through the one lock file
    in the host's lock folder (here given by SGEMM_LAB_LOCK_DIR), outside either clone."""
    import os
    import subprocess
    import sys

    tests = Path(__file__).resolve().parent
    events, host = tmp_path / "events", tmp_path / "host-locks"
    events.mkdir()
    script = tmp_path / "take_turns.py"
    script.write_text(TAKE_TURNS)
    env = {k: v for k, v in os.environ.items()
           if k not in (lockfiles.LOCK_ENV, gpulock.PIN_ENV, "CUDA_VISIBLE_DEVICES")}
    env.update(SGEMM_LAB_LOCK_DIR=str(host), SGEMM_LAB_LOCK_LOG=str(tmp_path / "locks.jsonl"),
               PYTHONPATH=os.pathsep.join([str(tests.parent / "src"), str(tests)]))
    procs = []
    for me, other in (("a", "b"), ("b", "a")):
        clone = tmp_path / f"clone-{me}"
        clone.mkdir()
        procs.append(subprocess.Popen([sys.executable, str(script), me, other, str(events), str(tmp_path / "inside")],
                                      cwd=clone, env=env, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    assert not list(events.glob("*.overlap"))
    used = {(events / f"{me}.in").read_text() for me in "ab"}
    assert used == {str(host / "gpu.GPU-5151.lock")}
    assert not list(tmp_path.glob("clone-*/results"))  # nothing of the lock in either clone
    import json

    held = sorted((json.loads(line) for line in (tmp_path / "locks.jsonl").read_text().splitlines()),
                  key=lambda h: h["got"])  # the lock log: who held the GPU when
    assert [h["cwd"] for h in held] in ([str(tmp_path / "clone-a"), str(tmp_path / "clone-b")],
                                        [str(tmp_path / "clone-b"), str(tmp_path / "clone-a")])
    assert {h["lock"] for h in held} == {str(host / "gpu.GPU-5151.lock")} and {h["mode"] for h in held} == {"exclusive"}
    assert held[0]["released"] <= held[1]["got"]  # one after the other


KEPT_LOG = r"""
import multiprocessing as mp
import sys
from concurrent.futures import ProcessPoolExecutor

from fake_nvml import FakeGpu, FakeNvml
from sgemm_lab.gpu import nvml
from sgemm_lab.measure import gpulock

nvml._open = lambda: FakeNvml([FakeGpu("GPU-5151")])
STARTED = [False]
gpulock._context_started = lambda: STARTED[0]


def worker(mode):
    with gpulock.gpu_lock(exclusive=mode == "exclusive"):
        STARTED[0] = True  # as if CUDA started under the lock: it is kept until the process ends
    return gpulock.kept_lock() is not None


if __name__ == "__main__":
    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("fork")) as pool:
        assert pool.submit(worker, "shared").result()  # a worker that ends by os._exit
    assert worker("shared")  # and this process, which ends by atexit
"""


def test_kept_locks_are_logged_once_also_by_workers_that_end_by_os_exit(tmp_path):
    """The lock log has every hold, also the kept lock of a multiprocessing worker (a build's or a point's
    process), which ends by os._exit after multiprocessing's own exit hooks, not by atexit; and a process
    with both hooks logs its kept lock once."""
    import json
    import os
    import subprocess
    import sys

    tests = Path(__file__).resolve().parent
    script = tmp_path / "kept.py"
    script.write_text(KEPT_LOG)
    env = {k: v for k, v in os.environ.items()
           if k not in (lockfiles.LOCK_ENV, gpulock.PIN_ENV, "CUDA_VISIBLE_DEVICES")}
    env.update(SGEMM_LAB_LOCK_DIR=str(tmp_path / "host"), SGEMM_LAB_LOCK_LOG=str(tmp_path / "locks.jsonl"),
               PYTHONPATH=os.pathsep.join([str(tests.parent / "src"), str(tests)]))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    held = [json.loads(line) for line in (tmp_path / "locks.jsonl").read_text().splitlines()]
    assert len(held) == 2 and len({h["pid"] for h in held}) == 2, held
    assert {h["mode"] for h in held} == {"shared"} and all(h["got"] <= h["released"] for h in held)
