"""Settings that would make verification vacuous, sizes nothing can hold, and config files that
cannot be read as written: each is one line naming the file and the key, from the library and from
`snakemake -n` with an overlay, with no traceback."""

import subprocess
import sys
import time

import pytest
from conftest import ROOT, kernel_entry, refused

from sgemm_lab.config import load as cfgmod
from sgemm_lab.config.files import Origins, read
from sgemm_lab.errors import ConfigError


@pytest.mark.parametrize("patch, needle", [
    ({"check": {"alpha": 0.0}}, "check.alpha must not be 0: with alpha = 0 the result is beta * C"),
    ({"check": {"alpha": float("nan")}}, "check.alpha must be a finite number, not nan"),
    ({"check": {"beta": 0}}, "check.beta must not be 0: the beta0 mode already checks it"),
    ({"check": {"beta": float("inf")}}, "check.beta must be a finite number, not inf"),
    ({"check": {"tolerance_factor": float("nan")}}, "check.tolerance_factor must be a finite number"),
    ({"check": {"shapes": []}}, "check.shapes must list at least one shape"),
    ({"check": {"alpha": 1e-30}}, "check.alpha (1e-30) must lie between 2^-8 and 2^8 in magnitude"),
    ({"check": {"beta": -1e6}}, "check.beta (-1e+06) must lie between 2^-8 and 2^8"),
    ({"check": {"alpha": 0.001, "beta": 0.002}}, "check.alpha (0.001) must lie between"),
    ({"check": {"alpha": 0.05, "beta": 2.0}}, "check.alpha / check.beta = 0.025: the two must be within a factor of 16"),
    ({"bench": {"warmup_ms": 1e9}}, "bench.warmup_ms"),
    ({"watchdog_s": 1e12}, "watchdog_s"),
    ({"bench": {"max_reps": 10**11}}, "bench.max_reps"),
    ({"sweep": {"jobs": 100000}}, "sweep.jobs"),
    ({"check": {"tolerance_factor": 1e6}}, "check.tolerance_factor"),
    ({"check": {"fp32_factor": 1e6}}, "check.fp32_factor"),
    ({"check": {"distribution_shapes": []}}, "check.distribution_shapes is empty, so check.distributions normal,"),
    ({"check": {"distributions": [{"name": "ints", "kind": "integers", "shapes": [[65536, 65536, 16]]}],
                "distribution_shapes": []}}, "check.distributions[0].shapes[0] 65536x65536x16: C would have"),
    ({"check": {"distributions": [{"name": "ints", "kind": "integers", "shapes": []}]}}, "check.distributions[0].shapes"),
    ({"check": {"distributions": [{"name": "s", "kind": "short", "bits": 0}]}}, "check.distributions[0].bits"),
    ({"check": {"distributions": [{"name": "z", "kind": "sparse", "zeros": 1.0}]}}, "check.distributions[0].zeros"),
    ({"check": {"distributions": [{"name": "i", "kind": "integers", "int_max": 0}]}}, "check.distributions[0].int_max"),
    ({"check": {"distributions": [{"name": "i", "kind": "integers", "bits": 8}]}},
     "check.distributions[0].bits is a parameter of kind short, not of kind integers"),
    ({"check": {"distributions": [{"name": "n", "kind": "normal", "zeros": 0.5}]}},
     "check.distributions[0].zeros is a parameter of kind sparse"),
    ({"check": {"distributions": [{"name": "uniform", "kind": "normal"}]}}, "must not be 'uniform'"),
    ({"check": {"distributions": [{"name": "n", "kind": "normal"}, {"name": "n", "kind": "positive"}]}},
     "'n' is given twice"),
    ({"check": {"distributions": [{"name": "w", "kind": "loguniform", "log2_range": [5, -5]}]}},
     "the first must be below the second"),
    ({"bench": {"shapes": [[100000, 100000, 100000]]}}, "bench.shapes[0] 100000x100000x100000: A would have 1e+10"),
    ({"suite": {"shapes": [[65536, 65536, 16]]}}, "suite.shapes[0] 65536x65536x16: C would have"),
    ({"bench": {"square": [10**9]}}, "bench.square[0]"),
    ({"bench": {"min_reps": 50, "max_reps": 10}}, "bench.min_reps (50) is above bench.max_reps (10)"),
    ({"sweep": {"min_reps": 50, "max_reps": 10}}, "sweep.min_reps (50) is above sweep.max_reps (10)"),
    ({"arch": "sm_1"}, "arch 'sm_1' is not a GPU architecture"),
    ({"seed": 2**64}, "seed"),
])
def test_vacuous_or_impossible_settings_are_refused_in_plain_words(raw_config, patch, needle):
    assert needle in refused(raw_config, patch)


