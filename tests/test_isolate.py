"""The supervisor that keeps one bad point (hang, crash, exception) from stopping the others."""

import os
import time

from sgemm_lab import isolate


def fake_worker(kind_by_point: dict):
    def work(point):
        kind = kind_by_point.get(point, "ok")
        if kind == "hang":
            time.sleep(60)
        if kind == "crash":
            os._exit(3)
        if kind == "raise":
            raise ValueError(f"bad point {point}")
        return [{"point": point, "pid": os.getpid()}]

    return work


def test_every_point_gets_an_outcome_in_order():
    points = list(range(7))
    kinds = {1: "raise", 3: "hang", 5: "crash"}
    out = list(isolate.run(points, factory="test_isolate:fake_worker", args=(kinds,), timeout_s=2,
                           start_method="fork"))
    assert [o.index for o in out] == points
    assert [o.status for o in out] == ["ok", "error", "ok", "timeout", "ok", "crashed", "ok"]
    assert "bad point 1" in out[1].message and "watchdog" in out[3].message and "exit code 3" in out[5].message
    pids = [o.rows[0]["pid"] for o in out if o.status == "ok"]
    assert len(set(pids)) == 3  # a fresh process after the hang and after the crash, not after an exception
    assert all(pid != os.getpid() for pid in pids)


def test_a_worker_that_cannot_start_fails_every_point():
    out = list(isolate.run([1, 2], factory="test_isolate:no_such_factory", timeout_s=5, start_method="fork"))
    assert [o.status for o in out] == ["error", "error"] and "could not start" in out[0].message
