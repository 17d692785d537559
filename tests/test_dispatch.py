"""The per-shape dispatch table: built from shape-sweep rows, looked up for measured and unseen shapes."""

import json

import pandas as pd
import pytest
from conftest import kernel_entry

from sgemm_lab.config import load as cfgmod
from sgemm_lab.config.records import Shape
from sgemm_lab.dispatch import choice as dispatch
from sgemm_lab.errors import LabError


def base_spec():
    return cfgmod.from_dict({"kernels": [kernel_entry()]}).kernels[0]  # params BM=BN=64, BK=8, TM=8


def rows(points):
    """Shape-sweep rows from (candidate, m, n, k, median_ms[, verified, local_ok])."""
    out = []
    for p in points:
        cand, m, n, k, ms, *rest = p
        verified, local_ok = (rest + [True, True])[:2]
        out.append(dict(candidate=cand, m=m, n=n, k=k, params=json.dumps({"BM": 32 * (cand + 1)}), status="ok",
                        verified=verified, within_local_budget=local_ok, median_ms=ms,
                        tflops=2 * m * n * k / ms / 1e9))
    return pd.DataFrame(out)


def test_candidates_are_full_parameter_sets_without_repeats():
    got = dispatch.candidate_params(base_spec(), [{}, {"BM": 32}, {"BM": 64}, {"BK": 16, "BM": 32}])
    assert got == [{"BM": 64, "BN": 64, "BK": 8, "TM": 8}, {"BM": 32, "BN": 64, "BK": 8, "TM": 8},
                   {"BM": 32, "BN": 64, "BK": 16, "TM": 8}]


def test_table_takes_the_fastest_eligible_candidate_per_shape():
    table = dispatch.pick_table(rows([
        (0, 1024, 1024, 1024, 0.10), (1, 1024, 1024, 1024, 0.08), (2, 1024, 1024, 1024, 0.05, False),
        (0, 4096, 4096, 4096, 2.70), (1, 4096, 4096, 4096, 2.90), (2, 4096, 4096, 4096, 2.00, True, False),
        (2, 512, 512, 16384, 0.30, False),  # nothing eligible: the shape is left out
    ]))
    assert [(e["m"], e["candidate"], e["runner_up"]) for e in table] == [(1024, 1, 0), (4096, 0, 1)]
    assert table[0]["margin"] == pytest.approx(0.10 / 0.08)
    assert table[0]["params"] == {"BM": 64}
    assert dispatch.used_candidates(table) == [0, 1]


def test_unseen_shapes_take_the_nearest_measured_shape_in_log_space():
    table = dispatch.pick_table(rows([(1, 1024, 1024, 1024, 0.08), (0, 4096, 4096, 4096, 2.7),
                                      (2, 512, 512, 16384, 0.2)]))
    assert dispatch.choose(table, Shape(m=4096, n=4096, k=4096))["candidate"] == 0
    assert dispatch.choose(table, Shape(m=1000, n=1000, k=1000))["candidate"] == 1
    assert dispatch.choose(table, Shape(m=384, n=640, k=20000))["m"] == 512  # small M, N and long K
    assert dispatch.choose(table, Shape(m=8192, n=8192, k=8192))["m"] == 4096
    with pytest.raises(LabError, match="empty"):
        dispatch.choose([], Shape(m=1, n=1, k=1))


def test_bundle_round_trip():
    cubins = {3: b"\x7fELF three", 0: b"\x7fELF zero"}
    table = [dict(m=1, n=2, k=3, candidate=3), dict(m=4, n=5, k=6, candidate=0)]
    assert dispatch.unpack(dispatch.pack(cubins, table)) == (cubins, table)
    with pytest.raises(LabError, match=r"lacks the candidates \[3\]"):
        dispatch.unpack(dispatch.pack({0: b"zero"}, table))
    with pytest.raises(LabError, match="not a dispatch bundle"):
        dispatch.unpack(b"\x7fELF")


def _config(dispatch_entry, base_over=None):
    base = kernel_entry(id="98_base", constraints=["BM * BK == THREADS", "BK * BN == THREADS"],
                        **(base_over or {}))
    return cfgmod.from_dict({"kernels": [base, dict(id="99_dispatch", title="d", **dispatch_entry)]})


def test_dispatch_stage_config():
    cfg = _config({"dispatch_from": "98_base", "candidates": [{}, {"BM": 32, "BN": 32, "TM": 4}]})
    spec = cfg.kernel("99_dispatch")
    assert spec.dispatched and not spec.autotuned
    assert spec.dispatch_from == "98_base" and [dict(c) for c in spec.candidates] == [{}, {"BM": 32, "BN": 32, "TM": 4}]
    assert not cfg.kernel("98_base").dispatched


