"""Whose processes are on a GPU: a process's name (NVML's, else /proc's), which processes are this
pipeline's own (``own_pids``: this process, its ancestors and its descendants) and which belong to the
same pipeline run (``run_pids``). ``foreign`` watches a timed point with them and with NVML's process
lists and utilisation samples (``gpu.nvml``).
"""

from __future__ import annotations

import os


def process_name(lib, pid: int, same_namespace: bool) -> str | None:
    """The process's name: NVML's (``lib``, ``gpu.nvml.Nvml``), else /proc's when its PIDs are ours."""
    name = lib.process_name(pid) if lib is not None else None
    if name:
        return name
    if same_namespace:
        try:
            with open(f"/proc/{pid}/comm") as fh:
                return fh.read().strip() or None
        except OSError:
            return None
    return None


# ------------------------------------------------------------------------------ whose processes
def _parents() -> dict[int, int]:
    """pid -> parent pid of every process this one can see (/proc)."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue  # ended meanwhile
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (name) ": state, ppid, ...
        if len(fields) > 1:
            out[int(entry.name)] = int(fields[1])
    return out


def _is_snakemake(pid: int) -> bool:
    """Whether ``pid`` runs Snakemake (its command line names it)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return False
    return any(b"snakemake" in os.path.basename(a) or a == b"snakemake" for a in argv[:3])


def run_pids(pid: int | None = None) -> set[int]:
    """The processes of the pipeline run ``pid`` (default: this process) belongs to: every descendant of
    its outermost Snakemake ancestor (the run's own command; a job's Snakemake below it is one of them).
    Empty outside a Snakemake run."""
    pid = os.getpid() if pid is None else pid
    parents = _parents()
    root, up, seen = None, pid, set()
    while up and up not in seen:
        seen.add(up)
        if _is_snakemake(up):
            root = up
        up = parents.get(up)
    return set() if root is None else _descendants(root, parents)


def _descendants(pid: int, parents: dict[int, int]) -> set[int]:
    """``pid`` and every process below it, from the pid -> parent map ``parents``."""
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    out, todo = {pid}, [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def own_pids(pid: int | None = None) -> set[int]:
    """``pid`` (default: this process), its ancestors and its descendants: the pipeline's own processes
    from its point of view."""
    pid = os.getpid() if pid is None else pid
    parents = _parents()
    own, up = _descendants(pid, parents), parents.get(pid)
    while up and up not in own:
        own.add(up)
        up = parents.get(up)
    return own
