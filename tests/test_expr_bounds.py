"""Bounded evaluation of config expressions, and the bounds on parameter values and sweep grids.

Every case that used to hang or exhaust memory runs in a fresh interpreter under a timeout
(``GUARD_S``) and a cap on its address space (``GUARD_BYTES``): a regression then fails the test
instead of hanging the suite or filling the machine's memory (a computation such as 10 ** 10 ** 10
runs in C and cannot be interrupted by a signal handler).
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT, kernel_entry

from sgemm_lab.config import expr, geometry
from sgemm_lab.config import load as cfgmod
from sgemm_lab.errors import ConfigError

GUARD_S = 20  # "does not hang": each guarded case takes well under a second
GUARD_BYTES = 4 << 30  # address space of a guarded interpreter

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
PARAMS = {"BM": 64, "BN": 64, "BK": 8, "TM": 8}


def _guarded(script: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """``script`` in a fresh interpreter, limited to GUARD_BYTES of memory and killed after GUARD_S."""
    limit = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({GUARD_BYTES}, {GUARD_BYTES}))\n"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, "-c", limit + script, *args], input=stdin, cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=GUARD_S)


# -- expr, unit level ------------------------------------------------------------------------------

_EVAL_SCRIPT = """
import json, sys
from sgemm_lab.config import expr
out = []
for text, env in json.load(sys.stdin):
    try:
        out.append({"value": expr.evaluate(text, env, key="shared_bytes")})
    except Exception as exc:
        out.append({"type": type(exc).__name__, "error": str(exc)})