@pytest.mark.parametrize("entry, needle", [
    ({"dispatch_from": "97_missing", "candidates": [{}]}, "not an earlier CUDA stage"),
    ({"dispatch_from": "98_base", "candidates": [{"WM": 32}]}, "candidates\\[0\\] sets WM"),
    ({"dispatch_from": "98_base", "candidates": [{}, {"BM": 32}]}, "candidates\\[1\\].*constraint"),
    ({"dispatch_from": "98_base"}, "kernels\\[1\\]"),  # candidates are required
    ({"dispatch_from": "98_base", "candidates": [{}], "source": "04_1d_blocktiling.cu"}, "kernels\\[1\\]"),
])
def test_dispatch_stage_config_errors(entry, needle):
    from sgemm_lab.errors import ConfigError

    with pytest.raises(ConfigError, match=needle):
        _config(entry)


def test_a_dispatch_stage_runs_as_its_base_and_each_candidate_as_a_plain_stage():
    cfg = _config({"dispatch_from": "98_base", "candidates": [{}, {"BM": 32, "BN": 32, "TM": 4}], "explain": "why"})
    spec = dispatch.resolve(cfg, cfg.kernel("99_dispatch"))
    base = cfg.kernel("98_base")
    assert (spec.id, spec.explain, spec.source, spec.entry, dict(spec.params)) == \
        ("99_dispatch", "why", base.source, base.entry, dict(base.params))
    assert spec.dispatched and not spec.sweep
    cands = dispatch.candidate_specs(cfg, cfg.kernel("99_dispatch"))
    assert [c.id for c in cands] == ["99_dispatch.0", "99_dispatch.1"]
    assert not any(c.dispatched for c in cands)
    assert dict(cands[1].params) == {"BM": 32, "BN": 32, "BK": 8, "TM": 4}


def _build_record(kernel="99_dispatch"):
    table = dispatch.pick_table(rows([(0, 1024, 1024, 1024, 0.10), (1, 1024, 1024, 1024, 0.08),
                                      (0, 4096, 4096, 4096, 2.7)]))
    return dict(kernel=kernel, status="ok", registers=90, params={"BM": 64}, dispatch_table=table,
                candidates={"0": dict(params={"BM": 32}, registers=80, local_bytes=0),
                            "1": dict(params={"BM": 64}, registers=90, local_bytes=0)})


def test_dispatch_rows_are_tidy_one_per_shape():
    from sgemm_lab.dispatch.choice import DISPATCH_COLUMNS, dispatch_rows

    got = dispatch_rows([_build_record(), dict(kernel="05_other", status="ok", registers=40)])
    assert [(r["m"], r["candidate"], r["registers"]) for r in got] == [(1024, 1, 90), (4096, 0, 80)]
    assert all(set(r) == set(DISPATCH_COLUMNS) for r in got)
    assert json.loads(got[0]["params"]) == {"BM": 64} and got[1]["runner_up"] is None


def test_report_prints_the_dispatch_table_as_measured():
    from sgemm_lab.dispatch.choice import dispatch_rows
    from sgemm_lab.report.stage_tables import dispatch_table

    cfg = _config({"dispatch_from": "98_base", "candidates": [{}, {"BM": 32, "BN": 32, "TM": 4}]})
    spec = cfg.kernel("99_dispatch")
    text = "\n".join(dispatch_table(cfg, spec, pd.DataFrame(dispatch_rows([_build_record()]))))
    assert "| 1024³ | 1 | as the base | 26.84 | 0 | 1.250× | 90 |" in text
    assert "| 4096³ | 0 | BM=32 | 50.90 | – | – | 80 |" in text
    assert "No dispatch table" in dispatch_table(cfg, spec, pd.DataFrame(columns=["kernel"]))[0]


def test_traffic_model_of_a_dispatch_stage_is_that_of_the_candidate_it_runs():
    from sgemm_lab.config.model import traffic
    from sgemm_lab.dispatch.choice import dispatch_rows
    from sgemm_lab.report.stage_tables import dispatched_at

    cfg = _config({"dispatch_from": "98_base", "candidates": [{}, {"BM": 32, "BN": 32, "TM": 4}]})
    spec = cfg.kernel("99_dispatch")
    rec = _build_record()
    rec["dispatch_table"][1]["params"] = {"BM": 32, "BN": 32, "TM": 4}  # 4096^3 runs the 32x32 candidate
    table = pd.DataFrame(dispatch_rows([rec]))
    at = dispatched_at(cfg, spec, table, Shape(m=4096, n=4096, k=4096))
    assert (at.params["BM"], at.params["BN"]) == (32, 32) and not at.dispatched
    assert traffic(at, Shape(m=4096, n=4096, k=4096)).global_coeff == traffic(
        cfg.kernel("98_base").with_params(BM=32, BN=32, TM=4), Shape(m=4096, n=4096, k=4096)).global_coeff
    assert dispatched_at(cfg, spec, pd.DataFrame(columns=["kernel"]), Shape(m=1, n=1, k=1)) is None


