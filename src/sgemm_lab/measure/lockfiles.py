"""The GPU lock files: where they are, how one is opened, checked and waited for, and the hold log.

A GPU belongs to one host, so its lock is one per host, shared by every checkout and every user there:
``/tmp/sgemm-lab-locks/gpu.<uuid>.lock`` (``HOST_LOCK_DIR``; ``SGEMM_LAB_LOCK_DIR`` names another folder,
``SGEMM_LAB_GPU_LOCK`` one lock file with each GPU's beside it; see ``gpulock`` for who takes which).
A folder every user may write is a folder a neighbour may tamper with, so the host's lock folder is
checked before it is trusted (``check_folder``; a folder of one's own choosing, ``results/`` or
``SGEMM_LAB_GPU_LOCK``'s, may be a link): a link is not followed (the folder could be anyone's), the
folder must be a folder, and one that others may write must have the sticky bit (else another user
could remove a held lock file and take the lock of a new file of the same name beside it). A lock file
must be a regular file (a FIFO or a device in its place is refused), opened without following links,
and is checked after locking to still be the file at its path. A folder given as a relative path is
refused: it would make a lock per working directory.

Waiting (``take``) says who holds the lock, every ``REPORT_S`` seconds (process, user, state, from
``/proc/locks``), and gives up after ``$SGEMM_LAB_LOCK_WAIT_S`` seconds (default ``WAIT_S``; 0 waits for
as long as it takes) with one line naming the lock and its holders: a neighbour that holds it forever,
or a holder stopped with SIGSTOP, does not leave the pipeline waiting in silence.

What a folder's owner may still do: remove the files of a sticky folder they own. The default folder is
made by the first pipeline of the host that needs it (mode 1777); where the users of a host do not trust
each other, give the lab a folder only root may remove files from (``SGEMM_LAB_LOCK_DIR``).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from pathlib import Path

from ..errors import LabError
from ..gpu.discovery import Gpu, visible_gpus

log = logging.getLogger("sgemm_lab")

HOST_LOCK_DIR = Path("/tmp/sgemm-lab-locks")  # the host's GPU locks, for every checkout and user
LOCK_DIR_ENV = "SGEMM_LAB_LOCK_DIR"            # another folder for them
LOCK_ENV = "SGEMM_LAB_GPU_LOCK"                # a lock file: the GPUs' locks beside it
NO_GPU_LOCK = Path("results/.gpu.lock")        # a process that finds no GPU (in its working directory)
LOCK_LOG_ENV = "SGEMM_LAB_LOCK_LOG"            # a file: one line per lock held (see gpulock)
WAIT_ENV = "SGEMM_LAB_LOCK_WAIT_S"             # how long to wait for a lock at most (seconds; 0: no limit)
WAIT_S = 4 * 3600.0                            # its default: longer than any of the pipeline's own holds
REPORT_S = 60.0                                # how often a wait says who holds the lock
POLL_S = 0.05                                  # the wait's step where it cannot block (a thread)


def lock_dir() -> Path:
    """The folder of the host's GPU locks: ``$SGEMM_LAB_LOCK_DIR``, else ``HOST_LOCK_DIR``; LabError for a
    relative one."""
    given = os.environ.get(LOCK_DIR_ENV)
    if given and not os.path.isabs(given):
        raise LabError(f"{LOCK_DIR_ENV}={given}: a relative folder would make a lock per working directory; "
                       "give an absolute path")
    return Path(given or HOST_LOCK_DIR)


def lock_path(devices: list[Gpu] | None = None) -> Path:
    """The lock of a process that finds no GPU among ``devices`` (default: the visible ones), and the
    file the per-GPU locks are named beside: ``$SGEMM_LAB_GPU_LOCK``; else, with a GPU,
    ``gpu.lock`` in the host's lock folder (``lock_dir``); without, ``results/.gpu.lock``."""
    env = os.environ.get(LOCK_ENV)
    if env:
        return Path(env)
    gpus = visible_gpus() if devices is None else devices
    return lock_dir() / "gpu.lock" if gpus else NO_GPU_LOCK


