"""Other work on the GPU a point is timed on: before and after each timed point, which processes other
than the pipeline's own hold that GPU, and how much of the GPU's time went to them while it ran; a
point that shared its GPU is timed again, and after ``RETRIES`` more tries recorded as ``disturbed``.

The GPU lock (``gpulock``) keeps the pipeline's own steps apart, on every checkout of the host; it
cannot stop a program that does not take it. The driver can say who else is there. Everything is asked
through NVML (``gpu.nvml``, the driver's binding; no CUDA, so none of this needs a GPU to import):

- the processes holding the GPU: ``nvmlDeviceGetComputeRunningProcesses_v3``, the MPS and the graphics
  lists, at the start and at the end of the point;
- how busy they kept it: ``nvmlDeviceGetProcessesUtilizationInfo``, the driver's samples (each a process and
  the percentage of the sample period in which a kernel of it ran on the SMs) taken since the point
  started. A process that came and went within the point is seen here only.

Whose processes are ours. The point process itself (it holds a CUDA context while it times), its
ancestors (the step, Snakemake, whatever started it: a test that keeps a context of its own, idle) and
its descendants. Everything else is foreign, other steps of the same pipeline included: under the
exclusive lock none of them may be on the GPU. NVML names processes by PID, and inside a container
those may be the host's PIDs, not this PID namespace's: when this process is not among the PIDs that
NVML lists, its own entry is recognised as the one that appeared when it started CUDA (``note_before_cuda``
lists the GPU processes before that); failing that a lone entry is taken as its own, and more entries
mean others are there. What was seen is written down as seen (``describe``): PIDs, the kind of list,
memory, whether before or after, SM percentage, and the process's name where NVML or /proc gives one.

Verdict per point: a foreign process that used the SMs disturbs it (any SM utilisation above zero in
the driver's samples from ``LOOKBACK_S`` before the point to its end: the driver samples a process a
few times a second, so a point of milliseconds alone could fall between two samples of a busy one).
A foreign process that holds a context, was there before and after the point, and whose every sample
in that window says 0% SM is *idle*: it shares the GPU's memory, not its time, and is written down as
seen (``seen idle``), not as a disturbance. One without a sample in the window, or one that appeared
during the point, cannot be told idle and disturbs it. A
process of this same pipeline run (a descendant of the Snakemake process this one descends from) is
named as such: under the run's own lock none of them should be on the GPU at all. Where the driver
gives no per-process samples, a listed foreign process cannot be told idle and disturbs the point, as
before. A point is timed again up to ``RETRIES`` times, ``RETRY_PAUSE_S`` apart; the first
undisturbed attempt is the result. Where the question cannot be asked (no NVML, no handle for the GPU,
the driver lists no process at all, not even this one) the point is timed once as before and its
description says ``unchecked: ...``, never ``none``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from ..results.outcome import DISTURBED
from ..gpu.nvml import KINDS, nvml
from .processes import own_pids, process_name, run_pids

RETRIES = 2              # tries after the first, for a disturbed point
RETRY_PAUSE_S = 1.0      # between tries: a short burst of other work may be over by then
LOOKBACK_S = 2.0         # SM samples read from this long before a point: a busy process has one there


# This process as NVML lists it when NVML's PIDs are another namespace's, and the GPU processes that
# were there before it started CUDA (note_before_cuda): per process, forked children start afresh.
_state: dict[str, object] = {}


def _mine(key: str):
    got = _state.get(key)
    return got[1] if isinstance(got, tuple) and got[0] == os.getpid() else None


def _keep(key: str, value) -> None:
    _state[key] = (os.getpid(), value)


def note_before_cuda_once() -> None:
    """``note_before_cuda`` the first time in this process (a worker that serves several stages makes
    later stages' workers after CUDA has started here); a forked child notes again."""
    if not _mine("noted"):
        _keep("noted", True)
        note_before_cuda()


def note_before_cuda() -> None:
    """List the processes on every GPU before CUDA starts in this process, so that its own entry can be
    told later when NVML's PIDs are not this namespace's. Call it before the first CUDA call; harmless
    without a driver."""
    lib = nvml()
    count = lib.count() if lib is not None else None
    if count is None:
        return
    seen: set[int] = set()
    for i in range(count):
        handle = lib.handle_by_index(i)
        if handle is None:
            return
        for kind in KINDS:
            seen |= {pid for pid, _ in lib.processes(handle, kind) or ()}
    _keep("before_cuda", seen)


# -------------------------------------------------------------------------------------- a look
@dataclass
class Other:
    """A foreign process as seen during one attempt."""
    pid: int
    name: str | None = None
    kinds: set[str] = field(default_factory=set)  # compute, mps, graphics
    used_bytes: int | None = None
    when: list[str] = field(default_factory=list)  # before, after
    sm_pct: int | None = None                      # the highest SM utilisation sampled
    sampled: bool = True                           # the driver gave per-process samples
    this_run: bool = False                         # a process of this same pipeline run

    @property
    def busy(self) -> bool:
        """It used the SMs in the window, or it cannot be told idle: no per-process samples from the
        driver, no sample of it in the window, or it appeared during the point (its first kernels may
        not be sampled yet). Idle: there before and after, sampled, never above 0% SM."""
        return not self.sampled or self.sm_pct is None or self.sm_pct > 0 or "before" not in self.when

    def describe(self) -> str:
        parts = ["/".join(sorted(self.kinds))] if self.kinds else []
        if self.used_bytes is not None:
            parts.append(f"{self.used_bytes / 2**20:.0f} MiB")
        parts.append(", ".join(self.when) if self.when else "not listed before or after")
        if self.sm_pct is not None:
            parts.append(f"SM {self.sm_pct}%")
        elif self.sampled:
            parts.append("not sampled")
        if self.this_run:
            parts.append("a job of this run")
        return f"pid {self.pid}{' ' + self.name if self.name else ''} ({'; '.join(parts)})"


@dataclass(frozen=True)
class Seen:
    """What one attempt saw: ``checked`` False when the driver could not be asked (``note`` says why);
    else the foreign processes (``others``), and a remark on how our own process was told (``note``)."""
    checked: bool
    others: tuple[Other, ...] = ()
    note: str = ""

    @property
    def busy(self) -> tuple[Other, ...]:
        return tuple(o for o in self.others if o.busy)

    @property
    def disturbed(self) -> bool:
        return self.checked and bool(self.busy)

    def describe(self) -> str:
        """What was seen: ``none`` (nothing else, or only idle processes: ``none busy; seen idle: ...``),
        else the busy processes; ``unchecked: ...`` where the driver could not be asked."""
        if not self.checked:
            return f"unchecked: {self.note}"
        idle = [o for o in self.others if not o.busy]
        if self.busy:
            text = "; ".join(o.describe() for o in self.busy)
            text += f"; seen idle: {'; '.join(o.describe() for o in idle)}" if idle else ""
        else:
            text = f"none busy; seen idle: {'; '.join(o.describe() for o in idle)}" if idle else "none"
        return f"{text} ({self.note})" if self.note else text


class Watch:
    """The look before (``start``) and after (``seen``) each timed attempt on one GPU."""

    def __init__(self, lib, handle, why_not: str = ""):
        self.lib, self.handle, self.why_not = lib, handle, why_not
        self.since_us = 0
        self.before: list[tuple[str, int, int | None]] | None = None

    @classmethod
    def on(cls, pci_bus_id: str) -> "Watch":
        """The watch of the GPU at ``pci_bus_id`` (as CUDA gives it); an unchecking one without NVML."""
        lib = nvml()
        if lib is None:
            return cls(None, None, "no NVML")
        handle = lib.handle_by_pci(pci_bus_id)
        if handle is None:
            return cls(None, None, f"NVML knows no GPU at {pci_bus_id}")
        return cls(lib, handle)

    def _look(self) -> list[tuple[str, int, int | None]] | None:
        """(kind, pid, used bytes) of every process NVML lists on the GPU (None: the compute list
        cannot be read; a missing graphics or MPS list is no loss on a compute GPU)."""
        out = []
        for kind in KINDS:
            got = self.lib.processes(self.handle, kind)
            if got is None and kind == "compute":
                return None
            out += [(kind, pid, used) for pid, used in got or ()]
        return out

    def start(self) -> None:
        self.since_us = int(time.time() * 1e6)  # NVML's sample time stamps: microseconds, CPU clock
        self.before = self._look() if self.lib is not None else None

    def seen(self) -> Seen:
        if self.lib is None:
            return Seen(False, note=self.why_not)
        after = self._look()
        if self.before is None or after is None:
            return Seen(False, note="NVML cannot list the processes on this GPU")
        samples = self.lib.utilisation(self.handle, self.since_us - int(LOOKBACK_S * 1e6))
        listed = {pid for _, pid, _ in self.before + after}
        if not listed:
            return Seen(False, note="NVML lists no process on this GPU, not even this one")
        ours, same, note = self._ours(listed, samples or [])
        others: dict[int, Other] = {}
        for when, look in (("before", self.before), ("after", after)):
            for kind, pid, used in look:
                if pid in ours:
                    continue
                o = others.setdefault(pid, Other(pid))
                o.kinds.add(kind)
                if used is not None:
                    o.used_bytes = max(used, o.used_bytes or 0)
                if when not in o.when:
                    o.when.append(when)
        for pid, sm in samples or ():
            if pid in ours or (sm <= 0 and pid not in others):
                continue
            o = others.setdefault(pid, Other(pid))
            o.sm_pct = max(sm, o.sm_pct or 0)
        run = run_pids() if same and others else set()
        for o in others.values():
            o.name = process_name(self.lib, o.pid, same)
            o.sampled = samples is not None
            o.this_run = o.pid in run
        if samples is None:
            note = "; ".join(filter(None, [note, "process lists only: no per-process utilisation"]))
        return Seen(True, tuple(sorted(others.values(), key=lambda o: o.pid)), note)

    def _ours(self, listed: set[int], samples: list[tuple[int, int]]) -> tuple[set[int], bool, str]:
        """(the PIDs among NVML's that are the pipeline's own, whether NVML's PIDs are this namespace's,
        a note on how this process was told)."""
        me = os.getpid()
        if me in listed:  # this namespace's PIDs: this process, its ancestors and descendants
            others = (listed | {pid for pid, _ in samples}) - {me}
            return (own_pids() if others else {me}), True, ""
        known = self._own_elsewhere(listed)
        if known is not None:
            return {known}, False, f"this process is pid {known} to NVML"
        if len(listed) == 1:
            (only,) = listed
            return {only}, False, f"this process taken as the one listed, pid {only} to NVML"
        return set(), False, (f"NVML's PIDs are another namespace's: this process (pid {me} here) is one of "
                              f"the {len(listed)} listed and cannot be told apart")

    def _own_elsewhere(self, listed: set[int]) -> int | None:
        """This process's PID as NVML lists it, when that is not ``os.getpid()`` (a container): the one
        entry that was not there before this process started CUDA; None when that cannot be told."""
        known = _mine("self_as_listed")
        if known is not None:
            return known
        before = _mine("before_cuda")
        if before is not None:
            new = listed - before
            if len(new) == 1:
                (pid,) = new
                _keep("self_as_listed", pid)
                return pid
        return None


T = TypeVar("T")


def undisturbed(measure: Callable[[], T], watch: Watch, *, retries: int | None = None,
                pause_s: float | None = None) -> tuple[T, str, bool]:
    """``measure()`` watched by ``watch``, tried again up to ``retries`` (``RETRIES``) times, ``pause_s``
    (``RETRY_PAUSE_S``) apart, while other work shared the GPU: (the result of the last try, what was
    seen, whether it was disturbed). A clean try after disturbed ones says so; an unchecked one is not
    tried again."""
    retries = RETRIES if retries is None else retries
    pause_s = RETRY_PAUSE_S if pause_s is None else pause_s
    history = []
    tries = 1 + retries
    for attempt in range(1, tries + 1):
        watch.start()
        result = measure()
        seen = watch.seen()
        if not seen.disturbed:
            text = seen.describe()
            if history:
                text += f"; clean on try {attempt} of {tries}, after: " + " / ".join(history)
            return result, text, False
        history.append(seen.describe())
        if attempt < tries and pause_s > 0:
            time.sleep(pause_s)
    head = f"all {tries} tries disturbed; last:" if tries > 1 else "the one try disturbed:"
    return result, f"{head} {history[-1]}", True


def log_note(row: dict) -> str:
    """What a bench row's log line adds about other work on the GPU: nothing for a point that was
    checked and clean on its first try (or timed on the CPU)."""
    text = str(row.get("disturbance") or "")
    if row.get("status") == DISTURBED:
        return f" DISTURBED by other work on the GPU: {text}"
    if text.startswith("unchecked: "):
        return f" [other work on the GPU not checked: {text.removeprefix('unchecked: ')}]"
    if "; clean on try " in text:
        return f" [{text}]"
    return ""
