"""The report's tables of one stage beyond its timings: the tile sweep's summary, the dispatch table and
where a dispatch stage ran, the Nsight Compute metrics (occupancy limiter, top stalls) and the traffic
model against them."""

from __future__ import annotations

import pandas as pd

from ..config.records import LabConfig
from ..errors import LabError
from ..profiling.ncu import OCCUPANCY_LIMITS
from .markdown import md_table
from .tables import fmt_value, shape_label

def sweep_summary(spec, df: pd.DataFrame) -> list[str]:
    from ..dispatch.autotune import eligible

    counts = df["status"].value_counts()
    grid = " ∪ ".join("(" + "; ".join(f"{k} ∈ {{{', '.join(map(str, v))}}}" for k, v in g.items()) + ")"
                      for g in spec.sweep)
    lines = [f"Tile sweep ({len(df)} points over {grid}): " + ", ".join(f"{n} {s}" for s, n in counts.items()) + "."]
    ok = eligible(df)
    if len(ok):
        best = ok.loc[ok.tflops.idxmax()]
        lines.append(f"Fastest verified point: `{best.params}` at {best.tflops:.2f} TFLOP/s "
                     f"({int(best.registers)} registers, {int(best.local_bytes)} B local).")
    spills = df[(df.get("local_bytes", pd.Series(dtype=float)).fillna(0) > 0)] if "local_bytes" in df else df.iloc[0:0]
    if len(spills):
        lines.append(f"{len(spills)} compiled points use local memory (spills); they are timed but never chosen.")
    return lines


NCU_KEYS = [("duration", "duration"), ("sm_throughput_pct", "SM throughput %"),
            ("memory_throughput_pct", "memory throughput %"), ("dram_bytes_read", "DRAM read"),
            ("l2_hit_rate_pct", "L2 hit %"), ("l1_hit_rate_pct", "L1 hit %"),
            ("smem_bank_conflicts_ld", "bank conflicts (ld)"), ("smem_bank_conflicts_st", "bank conflicts (st)"),
            ("achieved_occupancy_pct", "achieved occupancy %"), ("theoretical_occupancy_pct", "theoretical occupancy %"),
            ("registers_per_thread", "registers/thread"), ("issue_slot_utilisation_pct", "issue slots busy %"),
            ("tensor_pipe_pct", "tensor pipe busy %")]


RULE_CLOSE = 1.03  # a rule's choice this close to the fastest candidate's time counts as found


def dispatch_table(cfg: LabConfig, spec, rows: pd.DataFrame) -> list[str]:
    """A dispatch stage's table as its build recorded it: per measured shape the fastest candidate (its
    parameters where they differ from the base stage's), its speed in the shape sweep and the margin
    over the next best candidate; for a stage with a rule, also the rule's choice and how far its time
    is from the fastest's."""
    import json

    base = dict(cfg.kernel(spec.dispatch_from).params)
    mine = rows[rows.kernel == spec.id] if len(rows) else rows
    held = {(s.m, s.n, s.k) for s in cfg.held_out}
    if held and len(mine):  # scored apart, in "Out of sample"
        mine = mine[[key not in held for key in zip(mine.m, mine.n, mine.k)]]
    if mine.empty:
        return ["No dispatch table (the build did not make one)."]
    ruled = spec.rule is not None and "rule_candidate" in mine and mine["rule_candidate"].notna().any()
    body = []
    for r in mine.itertuples():
        params = json.loads(r.params)
        diff = ", ".join(f"{k}={v}" for k, v in params.items() if base.get(k) != v) or "as the base"
        margin = f"{r.margin:.3f}×" if r.margin == r.margin and r.margin is not None else "–"
        runner = f"{int(r.runner_up)}" if r.runner_up == r.runner_up and r.runner_up is not None else "–"
        row = [shape_label(r.m, r.n, r.k), str(int(r.candidate)), diff, f"{r.tflops:.2f}", runner, margin]
        if ruled:
            gap = r.rule_gap
            row += [str(int(r.rule_candidate)), f"**{gap:.3f}×**" if gap == gap and gap > RULE_CLOSE
                    else (f"{gap:.3f}×" if gap == gap else "not verified")]
        body.append(row + [fmt_value(r.registers, ".0f")])
    head = ["shape", "fastest", "parameters (vs base)", "TFLOP/s", "next best", "margin"]
    if not ruled:
        return [f"Dispatch table ({len(mine)} shapes measured by the shape sweep, `dispatch/{spec.id}.csv`; a shape "
                "not in it runs the choice of the nearest measured shape, by the sum of |log2| ratios of M, N and K). "
                f"Candidates are parameter overrides of `{spec.dispatch_from}`; margin = time of the next best "
                "candidate / time of the chosen one, in the shape sweep.", "",
                md_table(head + ["registers"], body, align="lrlrrrr"), ""]
    gaps = mine["rule_gap"].astype(float)
    close = int((gaps <= RULE_CLOSE).sum())
    worst = mine.loc[gaps.fillna(float("inf")).idxmax()]
    steps = ", ".join(f"{i}: {s}" for i, s in enumerate(spec.rule.step))
    return [f"The rule runs every shape, measured or not, on the candidate of the lowest cost "
            f"`{spec.rule.cost}` (STEP per candidate: {steps}; the names are the candidate's plan for the "
            "shape, `sgemm_lab.config.geometry.plan_names`). Against the fastest candidate of the shape sweep "
            f"(`dispatch/{spec.id}.csv`): within {RULE_CLOSE - 1:.0%} of its time on {close} of {len(mine)} measured "
            f"shapes; the worst is {shape_label(worst.m, worst.n, worst.k)} at "
            + (f"{worst.rule_gap:.3f}× the fastest's time." if worst.rule_gap == worst.rule_gap
               else "a candidate that did not verify there.")
            + f" Candidates are parameter overrides of `{spec.dispatch_from}`; margin = time of the next best "
            "candidate / the fastest's; rule / fastest = time of the rule's choice / the fastest's (bold beyond "
            f"{RULE_CLOSE:.2f}×).", "",
            md_table(head + ["rule's choice", "rule / fastest", "registers"], body, align="lrlrrrrrr"), ""]