def device_lock_path(gpu: Gpu, base: Path | None = None) -> Path:
    """The lock of one GPU: ``gpu.<uuid>.lock`` beside ``base`` (default ``lock_path``; hidden, with a
    leading dot, when ``base``'s name has one). The index would not do: on a cluster every job's one
    GPU is index 0 on its host."""
    base = base if base is not None else lock_path([gpu])
    dot = "." if base.name.startswith(".") else ""
    return base.with_name(f"{dot}gpu.{gpu.uuid}.lock")


def _refuse(path: Path, why: str) -> LabError:
    return LabError(f"GPU lock folder {path}: {why}; set {LOCK_DIR_ENV} to a folder of your own "
                    f"(or {LOCK_ENV} to a lock file)")


def check_folder(folder: Path) -> None:
    """LabError (one line) unless ``folder`` is a folder, not a link, and, where users other than its
    owner may write it, has the sticky bit."""
    try:
        st = os.lstat(folder)
    except OSError as exc:
        raise _refuse(folder, exc.strerror or str(exc)) from None
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(folder, f"a link (to {os.readlink(folder)}), not followed: the folder could be anyone's")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(folder, "not a folder")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise _refuse(folder, f"mode {st.st_mode & 0o7777:04o}: others may write it and it has no sticky bit, so "
                              "another user could remove a held lock")


def _ensure_folder(folder: Path) -> None:
    """``folder``, made if missing (the host's lock folder with mode 1777: every user may add locks, only
    the owner of one may remove it). The host's folder, shared with neighbours, is checked
    (``check_folder``); a folder of one's own choosing (``SGEMM_LAB_GPU_LOCK``'s, or ``results/`` where no
    GPU is found) may be reached through a link."""
    shared = folder == lock_dir()
    if not os.path.lexists(folder):
        try:
            folder.mkdir(parents=True)
            if shared:
                os.chmod(folder, 0o1777)  # (mkdir's mode is cut by the umask)
        except FileExistsError:
            pass
    if shared:
        check_folder(folder)
    elif not folder.is_dir():
        raise _refuse(folder, "not a folder")


def open_lock(path: Path):
    """``path`` opened for flock, made if missing (readable and writable by all users: another user's
    pipeline takes the same lock). An existing file is opened without O_CREAT (a sticky world-writable
    folder may refuse O_CREAT over another user's file), read-only when it is not writable for this
    user (flock needs no write access on a local filesystem); never through a link, and never anything
    but a regular file."""
    try:
        _ensure_folder(path.parent)
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
            except FileNotFoundError:
                try:
                    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
                except FileExistsError:
                    continue  # another process made it meanwhile: open that one
                os.fchmod(fd, 0o666)  # (the mode given to open is cut by the umask)
            except PermissionError:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise LabError(f"the GPU lock {path} is not a regular file (a FIFO, a device or a folder in its "
                               f"place); remove it, or set {LOCK_DIR_ENV} to a folder of your own")
            return os.fdopen(fd, "rb", buffering=0)
    except OSError as exc:
        why = "a link, not followed" if exc.errno == 40 else exc.strerror or str(exc)  # ELOOP: O_NOFOLLOW
        raise LabError(f"cannot use the GPU lock {path}: {why}; set {LOCK_DIR_ENV} to a folder that every user "
                       f"of this host's GPUs may write (or {LOCK_ENV} to a lock file)") from None


def holders(path: Path) -> list[str]:
    """Who holds a lock on ``path`` (``/proc/locks``: process, user, state), as words."""
    try:
        st = os.stat(path)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        f = line.split()
        if len(f) < 6 or f[1] != "FLOCK" or "->" in f:
            continue
        try:
            ino = int(f[5].split(":")[-1])
        except ValueError:
            continue
        if ino != st.st_ino:
            continue
        pid = f[4]
        out.append(f"pid {pid} {_who(int(pid))} ({'exclusive' if f[3] == 'WRITE' else 'shared'})")
    return out