print(json.dumps(out))
"""

REFUSED = [
    # powers: refused before they are computed
    ("10 ** 10 ** 10", {}, "10 ** 10 ** 10 is beyond int64 (exponent at most 62)"),
    ("2 ** 63", {}, "2 ** 63 is beyond int64 (exponent at most 62)"),
    ("BM ** 100", {"BM": 2}, "BM ** 100 is beyond int64 (exponent at most 62)"),
    ("3 ** 40", {}, "3 ** 40 is beyond int64"),  # within the exponent bound, beyond int64 all the same
    ("BM ** -1", {"BM": 2}, "negative exponent"),
    # shifts
    ("1 << (1 << 62)", {}, "1 << (1 << 62) is beyond int64 (shift at most 63)"),
    ("1 << 64", {}, "1 << 64 is beyond int64 (shift at most 63)"),
    ("1 << 63", {}, "1 << 63 is beyond int64"),
    ("BM << -1", {"BM": 2}, "BM << -1 shifts by a negative amount"),
    ("BM >> -1", {"BM": 2}, "BM >> -1 shifts by a negative amount"),
    # literals and parameter values
    ("9223372036854775808", {}, "literal 9223372036854775808 is beyond int64"),
    ("100000000000000000000000 > 0", {}, "literal 100000000000000000000000 is beyond int64"),
    ("0x" + "f" * 900, {}, "is beyond int64"),
    ("BM + 1", {"BM": 2**63}, "BM = 9223372036854775808 is beyond int64"),
    ("BM - 1", {"BM": 10**400}, "BM = (an integer of 1329 bits) is beyond int64"),
    # intermediate results
    ("BM * BM * BM == 0", {"BM": 2**32}, "BM * BM is beyond int64"),
    ("9223372036854775807 + 1", {}, "is beyond int64"),
    ("(-9223372036854775807 - 1) // -1", {}, "is beyond int64"),
    ("-(-9223372036854775807 - 1)", {}, "is beyond int64"),
    ("max(BM * BM, 1)", {"BM": 2**40}, "BM * BM is beyond int64"),
    # nesting and length
    ("2 ** 2 ** 2 ** 2 ** 2 ** 2", {}, "is beyond int64 (exponent at most 62)"),
    ("-" * 500 + "1", {}, "nested more than 100 deep"),
    ("+".join(["1"] * 400), {}, "nested more than 100 deep"),
    ("1" + " + 1" * 400, {}, "longer than 1000 characters"),
    # division by zero, arity
    ("BM // (TM - 8)", {"BM": 64, "TM": 8}, "division by zero"),
    ("BM % 0", {"BM": 64}, "division by zero"),
    ("min(BM)", {"BM": 64}, "min() needs at least two arguments"),
    ("max()", {}, "max() needs at least two arguments"),
]

ACCEPTED = [
    ("2 ** 62", {}, 2**62),
    ("1 << 62", {}, 2**62),
    ("-1 << 63", {}, INT64_MIN),
    ("9223372036854775807", {}, INT64_MAX),
    ("-9223372036854775807 - 1", {}, INT64_MIN),
    ("0 << (1 << 62)", {}, 0),
    ("BM >> (1 << 62)", {"BM": 2**62}, 0),
    ("-BM >> 100", {"BM": 5}, -1),
    ("(-1) ** (1 << 62)", {}, 1),
    ("1 ** 9223372036854775807", {}, 1),
    ("0 ** 0", {}, 1),
    ("BM * BN == 2 ** 62", {"BM": 2**31, "BN": 2**31}, True),
    ("-BM // 3", {"BM": 64}, -22),
    ("4 * STAGES * (BM * (BK + 4) + BK * (BN + 4))", {"STAGES": 3, "BM": 128, "BK": 32, "BN": 128}, 105984),
]


@pytest.fixture(scope="module")
def evaluated():
    cases = [(t, e) for t, e, _ in REFUSED + ACCEPTED]
    assert len({t for t, _ in cases}) == len(cases)
    proc = _guarded(_EVAL_SCRIPT, stdin=json.dumps(cases))
    assert proc.returncode == 0, proc.stderr
    return dict(zip((t for t, _ in cases), json.loads(proc.stdout)))


@pytest.mark.parametrize("text, env, needle", REFUSED, ids=[t[:40] for t, _, _ in REFUSED])
def test_out_of_bounds_expressions_are_refused_in_one_line(evaluated, text, env, needle):
    got = evaluated[text]
    assert got.get("type") == "ConfigError", got
    msg = got["error"]
    assert needle in msg and "\n" not in msg
    assert msg.startswith("shared_bytes '")  # the key, then the text (shortened when long)
    assert msg.startswith(f"shared_bytes '{text}': ") or len(text) > 120


@pytest.mark.parametrize("text, env, value", ACCEPTED, ids=[t[:40] for t, _, _ in ACCEPTED])
def test_values_within_int64_evaluate(evaluated, text, env, value):
    assert evaluated[text] == {"value": value}


def test_refusal_names_the_key_and_keeps_the_default_wording():
    with pytest.raises(ConfigError, match=r"^constraints\[2\] 'BM % TM == 0': division by zero$"):
        expr.evaluate("BM % TM == 0", {"BM": 64, "TM": 0}, key="constraints[2]")
    with pytest.raises(ConfigError, match=r"^expression 'BM // 0': division by zero$"):
        expr.evaluate("BM // 0", {"BM": 64})
    with pytest.raises(ConfigError, match=r"^micro_tile\[1\] 'BM \+': not valid syntax$"):
        expr.names("BM +", key="micro_tile[1]")


# -- through the config ----------------------------------------------------------------------------

_LOAD_SCRIPT = """
import json, sys
from sgemm_lab.config import load as config
try:
    if sys.argv[1].endswith(".json"):
        with open(sys.argv[1]) as fh:
            config.from_dict(json.load(fh))
    else:
        config.load(sys.argv[1])
    print(json.dumps({"type": None}))
except Exception as exc:
    print(json.dumps({"type": type(exc).__name__, "error": str(exc)}))
