"""The pipeline's step bodies by rule name, the one place ``sgemm_lab.entry`` (and tests) take them from.

Each lives in the module of ``sgemm_lab.pipeline`` named after its rule: ``environment`` (environment,
ceilings), ``build``, ``points`` (check, bench), ``sweep``, ``epilogue``, ``profile``, ``sanitize``,
``failures`` (failure_tests) and ``report`` (aggregate, plot, report, rerender); ``common`` holds what they share
(seeds, the concrete spec of an implementation, provenance columns). The shape sweep and the build of a
dispatch stage are in ``sgemm_lab.dispatch_steps``.

A step writes its results and returns None when all is well, or a ``StepStatus`` saying what is wrong
with what it measured (a check that failed, points that did not verify, a tool that is unavailable).
Errors it cannot get past are raised (LabError); ``entry`` turns them into one line and a status.
"""

from .pipeline.build import _epilogue_variants, build
from .pipeline.common import add_provenance, base_seed, load_spec, machine, point_problems, point_seed
from .pipeline.environment import ceilings, environment
from .pipeline.epilogue import epilogue
from .pipeline.failures import failure_tests
from .pipeline.points import BENCH_COLUMNS, bench, check, point_worker
from .pipeline.profile import PROFILE_COLUMNS, profile
from .pipeline.report import aggregate, plot, report, rerender
from .pipeline.sanitize import SANITIZE_COLUMNS, sanitize
from .pipeline.sweep import sweep, sweep_worker, time_points

__all__ = ["BENCH_COLUMNS", "PROFILE_COLUMNS", "SANITIZE_COLUMNS", "_epilogue_variants", "add_provenance",
           "aggregate", "base_seed", "bench", "build", "ceilings", "check", "environment", "epilogue",
           "failure_tests", "load_spec", "machine", "plot", "point_problems", "point_seed", "point_worker",
           "profile", "report", "rerender", "sanitize", "sweep", "sweep_worker", "time_points"]