def test_stage_level_refusals(raw_config):
    raw_config["kernels"] = [kernel_entry(), dict(id="98_tuned", title="t", tune_from=["98_tuned"])]
    assert "tune_from of 98_tuned names 98_tuned itself" in refused(raw_config, {})
    raw_config["kernels"] = [kernel_entry(source="00_hostmult.c")]
    assert "kernels[0].source of CUDA stage 99_test is '00_hostmult.c'" in refused(raw_config, {})
    raw_config["kernels"] = [kernel_entry(arch="sm_9")]
    assert "kernels[0].arch 'sm_9'" in refused(raw_config, {})


def test_split_over_waves_only_for_a_source_that_holds_them(raw_config):
    wgmma = next(k for k in raw_config["kernels"] if k["id"] == "18_wgmma_3xtf32")
    wgmma["params"] = {**wgmma["params"], "SPLIT_WAVES": 2}
    assert ("kernels[" in (msg := refused(raw_config, {})) and "SPLIT_WAVES is 2, but kernels/17_wgmma_tf32.cu "
            "never reads SPLIT_WAVES" in msg), msg
    wgmma["params"]["SPLIT_WAVES"] = 1  # a default a candidate may override (else the override is refused anyway)
    dispatch = next(k for k in raw_config["kernels"] if k["id"] == "20_dispatch_3xtf32")
    dispatch["candidates"] = [dict(c) for c in dispatch["candidates"]]
    dispatch["candidates"][1]["SPLIT_WAVES"] = 4  # a candidate builds its base's source
    assert "candidates[1].SPLIT_WAVES is 4, but kernels/17_wgmma_tf32.cu" in refused(raw_config, {})
    # stage 11 and 19 read it: the configured values load
    dispatch["candidates"][1].pop("SPLIT_WAVES")
    cfgmod.from_dict(raw_config)


def test_the_default_configs_stay_valid_and_check_at_long_k(raw_config):
    lab = cfgmod.from_dict(raw_config)
    assert any(s.k == 65536 for s in lab.check.shapes)
    assert {d.kind for d in lab.check.distributions} == {"normal", "loguniform", "positive", "extreme", "integers",
                                                         "short", "sparse"}
    points = lab.check.points()
    assert len(points) == len(lab.check.shapes) + sum(len(d.shapes or lab.check.distribution_shapes)
                                                      for d in lab.check.distributions)
    cfgmod.load(ROOT / ".test" / "config" / "config.yaml")


def test_a_numeric_run_name_is_a_name_and_1e3_a_number(raw_config):
    raw_config["run"] = 2024
    raw_config["bench"]["target_ms"] = "1e3"  # what Snakemake's YAML reader hands over for 1e3
    lab = cfgmod.from_dict(raw_config)
    assert lab.run == "2024" and lab.bench.target_ms == 1000.0