"""


def _refusal(tmp_path, raw: dict, *, as_yaml: bool = False) -> str:
    """The one-line ConfigError that from_dict (or load, from a YAML file) gives ``raw``, in a fresh,
    guarded interpreter."""
    path = tmp_path / ("config.yaml" if as_yaml else "config.json")
    path.write_text(yaml.safe_dump(raw) if as_yaml else json.dumps(raw))
    proc = _guarded(_LOAD_SCRIPT, str(path))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["type"] == "ConfigError", got
    msg = got["error"]
    assert "\n" not in msg and "Traceback" not in msg
    return msg


@pytest.mark.parametrize("over, as_yaml, needle", [
    (dict(shared_bytes="10 ** 10 ** 10"), True,
     "kernel 99_test: shared_bytes '10 ** 10 ** 10': 10 ** 10 ** 10 is beyond int64 (exponent at most 62)"),
    (dict(shared_bytes="1 << (1 << 62)"), False,
     "kernel 99_test: shared_bytes '1 << (1 << 62)': 1 << (1 << 62) is beyond int64 (shift at most 63)"),
    (dict(params={**PARAMS, "TM": 0}), False, "kernel 99_test: parameter(s) TM must be positive"),
    (dict(params={**PARAMS, "TN": 0}, micro_tile=["TM", "TN"]), False, "kernel 99_test: parameter(s) TN must be positive"),
    (dict(params={**PARAMS, "BM": 100000000000000000000000}), True,
     "kernel 99_test: params.BM 100000000000000000000000 is beyond int64"),
    (dict(params={**PARAMS, "BM": 2**63}), False, "kernel 99_test: params.BM 9223372036854775808 is beyond int64"),
    (dict(sweep={n: list(range(1, 21)) for n in ("BM", "BN", "BK", "TM")}), False,
     "kernel 99_test: sweep expands to 160000 points (at most 100000)"),
    (dict(sweep=[{"BM": [64]}, {"BM": [32, 2**64]}]), False, "kernel 99_test: sweep[1].BM value 18446744073709551616 is beyond int64"),
    (dict(constraints=["BM % TM == 0", "BM ** 8 * BM ** 8 > 0"]), False,
     "kernel 99_test: constraints[1] 'BM ** 8 * BM ** 8 > 0': BM ** 8 * BM ** 8 is beyond int64"),
    (dict(constraints=["BM // (TM - 8) > 0"]), False, "kernel 99_test: constraints[0] 'BM // (TM - 8) > 0': division by zero"),
    (dict(constraints=["BM ** 99 > 0"]), False, "kernel 99_test: constraints[0] 'BM ** 99 > 0': BM ** 99 is beyond int64"),
    (dict(micro_tile=["TM - 8", "1"]), False, "kernel 99_test: micro_tile[0] 'TM - 8' is 0, must be positive"),
    (dict(micro_tile=["TM", "BM // (TM - 8)"]), False, "kernel 99_test: micro_tile[1] 'BM // (TM - 8)': division by zero"),
    (dict(micro_tile=["TM", "WN"]), False, "kernel 99_test: micro_tile[1] 'WN' uses unknown parameter(s) WN"),
    (dict(tensor_maps=[{"symbol": "tma_a", "operand": "A", "box": ["BK", "1 << 70"]}]), False,
     "kernel 99_test: tensor_maps[0].box[1] '1 << 70': 1 << 70 is beyond int64 (shift at most 63)"),
    (dict(tensor_maps=[{"symbol": "tma_a", "operand": "A", "box": [8, 2**64]}]), True,
     "kernel 99_test: tensor_maps[0].box[1] '18446744073709551616': literal 18446744073709551616 is beyond int64"),
    (dict(constraints=["BM +"]), False, "kernel 99_test: constraints[0] 'BM +': not valid syntax"),
], ids=["pow-tower", "shift", "TM0", "TN0", "huge-param-yaml", "param-2^63", "huge-sweep", "sweep-value", "mul-overflow",
        "div0", "pow-constraint", "micro-tile-0", "micro-tile-div0", "micro-tile-name", "box-shift", "box-literal",
        "syntax"])
def test_config_refuses_in_one_line_naming_stage_and_key(tmp_path, over, as_yaml, needle):
    msg = _refusal(tmp_path, {"kernels": [kernel_entry(**over)]}, as_yaml=as_yaml)
    assert needle in msg
    source = str(tmp_path / "config.yaml") if as_yaml else "config"
    assert msg.startswith(f"{source}: kernel 99_test: ")


def test_dispatch_candidate_beyond_int64_is_refused(tmp_path):
    raw = {"kernels": [kernel_entry(), {"id": "98_dispatch", "title": "d", "dispatch_from": "99_test",
                                        "candidates": [{"TM": 4}, {"BM": 2**70}]}]}
    msg = _refusal(tmp_path, raw)
    assert "kernel 98_dispatch: candidates[1]: kernel 99_test: params.BM 1180591620717411303424 is beyond int64" in msg


def test_sweep_at_the_bound_is_accepted_and_one_more_point_is_not():
    assert geometry.MAX_SWEEP_POINTS == 100_000
    at_bound = {"BM": list(range(1, 101)), "BN": list(range(1, 1001))}
    spec = cfgmod.from_dict({"kernels": [kernel_entry(sweep=at_bound)]}).kernels[0]
    assert geometry.sweep_size(spec) == 100_000
    with pytest.raises(ConfigError, match=r"kernel 99_test: sweep expands to 100001 points \(at most 100000\)"):
        cfgmod.from_dict({"kernels": [kernel_entry(sweep=[at_bound, {"TM": [4]}])]})


_SWEEP_SCRIPT = """
from dataclasses import replace
from sgemm_lab.config import load as config
from sgemm_lab.dispatch import autotune
from sgemm_lab.errors import ConfigError
spec = config.from_dict({"kernels": [{"id": "99_test", "title": "t", "source": "04_1d_blocktiling.cu",
    "entry": "e", "geometry": "block_tile", "params": {"BM": 64, "BN": 64, "BK": 8, "TM": 8}}]}).kernels[0]