def _who(pid: int) -> str:
    """A process's name, user and state, from /proc (what can be read of it)."""
    import pwd

    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "(gone, or in another PID namespace)"
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    uid = int(fields.get("Uid", "-1").split()[0])
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = f"uid {uid}"
    state = fields.get("State", "").strip()
    return f"{fields.get('Name', '?').strip()}, user {user}, {state or 'state unknown'}"


def wait_limit() -> float:
    """How long ``take`` waits at most (``$SGEMM_LAB_LOCK_WAIT_S``, else ``WAIT_S``; 0: no limit)."""
    given = os.environ.get(WAIT_ENV)
    try:
        return float(given) if given else WAIT_S
    except ValueError:
        raise LabError(f"{WAIT_ENV}={given}: not a number of seconds") from None


class _Tick(Exception):
    """The wait's alarm: time to say who holds the lock, or to give up."""


def _wait(fh, mode: int, path: Path) -> None:
    """``flock(fh, mode)``, saying who holds the lock every ``REPORT_S`` seconds and giving up (LabError)
    after ``wait_limit``. The main thread blocks in flock between alarms; another thread polls."""
    import fcntl
    import signal

    try:
        fcntl.flock(fh, mode | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    limit, t0 = wait_limit(), time.monotonic()
    what = "exclusive" if mode & fcntl.LOCK_EX else "shared"

    def waited_out() -> bool:
        waited = time.monotonic() - t0
        who = "; ".join(holders(path)) or "no holder to be seen (another PID namespace?)"
        if limit and waited >= limit:
            raise LabError(f"gave up on the GPU lock {path} ({what}) after {waited:.0f} s ({WAIT_ENV}): held by "
                           f"{who}")
        log.warning("waiting %.0f s for the GPU lock %s (%s): held by %s", waited, path, what, who)
        return False

    def next_s() -> float:
        left = limit - (time.monotonic() - t0) if limit else REPORT_S
        return max(0.01, min(REPORT_S, left))

    if threading.current_thread() is not threading.main_thread():
        due = time.monotonic() + next_s()
        while True:
            try:
                fcntl.flock(fh, mode | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            if time.monotonic() >= due:
                waited_out()
                due = time.monotonic() + next_s()
            time.sleep(POLL_S)
    armed = [True]

    def tick(signum, frame):
        if armed[0]:  # (an alarm that comes once the lock is held raises nothing)
            raise _Tick

    old = signal.signal(signal.SIGALRM, tick)
    try:
        while True:
            signal.setitimer(signal.ITIMER_REAL, next_s())
            try:
                fcntl.flock(fh, mode)
                armed[0] = False  # (an alarm just before this line is caught below: flock again holds at once)
                return
            except _Tick:
                waited_out()
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, old)


def take(path: Path, mode: int, block: bool = True):
    """The open file of ``path`` locked with ``mode``, or None (``block`` False: it is held elsewhere).
    A lock file that was removed or replaced while this process waited for it is given up for the one
    at ``path`` now, so that two processes never hold locks on two different files of one name."""
    import fcntl

    while True:
        fh = open_lock(path)
        try:
            if block:
                _wait(fh, mode, path)
            else:
                fcntl.flock(fh, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            return None
        except BaseException:
            fh.close()
            raise
        try:
            now = os.stat(path)
        except FileNotFoundError:
            now = None
        held = os.fstat(fh.fileno())
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            try:
                os.utime(fh.fileno())  # recently used: a /tmp cleaner that goes by age leaves it
            except OSError:
                pass
            return fh
        fh.close()


def append_log(line: str) -> None:
    """``line`` appended to ``$SGEMM_LAB_LOCK_LOG`` (if set) in one write (lines of several processes do
    not mix); never through a link (the log's name could be anyone's)."""
    target = os.environ.get(LOCK_LOG_ENV)
    if not target:
        return
    try:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(f"{target} is not a regular file")
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
    except OSError as exc:
        log.warning("GPU lock log %s: %s", target, exc)