def test_yaml_errors_name_file_line_and_column(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("check:\n  shapes: [[1, 2, 3]\n  alpha: 1\n")
    with pytest.raises(ConfigError) as err:
        read(bad)
    assert str(err.value).startswith(f"{bad}:") and "not valid YAML" in str(err.value)
    assert str(err.value).split(":")[1].isdigit() and str(err.value).split(":")[2].isdigit()
    dup = tmp_path / "dup.yaml"
    dup.write_text("check:\n  beta: 1\n  beta: 2\n")
    with pytest.raises(ConfigError, match=rf"{dup}:3:3: not valid YAML: key 'beta' is given twice \(first on line 2\)"):
        read(dup)
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        read(tmp_path / "list.yaml")
    assert read(_write(tmp_path, "n.yaml", "a: 1e3\nb: -2.5E-3\nc: '1e3'\n")) == {"a": 1000.0, "b": -0.0025, "c": "1e3"}
    # a merge key (<<: *anchor) may bring keys that the mapping then overrides: not a repeated key
    merged = read(_write(tmp_path, "m.yaml", "base: &b {x: 1, y: 2}\nover: {<<: *b, y: 3}\n"))
    assert merged["over"] == {"x": 1, "y": 3}


def _write(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    return tmp_path / name


def test_origins_name_the_file_that_set_a_key():
    base = {"check": {"alpha": 1.25, "beta": -0.75}, "kernels": [{"id": "a"}]}
    over = {"check": {"alpha": 0.0}}
    o = Origins([("config/config.yaml", base), ("overlay.yaml", over)], {"run": "x"})
    assert o.of(("check", "alpha")) == "overlay.yaml"
    assert o.of(("check", "beta")) == "config/config.yaml"
    assert o.of(("kernels", 0, "params")) == "config/config.yaml"
    assert o.of(("run",)) == "--config"
    assert o.of(("sweep", "jobs")) == "the schema's defaults"


def _snakemake_n(tmp_path, overlay: str):
    path = tmp_path / "overlay.yaml"
    path.write_text(overlay)
    t0 = time.perf_counter()
    # targets before --configfile (it takes several files)
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--quiet", "rules", "all", "--configfile", str(path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    return r, path, time.perf_counter() - t0


@pytest.mark.parametrize("overlay, needle", [
    ("check: {alpha: 0.0}\n", "check.alpha must not be 0"),
    ("check: {alpha: .nan}\n", "check.alpha must be a finite number, not nan"),
    ("check: {beta: 0}\n", "check.beta must not be 0"),
    ("bench: {shapes: [[100000, 100000, 100000]]}\n", "A would have 1e+10 elements"),
    ("check:\n  beta: 1\n  beta: 2\n", ":3:3: not valid YAML: key 'beta' is given twice"),
])
def test_snakemake_refuses_an_overlay_naming_it(tmp_path, overlay, needle):
    r, path, seconds = _snakemake_n(tmp_path, overlay)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and needle in out and str(path) in out, out[-2000:]
    assert "Traceback" not in out
    print(f"refused in {seconds:.2f} s")  # the whole snakemake start included


def test_snakemake_takes_a_numeric_run_name(tmp_path):
    r, _path, _s = _snakemake_n(tmp_path, "run: 2024\nbench: {target_ms: 1e3}\n")
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]


def test_dropping_either_term_fails_at_the_limits_the_config_allows():
    """At the extremes alpha and beta may take, a kernel that drops alpha * A @ B, or beta * C, is
    still far outside the FP32 limit: the refusal above is what keeps the check from going vacuous."""
    import numpy as np

    from sgemm_lab.config.records import CheckSettings, Shape
    from sgemm_lab.config.rules import TERM_RATIO
    from sgemm_lab.results import verify

    check = CheckSettings(shapes=(), alpha=1.0, beta=1.0, tolerance_factor=10)
    for m, n, k in ((1, 1, 1), (8, 8, 2), (16, 16, 65536)):
        for alpha, beta in ((1.0, TERM_RATIO), (TERM_RATIO, 1.0)):
            p = verify.make_problem(Shape(m=m, n=n, k=k), alpha=alpha, beta=beta, seed=k)
            ref, ab = verify.references(p)
            bc = beta * p.c.astype(np.float64)
            limit = verify.tolerance(k, check.tolerance_factor)
            no_ab = verify.compare(bc.astype(np.float32), ref, limit, terms=(ab, bc))
            no_c = verify.compare(ab.astype(np.float32), ref, limit, terms=(ab, bc))
            assert not no_ab.passed and not no_c.passed, (m, n, k, alpha, beta, no_ab.rel_err, no_c.rel_err)


def test_a_shape_may_be_written_as_text_on_the_command_line(raw_config):
    def given(shapes):
        cli = {"bench": {"square": [], "shapes": shapes}}
        merged = {**raw_config, "bench": {**raw_config["bench"], **cli["bench"]}}
        return cfgmod.validate(merged, origins=Origins([("config/config.yaml", raw_config)], cli))

    assert given(["1000x2000x3000", "7 x 5 x 3"])["bench"]["shapes"] == [[1000, 2000, 3000], [7, 5, 3]]
    with pytest.raises(ConfigError, match=r"^--config: bench\.shapes\[0\]: '1000x2000' is not a shape: write"):
        given(["1000x2000"])
    with pytest.raises(ConfigError, match=r"A would have 1e\+10 elements"):  # the same limits as a list's
        given(["100000x100000x100000"])