huge = replace(spec, sweep=({n: tuple(range(1, 101)) for n in ("BM", "BN", "BK", "TM", "TN")},))  # 10^10 points
try:
    print(len(autotune.sweep_points(huge)))
except ConfigError as exc:
    print(exc)
"""


def test_sweep_points_refuse_an_oversized_grid_without_expanding_it():
    proc = _guarded(_SWEEP_SCRIPT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "kernel 99_test: sweep expands to 10000000000 points (at most 100000)"


def test_sweep_point_with_an_overflowing_expression_names_stage_and_key():
    """A point that only a sweep reaches: refused, when its expressions are evaluated, with the stage and key."""
    spec = cfgmod.from_dict({"kernels": [kernel_entry(shared_bytes="4 * BK * (BM + BN)", sweep={"BK": [8, 2**62]})]}).kernels[0]
    point = spec.with_params(BK=2**62)
    with pytest.raises(ConfigError, match=r"^kernel 99_test: shared_bytes '4 \* BK \* \(BM \+ BN\)': 4 \* BK is beyond int64$"):
        geometry.violations(point)
    with pytest.raises(ConfigError, match=r"^kernel 99_test: shared_bytes"):
        geometry.shared_bytes(point)


def test_thread_count_beyond_int64_is_a_violation_not_an_error():
    spec = cfgmod.from_dict({"kernels": [kernel_entry(constraints=["THREADS > 0"])]}).kernels[0]
    point = spec.with_params(BM=2**40, BN=2**40, TM=1)  # THREADS = 2**80
    assert geometry.violations(point) == [f"{2**80} threads per block (limit 1024)"]


def test_valid_configs_still_load(lab):
    tiles = [geometry.micro_tile(k) for k in lab.kernels if k.geometry == "block_tile"]
    assert tiles and all(v >= 1 for tile in tiles for v in tile)


# -- the workflow ----------------------------------------------------------------------------------


@pytest.fixture
def workflow_copy(tmp_path):
    dst = tmp_path / "lab"
    dst.mkdir()
    for item in ("Snakefile", "workflow", "config", "kernels", "src", "env"):
        src = ROOT / item
        if src.is_dir():
            shutil.copytree(src, dst / item, ignore=shutil.ignore_patterns("__pycache__", ".venv*"))
        elif src.exists():
            shutil.copy(src, dst / item)
    return dst


def test_dry_run_refuses_an_unbounded_shared_bytes_without_hanging(workflow_copy):
    raw = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    stage = next(k for k in raw["kernels"] if "shared_bytes" in k and not k.get("tune_from"))
    stage["shared_bytes"] = "10 ** 10 ** 10"
    (workflow_copy / "overlay.yaml").write_text(yaml.safe_dump({"kernels": raw["kernels"]}))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", "overlay.yaml"], cwd=workflow_copy,
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "Traceback" not in out
    lines = [ln for ln in out.splitlines() if "is beyond int64" in ln]
    assert len(lines) == 1, out
    assert (f"kernel {stage['id']}: shared_bytes '10 ** 10 ** 10': 10 ** 10 ** 10 is beyond int64 "
            "(exponent at most 62)") in lines[0]
