"""The supervisor that keeps one bad point (hang, crash, exception) from stopping the others."""

import os
import time

from sgemm_lab.measure import isolate


class FakeCudaError(RuntimeError):
    pass


FakeCudaError.__module__ = "pycuda._driver"


def fake_worker(kind_by_point: dict):
    def work(point):
        kind = kind_by_point.get(point, "ok")
        if kind == "hang":
            time.sleep(60)
        if kind == "crash":
            os._exit(3)
        if kind == "raise":
            raise ValueError(f"bad point {point}")
        if kind == "fatal":  # what a CUDA error looks like: the context is unusable afterwards
            raise FakeCudaError(f"illegal address at point {point}")
        return [{"point": point, "pid": os.getpid()}]

    return work


def broken_factory():
    raise ImportError("no module named 'a_stage_that_is_not_there'")


def test_every_point_gets_an_outcome_in_order():
    points = list(range(7))
    kinds = {1: "raise", 3: "hang", 5: "crash"}
    out = list(isolate.run(points, factory=fake_worker, args=(kinds,), timeout_s=2,
                           start_method="fork"))
    assert [o.index for o in out] == points
    assert [o.status for o in out] == ["ok", "error", "ok", "timeout", "ok", "crashed", "ok"]
    assert "bad point 1" in out[1].message and "watchdog" in out[3].message and "exit code 3" in out[5].message
    pids = [o.rows[0]["pid"] for o in out if o.status == "ok"]
    assert len(set(pids)) == 3  # a fresh process after the hang and after the crash, not after an exception
    assert all(pid != os.getpid() for pid in pids)


def test_a_worker_that_cannot_start_fails_every_point():
    out = list(isolate.run([1, 2], factory=broken_factory, timeout_s=5, start_method="fork"))
    assert [o.status for o in out] == ["error", "error"] and "could not start" in out[0].message


class CountingGate:
    def __init__(self):
        self.entered = self.exited = 0

    def __enter__(self):
        self.entered += 1
        return self

    def __exit__(self, *exc):
        self.exited += 1
        return False


def test_the_gate_is_held_once_across_restarts_and_released_at_the_end():
    gate = CountingGate()
    seen = []
    for o in isolate.run([0, 1, 2], factory=fake_worker, args=({1: "crash"},), timeout_s=5,
                         start_method="fork", gate=gate):
        seen.append((o.status, gate.entered, gate.exited))
    assert seen == [("ok", 1, 0), ("crashed", 1, 0), ("ok", 1, 0)]  # points run inside the gate
    assert (gate.entered, gate.exited) == (1, 1)


def _unloadable(message):
    raise ImportError(message)


class UnloadableFactory:
    """A factory whose module a spawned child cannot import: unpickling it there raises."""

    def __reduce__(self):
        return (_unloadable, ("no module named 'a_stage_that_is_not_there'",))

    def __call__(self, *args):
        return fake_worker({})


def test_a_worker_that_cannot_start_never_takes_the_gate():
    """The child dies importing the factory's module, before it is ready: the gate (the GPU lock) is never
    entered, and the point gets an outcome."""
    gate = CountingGate()
    out = list(isolate.run([1], factory=UnloadableFactory(), timeout_s=30, start_method="spawn", gate=gate))
    assert out[0].status in ("error", "crashed") and gate.entered == 0


def test_after_a_fatal_error_the_next_point_runs_in_a_fresh_process():
    out = list(isolate.run([0, 1, 2, 3], factory=fake_worker, args=({1: "fatal", 2: "fatal"},),
                           timeout_s=5, start_method="fork"))
    assert [o.status for o in out] == ["ok", "error", "error", "ok"]
    assert "illegal address at point 2" in out[2].message  # point 2 ran; it was not charged as a crash
    assert out[0].rows[0]["pid"] != out[3].rows[0]["pid"]


def test_points_split_over_several_gates_all_arrive_in_order_each_gate_held_once():
    gates = [CountingGate(), CountingGate()]
    seen = []
    out = isolate.run_split(list(range(7)), gates, factory=fake_worker, args=({4: "raise"},),
                            timeout_s=20, on_outcome=lambda o: seen.append(o.index))
    assert [o.index for o in out] == list(range(7)) and [o.point for o in out] == list(range(7))
    assert [o.status for o in out] == ["ok"] * 4 + ["error"] + ["ok"] * 2
    assert sorted(seen) == list(range(7))
    assert [(g.entered, g.exited) for g in gates] == [(1, 1), (1, 1)]
    pids = {o.rows[0]["pid"] for o in out if o.status == "ok"}
    assert len(pids) == 2  # one supervisor (and child) per gate, side by side


def test_one_gate_is_the_plain_supervisor():
    gate = CountingGate()
    out = isolate.run_split([1, 2], [gate], factory=fake_worker, args=({},), timeout_s=5)
    assert [o.status for o in out] == ["ok", "ok"] and (gate.entered, gate.exited) == (1, 1)