# A rule: a cost model stated in the config, which decides every shape (measured or not).
RULE = {"cost": "STEP * (1024 // TILES + KSTEPS)", "step": [1, 3]}  # few tiles cost, and so does the step


def _ruled(rule=None, **over):
    return _config({"dispatch_from": "98_base", "candidates": [{}, {"BM": 32, "BN": 32, "TM": 4}],
                    "rule": rule or RULE, **over})


def test_a_rule_runs_the_cheapest_candidate_on_any_shape():
    cfg = _ruled()
    spec = dispatch.resolve(cfg, cfg.kernel("99_dispatch"))
    assert spec.rule.cost == RULE["cost"] and spec.rule.step == (1, 3)
    # 64 x 64 x 8: one 64 x 64 tile (1 * (1024 + 1)) against four 32 x 32 tiles (3 * (256 + 1))
    assert dispatch.rule_costs(spec, Shape(m=64, n=64, k=8)) == {0: 1025, 1: 771}
    assert dispatch.rule_choice(spec, Shape(m=64, n=64, k=8)) == 1
    assert dispatch.rule_choice(spec, Shape(m=4096, n=4096, k=4096)) == 0  # many tiles: the lower STEP
    tie = dispatch.resolve(*(lambda c: (c, c.kernel("99_dispatch")))(_ruled({"cost": "K", "step": [1, 3]})))
    assert dispatch.rule_choice(tie, Shape(m=64, n=64, k=8)) == 0  # a tie goes to the earlier candidate


def test_a_rule_may_read_whether_rows_are_aligned():
    """ALIGNED is one of a rule's names: the config takes a cost that reads it, and the cost sees it (this
    base runs only aligned shapes; ALIGNED 0 is test_plan_names_describe_the_split_and_the_waves's)."""
    cfg = _ruled({"cost": "STEP * (1 + 4 * (1 - ALIGNED))", "step": [1, 3]})
    spec = dispatch.resolve(cfg, cfg.kernel("99_dispatch"))
    assert dispatch.rule_costs(spec, Shape(m=64, n=64, k=8)) == {0: 1, 1: 3}