def ncu_table(ncu: pd.DataFrame, shape) -> pd.DataFrame:
    if ncu is None or ncu.empty or "metric" not in ncu:
        return pd.DataFrame()
    m, n, k = shape
    ok = ncu[(ncu.status == "ok") & (ncu.m == m) & (ncu.n == n) & (ncu.k == k)]
    return ok.pivot_table(index="kernel", columns="metric", values="value", aggfunc="first")


def num_text(x) -> str:
    if x != x:
        return "–"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.3g}"


def occupancy_limiter(row: pd.Series) -> str:
    """The launch__occupancy_limit_* with the fewest blocks per SM (ncu's limiting factor)."""
    lim = {name: row.get(f"occupancy_limit_{name}") for name in OCCUPANCY_LIMITS}
    lim = {k: v for k, v in lim.items() if v == v and v is not None}
    if not lim:
        return "?"
    low = min(lim.values())
    return "/".join(k for k, v in lim.items() if v == low) + f" ({int(low)} blocks/SM)"


def top_stalls(row: pd.Series, n: int = 3) -> str:
    stalls = {c.removeprefix("stall_"): row[c] for c in row.index if c.startswith("stall_") and row[c] == row[c]}
    top = sorted(stalls.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{k} {v:.2f}" for k, v in top)


def not_profiled(ncu: pd.DataFrame | None) -> list[str]:
    """One entry per reason an implementation has no metrics: the reason, and which implementations
    (all of them when ncu itself could not run)."""
    if ncu is None or not len(ncu) or "status" not in ncu:
        return []
    bad = ncu[ncu.status != "ok"]
    everyone = set(ncu.kernel)
    out = []
    for status, kernels in sorted(bad.groupby("status").kernel):
        ks = sorted(set(kernels))
        out.append(status if set(ks) == everyone else f"{', '.join(f'`{k}`' for k in ks)} ({status})")
    return out


def dispatched_at(cfg: LabConfig, spec, rows: pd.DataFrame | None, shape):
    """The candidate of dispatch stage ``spec`` that it runs at ``shape`` (by its rule, else by its
    table), as a plain stage (None for a stage without a rule and without a table)."""
    import json

    from ..dispatch.choice import candidate_spec, choose, listed_candidate, resolve, rule_choice

    resolved = resolve(cfg, spec)
    if spec.rule is not None:
        try:
            pick = rule_choice(resolved, shape)
        except LabError:  # no candidate runs the shape
            return None
        return listed_candidate(resolved, pick)
    mine = rows[rows.kernel == spec.id] if rows is not None and len(rows) else None
    if mine is None or mine.empty:
        return None
    entry = choose([dict(r, params=json.loads(r["params"])) for r in mine.to_dict("records")], shape)
    return candidate_spec(resolved, entry["params"])


def _tuned(cfg: LabConfig, spec, builds: pd.DataFrame | None):
    """An autotuned stage as its build resolved it (the sweep's pick, ``tuned_from`` and ``params`` of
    its build row), or None where the build table does not say."""
    from ..dispatch.autotune import resolve

    if builds is None or builds.empty or not {"tuned_from", "params"} <= set(builds.columns):
        return None
    row = builds[(builds.kernel == spec.id) & (builds.get("status", "ok") == "ok")]
    if row.empty or not isinstance(row.iloc[0].tuned_from, str):
        return None
    import ast

    try:
        params = ast.literal_eval(row.iloc[0].params)
    except (ValueError, SyntaxError):
        return None
    return resolve(cfg, spec, {"tuned_from": row.iloc[0].tuned_from, "params": params})


def model_table(cfg: LabConfig, ncu: pd.DataFrame, shape, dispatch: pd.DataFrame | None = None,
                builds: pd.DataFrame | None = None) -> str | None:
    """The notes' traffic model next to what Nsight Compute measured, at ``shape`` (a dispatch stage:
    the model of the candidate it runs there; an autotuned one: of the tile its build picked)."""
    from ..config.geometry import unsupported_reason
    from ..config.model import traffic
    from ..config.records import Shape

    t = ncu_table(ncu, shape)
    sh = Shape(m=shape[0], n=shape[1], k=shape[2])
    rows = []
    for spec in cfg.kernels:
        if spec.backend == "host":
            continue
        if spec.autotuned:
            spec = _tuned(cfg, spec, builds)
            if spec is None:
                continue
        if not spec.dispatched and unsupported_reason(spec, sh):
            continue  # a stage that does not run this shape has no traffic there to predict
        target = dispatched_at(cfg, spec, dispatch, sh) if spec.dispatched else spec
        tr = traffic(target, sh) if target is not None else None
        if tr is None:
            continue
        meas = t.loc[spec.id] if spec.id in t.index else None
        l2 = meas["l2_sectors_read_by_sm"] * 32 if meas is not None and "l2_sectors_read_by_sm" in meas else float("nan")
        dram = (meas["dram_bytes_read"] + meas.get("dram_bytes_write", 0.0)) if meas is not None and "dram_bytes_read" in meas else float("nan")
        ffma = meas["ffma_thread_instructions"] / (sh.m * sh.n * sh.k) if meas is not None and "ffma_thread_instructions" in meas else float("nan")
        rows.append([f"`{spec.id}`", tr.global_coeff, tr.smem_coeff, f"{tr.intensity:g}", num_text(tr.predicted_bytes) + "B",
                     num_text(l2) + "B", fmt_value(l2 / tr.predicted_bytes, ".2f"), num_text(dram) + "B", fmt_value(ffma, ".3f")])
    if not rows:
        return None
    return md_table(["stage", "global loads / result", "shared loads / result", "intensity (flop/B)",
                     "predicted L2→SM", "measured L2→SM (ncu)", "measured / predicted", "DRAM read+write (ncu)",
                     "FFMA / (M·N·K)"], rows)


def eval_list(text) -> list[str]:
    """A list stored in a CSV cell (written as Python/JSON list syntax)."""
    import ast

    try:
        val = ast.literal_eval(text) if isinstance(text, str) else text
    except (ValueError, SyntaxError):
        return [str(text)]
    return [str(v) for v in val] if isinstance(val, (list, tuple)) else [str(val)]


CEILING_NAMES = {"fp32_tflops": ("FMA", "TFLOP/s"), "tf32_tflops": ("TF32 tensor", "TFLOP/s"), "int8_tops": ("INT8 tensor", "TOPS")}


def _launched(spec, shape) -> tuple[str, ...]:
    """The entries a call of a phased stage launches at ``shape``; every phase where today's config cannot plan
    the shape (a profile from an older run): the report says which kernels lack figures rather than fail."""
    from ..config.phases import launched
    from ..config.records import Shape
    from ..errors import ShapeError

    try:
        return launched(spec, Shape.of(shape))
    except ShapeError:
        return tuple(p["entry"] for p in spec.phases)


def profiled_part(spec, shape, duration_ns: float, ceilings: dict | None) -> str:
    """What a stage's profile line is of: nothing to add for a one-kernel stage; for a stage of several
    kernels its main phase alone, and, where the config states the main phase's operations
    (``main_roof``), their rate over the profiled duration against the measured ceiling."""
    if spec.geometry != "phases":
        return ""
    from ..config.phases import main_ops
    from ..config.records import Shape

    out = f", of its main phase `{spec.entry}` alone (one of the {len(_launched(spec, shape))} kernels of a call at this shape)"
    ops = main_ops(spec, Shape.of(shape))
    if ops is None or not duration_ns > 0:
        return out
    name, unit = CEILING_NAMES[spec.main_roof["ceiling"]]
    rate = ops / (duration_ns * 1e-9) / 1e12
    roof = (ceilings or {}).get(spec.main_roof["ceiling"])
    against = f", {100 * rate / roof:.1f}% of the {name} probe's {roof:.0f}" if roof else f" (no {name} roof measured)"
    return out + f": {num_text(ops)} operations at {rate:.0f} {unit}{against}"


def split_phases(ncu: pd.DataFrame | None) -> tuple[pd.DataFrame | None, pd.DataFrame]:
    """A profile table as the rows of each implementation's main kernel (what every other table reads) and
    those of the other phases of stages of several kernels (``phase`` names their entry; a table written
    before phases were profiled has no such column, and no such rows)."""
    if ncu is None or "phase" not in ncu:
        return ncu, pd.DataFrame(columns=["kernel", "phase", "metric", "value"])
    other = ncu["phase"].fillna("").astype(str) != ""
    return ncu[~other].drop(columns="phase"), ncu[other]


PHASE_KEYS = [("sm_throughput_pct", "SM throughput %"), ("dram_throughput_pct", "DRAM throughput %"),
              ("issue_slot_utilisation_pct", "issue slots busy %"), ("tensor_pipe_pct", "tensor pipe busy %"),
              ("registers_per_thread", "registers/thread")]


def profile_lines(spec, prof: pd.DataFrame, shape, ceilings: dict | None, phases: pd.DataFrame | None) -> list[str]:
    """A stage's Nsight Compute paragraph at ``shape`` (``prof``: ncu_table's pivot of the main kernels) and,
    for a stage of several kernels whose phases were profiled, each phase's figures in launch order."""
    import math

    from ..config.phases import is_phased
    from .tables import shape_label

    if shape is None or spec.id not in prof.index:
        return []
    r = prof.loc[spec.id]
    vals = [f"{label} {r[key] / 1e6:.3f} ms" if key == "duration" else
            f"{label} {num_text(r[key])}{'B' if 'bytes' in key else ''}"
            for key, label in NCU_KEYS if key in r and r[key] == r[key]]
    ach, theo = r.get("achieved_occupancy_pct", math.nan), r.get("theoretical_occupancy_pct", math.nan)
    over = (" The achieved occupancy is above the theoretical one, as Nsight Compute reported both: it samples "
            "the first and computes the second from the launch, and this run does not say why they part."
            if ach == ach and theo == theo and ach > theo * 1.02 else "")
    of = profiled_part(spec, shape, r.get("duration", math.nan), ceilings)
    out = [f"Nsight Compute at {shape_label(*shape)}{of}: " + "; ".join(vals)
           + f"; occupancy limited by {occupancy_limiter(r)}; top stalls (cycles/instruction): {top_stalls(r)}." + over]
    if not is_phased(spec) or phases is None or not len(phases):
        return out
    m, n, k = shape
    mine = phases[(phases.kernel == spec.id) & (phases.m == m) & (phases.n == n) & (phases.k == k)]
    by = mine.pivot_table(index="phase", columns="metric", values="value", aggfunc="first") if len(mine) else None
    rows = [(e, r if e == spec.entry else (by.loc[e] if by is not None and e in by.index else pd.Series(dtype=float)))
            for e in _launched(spec, shape)]  # a phase with a `when` only where it launches
    missing = [e for e, x in rows if not x.get("duration", math.nan) > 0]
    if missing:  # a share of a partial sum would mislead: say which were not profiled instead
        return out + [f"Its other kernels' figures are not in this run's profile at {shape_label(*shape)} "
                      f"({', '.join(f'`{e}`' for e in missing)} without a duration)."] if by is not None else out
    total = sum(x["duration"] for _, x in rows)
    table = [[f"`{e}`" + (" (main)" if e == spec.entry else ""), f"{x['duration'] / 1e3:.1f}",
              f"{100 * x['duration'] / total:.0f}%"]
             + [num_text(x.get(key, math.nan)) for key, _ in PHASE_KEYS] for e, x in rows]
    return out + ["", f"Each of its kernels at {shape_label(*shape)}, in launch order (Nsight Compute, the same run; "
                  "the clears of its workspace are not kernels and are not here):", "",
                  md_table(["kernel", "duration µs", "of the kernels' sum", *(label for _, label in PHASE_KEYS)], table)]


def ceilings_line(ceilings: dict) -> str:
    """The sentence naming the GPU's measured ceilings (the ceilings step's record)."""
    tensor = (f"TF32 tensor-core probe (wgmma m64n256k8) **{ceilings['tf32_tflops']:.0f} TFLOP/s**, "
              if ceilings.get("tf32_tflops") else "")
    tensor += (f"INT8 tensor-core probe (wgmma m64n256k32) **{ceilings['int8_tops']:.0f} TOPS**, "
               if ceilings.get("int8_tops") else "")
    return (f"Measured ceilings of this GPU: FP32 FMA probe **{ceilings['fp32_tflops']:.1f} TFLOP/s**, "
            f"{tensor}device-to-device copy **{ceilings['dram_gbps']:.0f} GB/s** (read + write).")
