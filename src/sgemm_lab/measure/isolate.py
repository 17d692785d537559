"""Run the points of a job in a child process, with a watchdog, so that no point can take the others down.

A hanging kernel, a CUDA error that poisons the context (illegal address, launch failure) or a crash of
the process end that one point: it becomes a row with a status (``timeout``, ``error``, ``crashed``)
and a fresh child process, with a fresh CUDA context, carries on with the next point. Results are
streamed back point by point, so nothing measured before a failure is lost.

The child builds its worker once with ``factory(*args)``, then calls ``worker(point)`` for each point;
``worker(point)`` returns a list of result rows. ``factory`` is a module-level function: a spawned child
imports its module by name when it unpickles it, a forked one has it already.

``gate`` (a context manager, e.g. the GPU lock) is entered once the first child has started (and, spawned,
imported the factory's module) and before it builds the worker, and left when all points are done: process start
and imports overlap whatever holds the gate, the GPU work does not.

Children are forked when they can be: they start in milliseconds with the parent's modules already
imported, instead of a fresh interpreter importing NumPy and the harness again (about a second per
job). A process that has initialised CUDA cannot hand it to a forked child, so such a parent (a test
that queried the GPU, say) gets fresh interpreters (spawn) instead.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
import traceback
from dataclasses import dataclass
from contextlib import ExitStack
from typing import Any, Callable, ContextManager, Iterator


# Errors from these modules may leave the CUDA context unusable: the child ends and a fresh one takes the
# next point (PyCUDA's driver errors, nvmath's cuBLAS bindings, cuda-bindings).
CUDA_MODULES = ("pycuda", "nvmath", "cuda")


@dataclass(frozen=True)
class Outcome:
    index: int
    point: Any
    status: str            # ok | error | timeout | crashed
    rows: list | None = None
    message: str = ""


def _child(conn, go, handoff, factory: Callable, args: tuple, points: list, first: int) -> None:
    try:
        make = factory
        conn.send(("ready", first, None, None))
        go.wait()
        from .gpulock import take_handoff

        take_handoff(handoff.value.decode())  # the GPU the step's lock gave it (before CUDA starts here)
        worker = make(*args)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which records it
        conn.send(("init_error", first, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                   traceback.format_exc()))
        return
    for i, point in enumerate(points, start=first):
        conn.send(("start", i, None, None))
        try:
            rows = worker(point)
        except BaseException as exc:  # noqa: BLE001
            msg = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            fatal = type(exc).__module__.startswith(CUDA_MODULES)  # the context may be unusable now
            conn.send(("error", i, msg, traceback.format_exc()))
            if fatal:
                conn.send(("restart", None, None, None))
                return
            continue
        conn.send(("ok", i, rows, None))
    conn.send(("done", None, None, None))


def per_stage(make: Callable[[str], Callable]) -> Callable:
    """A worker for the points of several stages in one child (a batch job): a point is
    ``(stage, *point)``; ``make(stage)`` builds that stage's worker when its first point comes, and the
    one before it is dropped (its GPU buffers freed), so the CUDA context, the libraries' handles and the
    warm clock carry over from stage to stage."""
    import gc

    state: dict = {}

    def work(point):
        stage, rest = point[0], tuple(point[1:])
        if state.get("stage") != stage:
            state.clear()
            gc.collect()
            state.update(stage=stage, work=make(stage))
        return state["work"](rest)

    return work


def default_start_method() -> str:
    gpu = sys.modules.get("sgemm_lab.gpu.device")
    return "spawn" if gpu is not None and gpu.driver_initialised() else "fork"


def run_split(points: list, gates: list, *, factory: Callable, args: tuple = (), timeout_s: float, log=None,
              on_outcome: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """``run`` with the points dealt round-robin over ``len(gates)`` supervisors that run side by side,
    one per gate (e.g. the locks of several GPUs, each supervisor on the GPU its lock gives): the
    outcomes of all points, ordered by point as ``run`` gives them; ``on_outcome`` sees each as it
    arrives. Children are spawned (fresh interpreters): forking from a process with several threads
    is not safe."""
    import threading

    if len(gates) <= 1:
        out = []
        for o in run(points, factory=factory, args=args, timeout_s=timeout_s, log=log,
                     gate=gates[0] if gates else None):
            out.append(o)
            if on_outcome:
                on_outcome(o)
        return out
    shares = [list(range(i, len(points), len(gates))) for i in range(len(gates))]
    found: dict[int, Outcome] = {}
    errors: list[BaseException] = []
    guard = threading.Lock()

    def supervise(share: list[int], gate) -> None:
        try:
            for o in run([points[i] for i in share], factory=factory, args=args, timeout_s=timeout_s, log=log,
                         start_method="spawn", gate=gate):
                o = Outcome(share[o.index], o.point, o.status, o.rows, o.message)
                with guard:
                    found[o.index] = o
                    if on_outcome:
                        on_outcome(o)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread below
            errors.append(exc)

    threads = [threading.Thread(target=supervise, args=(share, gate), daemon=True)
               for share, gate in zip(shares, gates) if share]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [found[i] for i in range(len(points))]


def run(points: list, *, factory: Callable, args: tuple = (), timeout_s: float, log=None,
        start_method: str | None = None, gate: ContextManager | None = None) -> Iterator[Outcome]:
    """Yield one Outcome per point, in order, whatever happens to the points before it."""
    start_method = start_method or default_start_method()
    with ExitStack() as stack:
        yield from _run(points, factory=factory, args=args, timeout_s=timeout_s, log=log,
                        ctx=mp.get_context(start_method), gate=gate, stack=stack)


def _run(points, *, factory, args, timeout_s, log, ctx, gate, stack) -> Iterator[Outcome]:
    go = ctx.Event()
    handoff = ctx.Array("c", 160)  # set with go: which GPU the gate gave (gpulock.handoff)
    if gate is None:
        go.set()
    next_i = 0
    while next_i < len(points):
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(child, go, handoff, factory, args, points[next_i:], next_i),
                           daemon=True)
        proc.start()
        child.close()
        running, started = None, time.monotonic()
        restart = False
        while not restart:
            if parent.poll(1.0):
                try:
                    kind, i, payload, detail = parent.recv()
                except EOFError:
                    kind = "eof"
            elif not proc.is_alive() and not parent.poll(0):
                kind = "eof"
            else:
                if running is not None and time.monotonic() - started > timeout_s:
                    proc.kill()
                    proc.join()
                    yield Outcome(running, points[running], "timeout",
                                  message=f"no result after {timeout_s:g} s (watchdog); process ended")
                    next_i, restart = running + 1, True
                continue
            if kind == "ready":
                if not go.is_set():
                    stack.enter_context(gate)
                    from .gpulock import handoff as handoff_of

                    handoff.value = handoff_of(gate).encode()
                    go.set()
            elif kind == "start":
                running, started = i, time.monotonic()
            elif kind == "ok":
                yield Outcome(i, points[i], "ok", rows=payload)
                running, next_i = None, i + 1
            elif kind == "error":
                if log is not None and detail:
                    log.debug("%s", detail)
                yield Outcome(i, points[i], "error", message=payload)
                running, next_i = None, i + 1
            elif kind == "init_error":
                if log is not None and detail:
                    log.debug("%s", detail)
                for j in range(next_i, len(points)):
                    yield Outcome(j, points[j], "error", message=f"worker could not start: {payload}")
                next_i, restart = len(points), True
            elif kind == "restart":  # the child ended itself after a fatal error; the next point gets a new one
                restart = True
            elif kind == "done":
                next_i, restart = len(points), True
            elif kind == "eof":
                proc.join()
                # died inside a point, or before starting one (then the next point is charged, so that a
                # child that cannot even start never loops forever)
                at = running if running is not None else next_i
                when = "" if running is not None else " before starting"
                yield Outcome(at, points[at], "crashed", message=f"process died{when} (exit code {proc.exitcode})")
                next_i = at + 1
                restart = True
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
        parent.close()
