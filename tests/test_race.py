"""A race's rule across stages of different kernels (config ``races``, ``sgemm_lab.dispatch.race``): its
refusals, the names its terms read, its pick, its score, the report's line and tools/fit_race.py (no GPU)."""

import math
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from conftest import ROOT

from sgemm_lab.config import load as cfgmod
from sgemm_lab.config import rules
from sgemm_lab.config.records import RaceRule, Shape, frozen
from sgemm_lab.dispatch import race
from sgemm_lab.errors import ConfigError
from sgemm_lab.library import offered as library_offers
from sgemm_lab.report.held_out import held_out_section

SHAPES = [Shape(m=8192, n=12, k=6144), Shape(m=1000, n=1000, k=1000), Shape(m=128, n=96, k=49152),
          Shape(m=997, n=3331, k=1501), Shape(m=6144, n=4096, k=192), Shape(m=5, n=7, k=3), Shape(m=33, n=2, k=200000)]


def _entry(raw, kid):
    return next(k for k in raw["kernels"] if k["id"] == kid)


def _model(raw, kid, **terms):
    _entry(raw, kid)["time_model"] = {"terms": terms or {"1": 1}}


@pytest.mark.parametrize("change, needle", [
    (lambda r: _model(r, "10_autotuned"), "(10_autotuned) is for a stage the config alone builds"),
    (lambda r: _model(r, "00_hostmult0"), "(00_hostmult0) is for a stage the config alone builds"),
    (lambda r: _entry(r, "22_ozaki2_int8")["time_model"]["terms"].update({"WAVES * KP": 1}),
     "term 'WAVES * KP' uses WAVES, which 22_ozaki2_int8 will not have"),
    (lambda r: _entry(r, "19_narrow")["time_model"]["terms"].update({"COST": 1}),
     "term 'COST' uses COST, which 19_narrow will not have"),
    (lambda r: _entry(r, "20_dispatch_3xtf32")["time_model"]["terms"].update({"M +": 1}), "(20_dispatch_3xtf32) time_model.terms"),
    (lambda r: _entry(r, "20_dispatch_3xtf32")["time_model"]["terms"].update({"M": -1}), "time_model.terms.M"),
    (lambda r: _entry(r, "20_dispatch_3xtf32")["time_model"].update({"terms": {}}), "time_model.terms"),
    (lambda r: _entry(r, "20_dispatch_3xtf32")["time_model"].update({"fit": "x"}), "time_model"),
    (lambda r: _entry(r, "19_narrow")["time_model"]["terms"].update({"KP": 1}), "term 'KP' uses KP, which 19_narrow"),
])
def test_time_models_that_cannot_be_evaluated_are_refused_in_one_line(raw_config, change, needle):
    change(raw_config)
    with pytest.raises(ConfigError) as exc:
        cfgmod.from_dict(raw_config)
    assert needle in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_a_race_has_a_rule_where_two_of_its_stages_have_time_models(raw_config, lab):
    assert set(lab.race_rule("fp32_accurate").members) == {"12_dispatch", "19_narrow", "20_dispatch_3xtf32",
                                                           "22_ozaki2_int8", "23_wgmma_3xtf32_split_a",
                                                           "24_wgmma_3xtf32_split_b"}
    assert set(lab.race_rule("fp32").members) == {"12_dispatch", "19_narrow"}  # a class's stages only
    assert lab.race_rule("tf32") is None
    # an overlay's own list of stages takes its time models with it: one left is no rule
    for kid in ("12_dispatch", "20_dispatch_3xtf32", "22_ozaki2_int8", "23_wgmma_3xtf32_split_a",
                "24_wgmma_3xtf32_split_b"):
        del _entry(raw_config, kid)["time_model"]
    cfg = cfgmod.from_dict(raw_config)
    assert cfg.race_rule("fp32") is None and cfg.race_rule("fp32_accurate") is None
    _model(raw_config, "17_wgmma_tf32")
    _model(raw_config, "14_wmma_tf32")
    assert set(cfgmod.from_dict(raw_config).race_rule("tf32").members) == {"17_wgmma_tf32", "14_wmma_tf32"}


def test_each_member_reads_exactly_the_names_the_config_lets_its_terms_use(lab, raw_config):
    """config.rules.term_names (what the load checks terms against) and dispatch.race.term_names (what a
    term is evaluated over) agree for every stage a race may hold, at every shape it runs."""
    kernels = {k["id"]: k for k in raw_config["kernels"]}
    offered = [k for k in lab.kernels if library_offers(k)]
    assert {"12_dispatch", "19_narrow", "20_dispatch_3xtf32", "22_ozaki2_int8"} <= {k.id for k in offered}
    for k in offered:
        raw = kernels[k.id]
        known = rules.term_names(raw, kernels.get(raw.get("dispatch_from", ""), raw))
        spec = race.member_spec(lab, k.id)
        seen = [race.term_names(spec, s) for s in SHAPES if race.runs(spec, s)]
        assert seen, k.id
        for names in seen:
            assert set(names) == known, (k.id, set(names) ^ known)