def test_a_rule_skips_candidates_that_cannot_run_the_shape():
    cfg = _ruled()  # the base needs M, N multiples of its tile (tile_multiple)
    spec = dispatch.resolve(cfg, cfg.kernel("99_dispatch"))
    assert dispatch.rule_costs(spec, Shape(m=96, n=96, k=8)) == {1: 3 * (1024 // 9 + 1)}
    with pytest.raises(LabError, match="no candidate can run 33x33x8"):
        dispatch.rule_choice(spec, Shape(m=33, n=33, k=8))


def test_plan_names_describe_the_split_and_the_waves():
    from sgemm_lab.config.files import read
    from sgemm_lab.config.geometry import plan_names
    from sgemm_lab.config.load import from_dict

    spec = from_dict(read(cfgmod.ROOT / "config" / "config.yaml")).kernel("11_general")
    p = spec.params  # 128 x 128 tiles, BK 8, SPLIT_SLOTS 264
    assert (p["BM"], p["BN"], p["BK"], p["SPLIT_SLOTS"]) == (128, 128, 8, 264)
    got = plan_names(spec, Shape(m=128, n=96, k=49152), step=7)
    # one tile; 6144 K-steps cut into at most 264 slices of equal depth: 24 K-steps, 256 slices
    assert (got["TILES"], got["SPLIT"], got["KSTEPS"], got["SLOTS"], got["WAVES"], got["STEP"]) == \
        (1, 256, 24, p["SPLIT_SLOTS"], 1, 7)
    big = plan_names(spec, Shape(m=4096, n=4096, k=4096), step=1)
    assert (big["TILES"], big["SPLIT"], big["KSTEPS"], big["WAVES"]) == (1024, 1, 512, 4)  # 1024 / 264 -> 4
    assert got["M"] == 128 and got["BM"] == 128 and got["THREADS"] == p["THREADS"]
    # the config check's list of names (rules.dispatch_rule) is what plan_names gives besides the parameters
    from sgemm_lab.config.geometry import PLAN_NAMES, env
    assert set(got) - set(env(spec)) == set(PLAN_NAMES)
    # ALIGNED: rows of A (K floats) and of B (N floats) on 16-byte boundaries
    assert got["ALIGNED"] == 1 and big["ALIGNED"] == 1
    assert [plan_names(spec, Shape(m=64, n=n, k=k), step=1)["ALIGNED"] for n, k in
            ((96, 4097), (97, 4096), (98, 4098), (100, 4100))] == [0, 0, 0, 1]


def test_the_table_scores_the_rule_against_the_fastest_candidate():
    cfg = _ruled()
    spec = dispatch.resolve(cfg, cfg.kernel("99_dispatch"))
    sweep = rows([(0, 64, 64, 8, 0.010), (1, 64, 64, 8, 0.012),            # the rule picks 1: 1.2x the fastest
                  (0, 4096, 4096, 4096, 2.0), (1, 4096, 4096, 4096, 2.5),  # the rule picks 0, the fastest
                  (0, 128, 128, 8, 0.004), (1, 128, 128, 8, 0.003, False)])  # it picks 1, which did not verify
    table = dispatch.score_rule(spec, dispatch.pick_table(sweep), sweep)
    got = {(e["m"], e["candidate"], e["rule_candidate"]): e["rule_gap"] for e in table}
    assert got == {(64, 0, 1): pytest.approx(1.2), (128, 0, 1): None, (4096, 0, 0): pytest.approx(1.0)}


def test_report_prints_the_rules_choice_and_its_distance_from_the_fastest():
    from sgemm_lab.dispatch.choice import dispatch_rows
    from sgemm_lab.report.stage_tables import dispatch_table, dispatched_at

    cfg = _ruled()
    spec = cfg.kernel("99_dispatch")
    resolved = dispatch.resolve(cfg, spec)
    sweep = rows([(0, 64, 64, 8, 0.010), (1, 64, 64, 8, 0.012), (0, 4096, 4096, 4096, 2.0),
                  (1, 4096, 4096, 4096, 2.5), (0, 128, 128, 8, 0.004), (1, 128, 128, 8, 0.003, False)])
    rec = dict(_build_record(), dispatch_table=dispatch.score_rule(resolved, dispatch.pick_table(sweep), sweep))
    text = "\n".join(dispatch_table(cfg, spec, pd.DataFrame(dispatch_rows([rec]))))
    assert "within 3% of its time on 1 of 3 measured shapes; the worst is 128×128×8 at a candidate that did " \
           "not verify there." in text
    assert "| 64×64×8 | 0 | BM=32 | 0.01 | 1 | 1.200× | 1 | **1.200×** | 80 |" in text
    assert "| 128×128×8 | 0 | BM=32 | 0.07 | – | – | 1 | not verified | 80 |" in text
    assert "| 4096³ | 0 | BM=32 | 68.72 | 1 | 1.250× | 0 | 1.000× | 80 |" in text
    # the traffic model follows the rule, not the table, on measured and unseen shapes alike
    assert dispatched_at(cfg, spec, None, Shape(m=64, n=64, k=8)).params["BM"] == 32
    assert dispatched_at(cfg, spec, None, Shape(m=8192, n=8192, k=64)).params["BM"] == 64
    assert dispatched_at(cfg, spec, None, Shape(m=33, n=33, k=8)) is None


@pytest.mark.parametrize("over, needle", [
    (dict(rule={"cost": "STEP", "step": [1]}), "rule.step has 1 entries for 2 candidates"),
    (dict(rule={"cost": "STEP * WAVES", "step": [1, 2]}), "uses WAVES, which it will not have"),
    (dict(rule={"cost": "STEP * (TILES", "step": [1, 2]}), r"kernels\[1\] \(99_dispatch\): rule.cost .*not valid syntax"),
    (dict(rule={"cost": "STEP", "step": [1, 0]}), r"kernels\[1\]"),  # a STEP of 0 would make every cost 0
    (dict(candidates=[{"BM": 32, "BN": 32, "TM": 4}, {"BM": 32, "BN": 32, "TM": 4}]),
     r"candidates\[1\] is the same configuration as candidates\[0\]"),
])
def test_rule_config_errors(over, needle):
    from sgemm_lab.errors import ConfigError

    with pytest.raises(ConfigError, match=needle):
        _ruled(**over)


def test_a_rule_belongs_to_a_dispatch_stage():
    from sgemm_lab.errors import ConfigError

    with pytest.raises(ConfigError, match="rule is for dispatch stages"):
        cfgmod.from_dict({"kernels": [kernel_entry(rule=RULE)]})


def test_a_dispatch_stage_computes_and_is_judged_as_its_base():
    base = kernel_entry(id="98_base", constraints=["BM * BK == THREADS", "BK * BN == THREADS"], precision="3xtf32")
    cfg = cfgmod.from_dict({"kernels": [base, dict(id="99_dispatch", title="d", dispatch_from="98_base",
                                                   candidates=[{}])]})
    assert cfg.kernel("99_dispatch").precision == "3xtf32" and cfg.precisions["99_dispatch"] == "3xtf32"
