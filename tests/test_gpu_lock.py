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
    path = tmp_path / ".gpu.lock"
    with gpulock.gpu_lock(exclusive=False, path=path):
        assert _try(path, fcntl.LOCK_SH)        # another check or sanitizer may run
        assert not _try(path, fcntl.LOCK_EX)    # a timing step may not
    with gpulock.gpu_lock(exclusive=True, path=path):
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