def test_the_configured_rule_predicts_the_sum_of_its_terms_and_picks_the_least(lab):
    rule = lab.race_rule("fp32_accurate")
    assert rule is not None and rule.fitted and all(rule.fitted)
    s = Shape(m=1000, n=1000, k=1000)
    spec = race.member_spec(lab, "22_ozaki2_int8")
    kp = -(-1000 // spec.params["PADK"]) * spec.params["PADK"]  # K bytes padded to PADK
    np = 1008                                                   # N bytes padded to 16
    waves = -(-(8 * 4 * 8) // 132)  # 8 x 4 tiles of 128 x 256, 8 moduli, over 132 SMs
    want = sum(c * v for c, v in zip(rule.members["22_ozaki2_int8"].values(),
                                      [1, 8 * 2000 * kp // 1000, 8 * 1000 * np // 1000, waves * kp // 128]))
    assert race.predicted_ns(lab, rule, "22_ozaki2_int8", s) == pytest.approx(want)
    assert race.term_names(spec, s)["KP"] == kp
    for shape in SHAPES:
        times = {m: race.predicted_ns(lab, rule, m, shape) for m in rule.members}
        runnable = {m: t for m, t in times.items() if t is not None}
        assert all(t > 0 for t in runnable.values())
        assert race.pick(lab, rule, shape) == min(runnable, key=runnable.get)
    # who can run what: the narrow stage only a narrow output, the INT8 products only K <= 131071
    assert race.predicted_ns(lab, rule, "19_narrow", Shape(m=1000, n=1000, k=1000)) is None
    assert race.predicted_ns(lab, rule, "22_ozaki2_int8", Shape(m=33, n=2, k=200000)) is None
    assert race.pick(lab, rule, Shape(m=33, n=2, k=200000), ["22_ozaki2_int8"]) is None
    assert race.pick(lab, rule, Shape(m=8192, n=8192, k=8192), ["12_dispatch"]) == "12_dispatch"


def _made_up(lab, rule, shapes, slow=None):
    """Bench rows whose times are the rule's own predictions (ms), ``slow``: (stage, shape) made 2x slower."""
    rows = []
    for s in shapes:
        for m in rule.members:
            t = race.predicted_ns(lab, rule, m, s)
            if t is not None:
                t *= 2 if slow and (m, s) in slow else 1
                rows.append(dict(kernel=m, m=s.m, n=s.n, k=s.k, status="ok", verified=True, median_ms=t / 1e6,
                                 q1_ms=t / 1e6, q3_ms=t / 1e6, tflops=2 * s.m * s.n * s.k / t / 1e3))
        rows.append(dict(kernel="cublas", m=s.m, n=s.n, k=s.k, status="ok", verified=True, median_ms=0.5,
                         q1_ms=0.5, q3_ms=0.5, tflops=2 * s.m * s.n * s.k / 0.5 / 1e9))
    return pd.DataFrame(rows)


def test_a_term_that_cannot_be_evaluated_at_a_shape_leaves_its_stage_out_there(lab):
    rule = lab.race_rule("fp32_accurate")
    broken = RaceRule(race=rule.race, fitted=rule.fitted, members=frozen({
        **rule.members, "20_dispatch_3xtf32": frozen({"M // (SPLIT - 1)": 1.0})}))
    s = Shape(m=4096, n=4096, k=4096)  # no split here: SPLIT - 1 = 0
    assert race.term_names(race.member_spec(lab, "20_dispatch_3xtf32"), s)["SPLIT"] == 1
    assert race.predicted_ns(lab, broken, "20_dispatch_3xtf32", s) is None
    assert race.pick(lab, broken, s) in {"12_dispatch", "22_ozaki2_int8"}
    assert race.pick(lab, broken, s, ["20_dispatch_3xtf32"]) is None


def test_score_is_the_picks_time_over_the_fastest_members_and_skips_incomplete_shapes(lab):
    rule = lab.race_rule("fp32_accurate")
    shapes = SHAPES[:5]
    first = race.pick(lab, rule, shapes[0])
    ok = _made_up(lab, rule, shapes, slow={(first, shapes[0])})
    got = {(g["m"], g["n"], g["k"]): g for g in race.score(lab, rule, ok, shapes)}
    assert len(got) == 5
    g0 = got[(shapes[0].m, shapes[0].n, shapes[0].k)]
    assert g0["pick"] == first and g0["fastest"] != first and 1 < g0["gap"] <= 2
    assert all(g["gap"] == 1 for key, g in got.items() if key != (shapes[0].m, shapes[0].n, shapes[0].k))
    # a member that can run a shape but has no verified row there: that shape cannot be scored
    drop = ok[~((ok.kernel == "22_ozaki2_int8") & (ok.m == shapes[1].m) & (ok.k == shapes[1].k))]
    assert len(race.score(lab, rule, drop, shapes)) == 4
    other = next(m for m in rule.members if m != race.pick(lab, rule, shapes[2])
                 and race.predicted_ns(lab, rule, m, shapes[2]) is not None)
    unverified = ok.assign(verified=~((ok.kernel == other) & (ok.m == shapes[2].m) & (ok.k == shapes[2].k)))
    assert len(race.score(lab, rule, unverified, shapes)) == 4
    # the pick without a verified row: an infinite gap, not a shape left out
    bad = ok.assign(verified=~((ok.kernel == first) & (ok.m == shapes[0].m) & (ok.k == shapes[0].k)))
    g0 = next(g for g in race.score(lab, rule, bad, shapes) if (g["m"], g["k"]) == (shapes[0].m, shapes[0].k))
    assert g0["pick"] == first and math.isinf(g0["gap"])
    # among: only the members named count
    only = race.score(lab, rule, drop, shapes, among=["12_dispatch", "20_dispatch_3xtf32"])
    assert len(only) == 5 and {g["pick"] for g in only} <= {"12_dispatch", "20_dispatch_3xtf32"}


def test_the_held_out_section_scores_the_races_rule(lab):
    rule = lab.race_rule("fp32_accurate")
    held = list(lab.held_out)
    first = race.pick(lab, rule, held[0])
    ok = _made_up(lab, rule, held, slow={(first, held[0])})
    checks = pd.DataFrame([dict(kernel=k, status="pass", fp32_limit=1e-5, m=64, n=64, k=64) for k in rule.members])
    text = "\n".join(held_out_section(lab, ok, checks, pd.DataFrame(columns=["kernel"])))
    assert "FP32-accurate race's rule / fastest" in text
    n = len(held)
    gap = next(g["gap"] for g in race.score(lab, rule, ok, held[:1]))
    assert f"within 5% of the fastest member on **{n - 1} of {n}** shapes, the worst {gap:.3f}×" in text
    geo = math.exp(math.log(gap) / n)
    assert f"geometric mean {geo:.4f}×." in text
    assert rule.fitted[0] in text
    assert "strict-FP32 race's rule / fastest" in text  # stages 12 and 19 have time models: a rule of their race


def test_without_a_rule_the_section_has_no_race_column(raw_config):
    for k in raw_config["kernels"]:
        k.pop("time_model", None)
    cfg = cfgmod.from_dict(raw_config)
    assert cfg.race_rule("fp32_accurate") is None
    s = cfg.held_out[0]
    ok = pd.DataFrame([dict(kernel="cublas", m=s.m, n=s.n, k=s.k, status="ok", verified=True, median_ms=1.0,
                            q1_ms=1.0, q3_ms=1.0, tflops=1.0)])
    text = "\n".join(held_out_section(cfg, ok, None, pd.DataFrame(columns=["kernel"])))
    assert "race's rule" not in text


def test_fit_race_recovers_a_rule_whose_times_it_made(lab, tmp_path):
    """Times made from a rule with other coefficients: the fit finds those, and its choice is the fastest
    member on every shape, in and out of its folds; held-out shapes in the table are left out."""
    truth = lab.race_rule("fp32_accurate")
    other = RaceRule(race="fp32_accurate", fitted=("x",), members=frozen({
        m: frozen({t: (c * (3 if i == 0 else 1) if c else 1.0) for i, (t, c) in enumerate(terms.items())})
        for m, terms in truth.members.items()}))
    shapes = sorted({Shape(m=a, n=b, k=c) for a in (3, 200, 1500, 4096) for b in (8, 640, 3000) for c in (64, 2000, 40000)},
                    key=lambda s: (s.m, s.n, s.k))
    table = tmp_path / "time.csv"
    pd.concat([_made_up(lab, other, shapes), _made_up(lab, other, lab.held_out[:3])]).to_csv(table, index=False)
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "fit_race.py"), str(table), "--cv", "3"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    n = len(shapes)
    assert f"{n} shapes timed (" in out.stdout and "rows at held-out shapes left out" in out.stdout
    assert f"choice, as fitted            within 5% on {n} of {n}, worst 1.000x" in out.stdout, out.stdout
    assert f"choice, 3-fold cv            within 5% on {n} of {n}" in out.stdout, out.stdout
    # the YAML it prints, member by member: every coefficient as made, to its three significant digits
    printed = yaml.safe_load(out.stdout[out.stdout.rindex(f"\n{next(iter(other.members))}:\n"):])
    assert set(printed) == set(other.members)
    for m, terms in other.members.items():
        got = printed[m]["time_model"]["terms"]
        assert set(got) == set(terms), m
        for t, c in terms.items():
            assert got[t] == pytest.approx(c, rel=5e-3), (m, t, got[t], c)


def test_fit_race_reads_a_changed_member_only_from_its_own_tables(lab, tmp_path):
    """A member timed again after its build changed: --stage-tables takes its rows from the new table only,
    not the (here faster) rows of its earlier build in the others' table, and recovers its coefficients."""
    truth = lab.race_rule("fp32_accurate")
    member = "22_ozaki2_int8"
    changed = RaceRule(race="fp32_accurate", fitted=("x",), members=frozen({
        m: frozen({t: (c * 0.5 if m == member and c else c) for t, c in terms.items()})
        for m, terms in truth.members.items()}))
    shapes = sorted({Shape(m=a, n=b, k=c) for a in (200, 1500, 4096) for b in (640, 3000) for c in (64, 2000, 9000)},
                    key=lambda s: (s.m, s.n, s.k))
    earlier, new = tmp_path / "earlier.csv", tmp_path / "new.csv"
    _made_up(lab, changed, shapes).to_csv(earlier, index=False)  # every member; the changed one at half its time
    made = _made_up(lab, truth, shapes)
    made[made.kernel == member].to_csv(new, index=False)
    cmd = [sys.executable, str(ROOT / "tools" / "fit_race.py"), str(earlier)]
    out = subprocess.run([*cmd, "--stage-tables", f"{member}={new}"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    printed = yaml.safe_load(out.stdout[out.stdout.rindex(f"\n{next(iter(truth.members))}:\n"):])
    for t, c in truth.members[member].items():
        assert printed[member]["time_model"]["terms"][t] == pytest.approx(c, rel=5e-3), (t, c)
    without = subprocess.run([*cmd, str(new)], capture_output=True, text=True, timeout=600)  # the faster rows win
    got = yaml.safe_load(without.stdout[without.stdout.rindex(f"\n{next(iter(truth.members))}:\n"):])
    assert got[member]["time_model"]["terms"] != printed[member]["time_model"]["terms"]
    bad = subprocess.run([*cmd, "--stage-tables", f"nope={new}"], capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and "--stage-tables takes STAGE=TABLE" in bad.stderr and "Traceback" not in bad.stderr
    # a table named for the member only is not read for the others: there, only the earlier table's rows count
    other = next(m for m in truth.members if m != member)
    made[made.kernel == other].assign(median_ms=lambda d: d.median_ms / 4).to_csv(new, index=False)
    alone = subprocess.run([*cmd, "--stage-tables", f"{member}={new}"], capture_output=True, text=True, timeout=600)
    assert alone.returncode != 0 and f"no verified row of {member} in {new}" in alone.stderr, alone.stderr
    pd.concat([made[made.kernel == member], made[made.kernel == other].assign(median_ms=lambda d: d.median_ms / 4)]
              ).to_csv(new, index=False)
    mixed = subprocess.run([*cmd, "--stage-tables", f"{member}={new}"], capture_output=True, text=True, timeout=600)
    got = yaml.safe_load(mixed.stdout[mixed.stdout.rindex(f"\n{next(iter(truth.members))}:\n"):])
    assert got == printed  # the other member's (4x faster) rows in the member's table were not read
    gone = subprocess.run([*cmd, "--stage-tables", f"{member}={tmp_path / 'nope.csv'}"], capture_output=True,
                          text=True, timeout=600)
    assert gone.returncode != 0 and "no such table" in gone.stderr and "Traceback" not in gone.stderr


def test_fit_race_refuses_tables_without_the_race_in_one_line(tmp_path):
    table = tmp_path / "bench.csv"
    pd.DataFrame([dict(kernel="cublas", m=64, n=64, k=64, status="ok", verified=True, median_ms=1.0)]).to_csv(table)
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "fit_race.py"), str(table)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode != 0 and "no verified row of the fp32_accurate race's stages" in out.stderr
    assert "Traceback" not in out.stderr
