"""The host-wide lock folder is shared with neighbours, so it is checked before it is trusted: a folder
another user made writable without the sticky bit, a link in its place, a FIFO for a lock file, a link for
the hold log and a relative folder are refused or passed over in one line; a wait names who holds the
lock (a neighbour's `flock`, a holder stopped with SIGSTOP) and gives up after the stated time."""

import fcntl
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sgemm_lab.errors import LabError
from sgemm_lab.measure import gpulock, lockfiles

NOBODY = 65534
as_root = pytest.mark.skipif(os.getuid() != 0, reason="needs root, to act as a second user")


@pytest.fixture
def folder_env(tmp_path, monkeypatch):
    """The host's lock folder moved under tmp_path (no GPU: the one lock beside the given file)."""
    for name in (lockfiles.LOCK_ENV, lockfiles.LOCK_DIR_ENV, lockfiles.LOCK_LOG_ENV, lockfiles.WAIT_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(gpulock, "visible_gpus", lambda: [])
    os.chmod(tmp_path, 0o755)  # (a neighbour must be able to reach what is under it)
    return tmp_path


def _lock(path: Path, exclusive=True):
    return gpulock.gpu_lock(exclusive=exclusive, path=path, devices=[])


@as_root
def test_a_folder_others_may_write_without_the_sticky_bit_is_refused(folder_env, monkeypatch):
    folder = folder_env / "locks"
    monkeypatch.setenv(lockfiles.LOCK_DIR_ENV, str(folder))  # the host's lock folder
    folder.mkdir()
    os.chown(folder, NOBODY, NOBODY)
    os.chmod(folder, 0o777)
    with pytest.raises(LabError) as err:
        with _lock(folder / "gpu.lock"):
            pass
    assert "mode 0777" in str(err.value) and "sticky" in str(err.value) and "\n" not in str(err.value)
    assert not (folder / "gpu.lock").exists()


@as_root
def test_in_a_sticky_folder_a_neighbour_cannot_remove_a_held_lock(folder_env):
    folder = folder_env / "locks"
    folder.mkdir()
    os.chmod(folder, 0o1777)
    with _lock(folder / "gpu.lock"):
        code = ("import os, sys\nos.setgid(65534); os.setuid(65534)\n"
                f"try:\n    os.unlink({str(folder / 'gpu.lock')!r})\nexcept PermissionError:\n    sys.exit(3)\n")
        assert subprocess.run([sys.executable, "-c", code]).returncode == 3
        assert (folder / "gpu.lock").exists()


def test_a_link_in_place_of_the_folder_is_not_followed(folder_env, monkeypatch):
    elsewhere = folder_env / "theirs"
    elsewhere.mkdir()
    (folder_env / "locks").symlink_to(elsewhere)
    monkeypatch.setenv(lockfiles.LOCK_DIR_ENV, str(folder_env / "locks"))  # the host's lock folder
    with pytest.raises(LabError, match="a link .* not followed"):
        with _lock(folder_env / "locks" / "gpu.lock"):
            pass
    assert list(elsewhere.iterdir()) == []


def test_a_fifo_in_place_of_the_lock_file_is_refused_at_once(folder_env):
    os.mkfifo(folder_env / "gpu.lock")
    t0 = time.monotonic()
    with pytest.raises(LabError, match="not a regular file"):
        with _lock(folder_env / "gpu.lock"):
            pass
    assert time.monotonic() - t0 < 60  # (no wait for a writer that never comes)


def test_a_link_in_place_of_the_lock_file_is_not_followed(folder_env):
    target = folder_env / "their-file"
    target.write_text("theirs\n")
    (folder_env / "gpu.lock").symlink_to(target)
    with pytest.raises(LabError, match="a link, not followed"):
        with _lock(folder_env / "gpu.lock"):
            pass
    assert target.read_text() == "theirs\n"


def test_the_hold_log_is_never_written_through_a_link(folder_env, monkeypatch, caplog):
    target = folder_env / "their-file"
    target.write_text("theirs\n")
    (folder_env / "holds.jsonl").symlink_to(target)
    monkeypatch.setenv(lockfiles.LOCK_LOG_ENV, str(folder_env / "holds.jsonl"))
    with caplog.at_level(logging.WARNING, logger="sgemm_lab"):
        with _lock(folder_env / "gpu.lock"):
            pass
    assert target.read_text() == "theirs\n" and "GPU lock log" in caplog.text


def test_a_folder_of_one_s_own_may_be_reached_through_a_link(folder_env):
    """results/ (no GPU) or SGEMM_LAB_GPU_LOCK's folder: one's own choice, not the neighbours' folder."""
    (folder_env / "scratch").mkdir()
    (folder_env / "results").symlink_to(folder_env / "scratch")
    with _lock(folder_env / "results" / ".gpu.lock"):
        pass
    assert (folder_env / "scratch" / ".gpu.lock").is_file()


def test_a_relative_lock_folder_is_refused(folder_env, monkeypatch):
    monkeypatch.setenv(lockfiles.LOCK_DIR_ENV, "locks")
    with pytest.raises(LabError, match="relative folder would make a lock per working directory"):
        lockfiles.lock_dir()


def _holder(path: Path) -> subprocess.Popen:
    """A neighbour holding ``path`` exclusively (its own flock, not the lab's), until killed."""
    proc = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time\n"
                             f"fh = open({str(path)!r}, 'a'); fcntl.flock(fh, fcntl.LOCK_EX)\n"
                             "print('held', flush=True); time.sleep(600)\n"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.parametrize("stopped", [False, True])
def test_a_wait_names_the_holder_and_gives_up_after_the_stated_time(folder_env, monkeypatch, caplog, stopped):
    path = folder_env / "gpu.lock"
    path.touch()
    holder = _holder(path)
    try:
        if stopped:
            os.kill(holder.pid, signal.SIGSTOP)
        monkeypatch.setenv(lockfiles.WAIT_ENV, "1.0")
        monkeypatch.setattr(lockfiles, "REPORT_S", 0.3)
        t0 = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="sgemm_lab"):
            with pytest.raises(LabError) as err:
                with _lock(path):
                    pass
        assert 1.0 <= time.monotonic() - t0 < 60  # (it waited the stated time, and then stopped)
        msg = str(err.value)
        assert "\n" not in msg and f"gave up on the GPU lock {path}" in msg and f"pid {holder.pid} python" in msg
        assert "(exclusive)" in msg and ("stopped" in msg) == stopped
        assert f"waiting 0 s for the GPU lock {path}" in caplog.text or "waiting" in caplog.text
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def test_a_wait_in_a_thread_gives_up_too(folder_env, monkeypatch):
    import threading

    path = folder_env / "gpu.lock"
    path.touch()
    holder = _holder(path)
    monkeypatch.setenv(lockfiles.WAIT_ENV, "0.5")
    monkeypatch.setattr(lockfiles, "REPORT_S", 0.2)
    got = []

    def wait():
        try:
            lockfiles.take(path, fcntl.LOCK_SH)
        except LabError as exc:
            got.append(str(exc))

    try:
        t = threading.Thread(target=wait)
        t.start()
        t.join(10)
        assert got and "gave up" in got[0] and f"pid {holder.pid}" in got[0]
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def test_a_free_lock_is_taken_at_once_and_no_alarm_is_left(folder_env):
    with _lock(folder_env / "gpu.lock"):
        pass
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.default_int_handler, None)
