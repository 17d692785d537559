"""The aggregate, plot and report steps: tidy tables with provenance, figures, the markdown report.
"""

from __future__ import annotations

import time
from pathlib import Path

from .. import io
from ..config import LabConfig
from ..outcome import FAILED, StepStatus, first_line
from .common import add_provenance, log, one_gpu_model
from .sanitize import SANITIZE_COLUMNS


def aggregate(cfg: LabConfig, *, bench_csvs, check_jsons, build_jsons, profile_csvs, sanitize_csvs, env_json: Path,
              bench_out: Path, check_out: Path, build_out: Path, env_out: Path, ncu_out: Path,
              sanitize_out: Path, dispatch_out: Path | None = None) -> None:
    import pandas as pd

    from ..dispatch_steps import DISPATCH_COLUMNS, dispatch_rows
    from ..report import collect_bench

    bench_df = collect_bench([pd.read_csv(p) for p in bench_csvs], order=list(cfg.implementations),
                             tf32=tuple(k.id for k in cfg.kernels if k.precision == "tf32"))
    checks = [r for p in check_jsons for r in io.read_json(p)["points"]]
    builds = [io.read_json(p) for p in build_jsons]
    env = io.read_json(env_json)
    one_gpu_model([bench_df, pd.DataFrame(checks)], env, cfg.run)
    bench_df = add_provenance(bench_df, builds, env)
    io.write_csv(bench_out, bench_df)
    io.write_csv(check_out, add_provenance(pd.DataFrame(checks), builds, env))
    if dispatch_out is not None:
        io.write_csv(dispatch_out, dispatch_rows(builds), columns=DISPATCH_COLUMNS)
    nested = ("dispatch_table", "candidates")  # in dispatch.csv, one row per shape
    io.write_csv(build_out, pd.DataFrame([{k: v for k, v in b.items() if k not in nested} for b in builds]))
    io.write_json(env_out, io.read_json(env_json))
    frames = [pd.read_csv(p) for p in profile_csvs]
    ncu = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["kernel", "m", "n", "k", "status", "metric", "value", "unit"])
    io.write_csv(ncu_out, add_provenance(ncu, builds, env))
    frames = [pd.read_csv(p) for p in sanitize_csvs]
    io.write_csv(sanitize_out, add_provenance(pd.concat(frames, ignore_index=True) if frames else
                 pd.DataFrame(columns=SANITIZE_COLUMNS), builds, env))


def plot(cfg: LabConfig, *, bench_csv: Path, ncu_csv: Path, ceilings_json: Path | None, outs,
         sweeps: list[Path] = (), heatmaps: list[Path] = (), check_csv: Path | None = None) -> StepStatus | None:
    """Every figure of the report; a figure that cannot be drawn becomes a picture saying why (and the
    step's status says which), so that one bad table never costs the others."""
    import pandas as pd

    from .. import plots
    from ..report import headline_shape, ladder_rows

    bench_df, ncu = pd.read_csv(bench_csv), pd.read_csv(ncu_csv)
    ceil = io.read_json(ceilings_json) if ceilings_json else {}
    order = list(cfg.implementations)
    ok = bench_df[bench_df.status == "ok"] if "status" in bench_df else bench_df
    shape = headline_shape(cfg, ok) or (cfg.sweep.shape.m, cfg.sweep.shape.n, cfg.sweep.shape.k)
    figures = {
        outs.size: lambda out: plots.tflops_vs_size(ladder_rows(cfg, bench_df), out, order=order),
        outs.ladder: lambda out: plots.ladder_bars(bench_df, out, order=order, shape=shape),
        outs.roofline: lambda out: plots.roofline(bench_df, ncu, ceil, out, order=order, shape=shape),
        outs.stalls: lambda out: plots.stall_bars(ncu, out, order=order, shape=shape),
        outs.memory: lambda out: plots.memory_occupancy(ncu, out, order=order, shape=shape),
    }
    if check_csv is not None and hasattr(outs, "accuracy"):
        figures[outs.accuracy] = lambda out: plots.accuracy_speed(bench_df, pd.read_csv(check_csv), out, order=order,
                                                                  shape=shape, precision=cfg.precisions)
    for csv, png in zip(sweeps, heatmaps):  # the same order: the workflow lists both by swept stage
        spec = cfg.kernel(Path(csv).stem)
        figures[png] = lambda out, csv=csv, spec=spec: plots.sweep_heatmap(
            pd.read_csv(csv), out, kernel=spec.id, axes=spec.sweep_axes, title=f"{spec.id}: {spec.title}")
    broken = []
    for out, draw in figures.items():
        try:
            draw(out)
        except Exception as exc:  # noqa: BLE001 - drawn as a placeholder and reported
            import traceback

            log.debug("%s", traceback.format_exc())
            log.warning("figure %s: %s: %s", Path(out).name, type(exc).__name__, first_line(exc))
            plots.placeholder(out, f"{Path(out).stem}: no figure ({type(exc).__name__}: {first_line(exc, 120)})")
            broken.append(f"{Path(out).name}: {type(exc).__name__}: {first_line(exc, 120)}")
    if broken:
        return StepStatus(status=FAILED, message=f"{len(broken)} of {len(figures)} figures not drawn ({broken[0]})")
    return None


def report(cfg: LabConfig, *, bench_csv: Path, check_csv: Path, build_csv: Path, env_json: Path, figures: list[Path],
           sweeps: list[Path], epilogues: list[Path], ncu_csv: Path, ceilings_json: Path | None, sanitize_csv: Path,
           start_json: Path | None, out: Path, failures_csv: Path | None = None, statuses: list[Path] = (),
           steps_out: Path | None = None, dispatch_csv: Path | None = None) -> None:
    """The markdown report, and ``steps.csv``: what became of every step (status, message, log, seconds)."""
    from dataclasses import asdict

    import pandas as pd

    from .. import outcome
    from ..report import render

    start = io.read_json(start_json) if start_json and Path(start_json).exists() else {}
    started = start.get("started_unix")
    base = Path(out).parent
    records = outcome.read_all(statuses)
    ceil = io.read_json(ceilings_json) if ceilings_json else None
    text = render(cfg, command=start.get("command"), bench=pd.read_csv(bench_csv), checks=pd.read_csv(check_csv),
                  builds=pd.read_csv(build_csv), env=io.read_json(env_json),
                  figures={Path(f).stem: Path(f).relative_to(base) for f in figures},
                  sweeps={Path(p).stem: pd.read_csv(p) for p in sweeps},
                  epilogues={Path(p).stem: pd.read_csv(p) for p in epilogues},
                  ncu=pd.read_csv(ncu_csv), ceilings=ceil if ceil and "fp32_tflops" in ceil else None,
                  sanitize=pd.read_csv(sanitize_csv), failures=pd.read_csv(failures_csv) if failures_csv else None,
                  outcomes=records, wall_s=(time.time() - started) if started else None,
                  dispatch=pd.read_csv(dispatch_csv) if dispatch_csv else None)
    if steps_out is not None:
        io.write_csv(steps_out, pd.DataFrame([asdict(r) for r in records], columns=outcome.COLUMNS))
    io.write_text(out, text)

