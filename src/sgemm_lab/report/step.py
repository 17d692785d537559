"""The aggregate, plot and report steps: tidy tables with provenance, figures, the markdown report.

Every table and record they read is checked first (``io.read_table``, ``io.read_json_checked``): a
missing, empty, binary, cut or misshapen file stops the step with one line naming it, before anything is
written. Seeds stay exact integers (nullable Int64, empty for skipped rows): a float cannot hold a
64-bit seed, and a failing point is replayed from its row's seed.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..config.records import LabConfig
from ..errors import LabError
from ..results import io, outcome
from ..results.common import add_provenance, log, one_gpu_model
from ..results.outcome import FAILED, StepStatus, first_line
from ..profiling.step import PROFILE_COLUMNS
from ..sanitizers.step import SANITIZE_COLUMNS
from .html import fragment
from .run_files import BODY, FIGURES, RUN_TABLES

# Columns the steps rely on, per table; a table whose header lacks one is not the table expected.
# Tables that a step writes empty (no rows) when it ran or found nothing are read with rows=False.
STAGE_BENCH = ("kernel", "m", "n", "k", "status")
SEEDS = ("seed",)


def _record(path: Path, what: str, key: str | None = None, kind=dict):
    """A JSON record a step wrote, with ``key`` of type ``kind`` when given (DamagedFile otherwise)."""
    data = io.read_json_checked(path, what=what)
    if not isinstance(data, dict) or (key is not None and not isinstance(data.get(key), kind)):
        need = f" with {key!r}" if key is not None else ""
        raise io.DamagedFile(f"{path} ({what}): not the record expected (a JSON object{need})")
    return data


def _exact_seeds(frame, rows: list[dict]):
    """``frame`` (built from ``rows``) with its seed columns taken from ``rows`` as exact integers:
    a DataFrame built from dicts turns an integer column with missing values into floats."""
    for col in SEEDS:
        if col in frame:
            exact = io.exact_ints([r.get(col) for r in rows])
            if exact is not None:
                frame[col] = exact
    return frame


def aggregate(cfg: LabConfig, *, bench_csvs, check_jsons, build_jsons, profile_csvs, sanitize_csvs, env_json: Path,
              bench_out: Path, check_out: Path, build_out: Path, env_out: Path, ncu_out: Path,
              sanitize_out: Path, dispatch_out: Path | None = None) -> None:
    import pandas as pd

    from ..dispatch.choice import DISPATCH_COLUMNS, dispatch_rows
    from .tables import collect_bench

    # everything is read (and refused, if damaged) before the first file is written
    stage_tables = [io.read_table(p, required=STAGE_BENCH, rows=False, ints=SEEDS, what="a stage's bench table")
                    for p in bench_csvs]
    checks = [r for p in check_jsons for r in _record(p, "a stage's check record", "points", list)["points"]]
    builds = [_record(p, "a build record", "kernel", str) for p in build_jsons]
    env = _record(env_json, "the environment record")
    profiles = [io.read_table(p, required=("kernel",), rows=False, what="a profile table") for p in profile_csvs]
    sanitized = [io.read_table(p, required=("kernel",), rows=False, what="a sanitizer table") for p in sanitize_csvs]
    bench_df = collect_bench(stage_tables, order=list(cfg.implementations),
                             tf32=tuple(k.id for k in cfg.kernels if k.precision == "tf32"))
    check_df = _exact_seeds(pd.DataFrame(checks), checks)
    one_gpu_model([bench_df, check_df], env, cfg.run)
    bench_df = add_provenance(bench_df, builds, env)
    io.write_csv(bench_out, bench_df)
    io.write_csv(check_out, add_provenance(check_df, builds, env))
    if dispatch_out is not None:
        io.write_csv(dispatch_out, dispatch_rows(builds), columns=DISPATCH_COLUMNS)
    nested = ("dispatch_table", "candidates", "phases")  # in dispatch.csv, one row per shape; each phase's build in its record
    io.write_csv(build_out, pd.DataFrame([{k: v for k, v in b.items() if k not in nested} for b in builds]))
    io.write_json(env_out, env)
    ncu = pd.concat(profiles, ignore_index=True) if profiles else pd.DataFrame(columns=PROFILE_COLUMNS)
    io.write_csv(ncu_out, add_provenance(ncu, builds, env))
    io.write_csv(sanitize_out, add_provenance(pd.concat(sanitized, ignore_index=True) if sanitized else
                 pd.DataFrame(columns=SANITIZE_COLUMNS), builds, env))


def stage_families(cfg: LabConfig) -> dict[str, str]:
    """Each implementation's family for the figures, from its configuration alone (no stage named):
    the CPU, the GPU without tiling, CUDA cores with tiles (autotuned and dispatch stages with them),
    tensor cores."""
    fam = {"numpy": "CPU"}
    for k in cfg.kernels:
        if k.precision != "fp32":
            fam[k.id] = "Tensor cores (TF32, 3xTF32)"
        elif k.backend == "host":
            fam[k.id] = "CPU"
        elif k.geometry == "block_tile" or k.autotuned or k.dispatched:
            fam[k.id] = "CUDA cores, tiled"
        else:
            fam[k.id] = "CUDA cores, no tiling"
    return fam


def plot(cfg: LabConfig, *, bench_csv: Path, ncu_csv: Path, ceilings_json: Path | None, outs,
         sweeps: list[Path] = (), heatmaps: list[Path] = (), check_csv: Path | None = None,
         processes: int = 1) -> StepStatus | None:
    """Every figure of the report, drawn by up to ``processes`` forked processes side by side; a figure
    that cannot be drawn becomes a picture saying why (and the step's status says which), so that one
    figure's problem never costs the others. A damaged input file is not one figure's problem: it stops
    the step (``io.DamagedFile``), and the figures stay as they were."""
    from . import plots, profile_plots
    from .stage_tables import split_phases
    from .tables import headline_shape, ladder_rows

    bench_df = io.read_table(bench_csv, required=STAGE_BENCH, rows=False, what="the run's bench table")
    ncu, _ = split_phases(io.read_table(ncu_csv, required=("kernel", "metric", "value"), rows=False,
                                        what="the run's profile table"))  # the figures read the main kernels
    checks = (io.read_table(check_csv, required=("kernel", "status"), rows=False, what="the run's check table")
              if check_csv is not None else None)
    sweep_tables = [io.read_table(p, required=("kernel",), rows=False, what="a tile sweep") for p in sweeps]
    ceil = io.read_json_checked(ceilings_json, what="the measured ceilings") if ceilings_json else {}
    order = list(cfg.implementations)
    ok = bench_df[bench_df.status == "ok"] if "status" in bench_df else bench_df
    shape = headline_shape(cfg, ok) or (cfg.sweep.shape.m, cfg.sweep.shape.n, cfg.sweep.shape.k)
    figures = {
        outs.size: lambda out: plots.tflops_vs_size(ladder_rows(cfg, bench_df), out, order=order,
                                                    families=stage_families(cfg)),
        outs.ladder: lambda out: plots.ladder_bars(bench_df, out, order=order, shape=shape),
        outs.roofline: lambda out: profile_plots.roofline(bench_df, ncu, ceil, out, order=order, shape=shape,
                                                          precision=cfg.precisions),
        outs.levels: lambda out: profile_plots.levels(bench_df, ncu, ceil, out, order=order, shape=shape,
                                                      precision=cfg.precisions),
        outs.stalls: lambda out: profile_plots.stall_bars(ncu, out, order=order, shape=shape),
        outs.memory: lambda out: profile_plots.memory_occupancy(ncu, out, order=order, shape=shape),
    }
    if checks is not None and hasattr(outs, "accuracy"):
        figures[outs.accuracy] = lambda out: plots.accuracy_speed(bench_df, checks, out, order=order,
                                                                  shape=shape, precision=cfg.precisions)
    for csv, table, png in zip(sweeps, sweep_tables, heatmaps):  # the same order: both listed by swept stage
        spec = cfg.kernel(Path(csv).stem)
        figures[png] = lambda out, table=table, spec=spec: plots.sweep_heatmap(
            table, out, kernel=spec.id, axes=spec.sweep_axes, title=f"{spec.id}: {spec.title}", ladder=dict(spec.params))
    broken = [line for line in _draw_all(list(figures.items()), processes) if line]
    if broken:
        return StepStatus(status=FAILED, message=f"{len(broken)} of {len(figures)} figures not drawn ({broken[0]})")
    return None


def _draw(out, draw) -> str | None:
    """``draw(out)``, or a placeholder picture saying why it could not be drawn (then that line)."""
    from . import plots

    try:
        draw(out)
        return None
    except Exception as exc:  # noqa: BLE001 - drawn as a placeholder and reported
        import traceback

        log.debug("%s", traceback.format_exc())
        log.warning("figure %s: %s: %s", Path(out).name, type(exc).__name__, first_line(exc))
        plots.placeholder(out, f"{Path(out).stem}: no figure ({type(exc).__name__}: {first_line(exc, 120)})")
        return f"{Path(out).name}: {type(exc).__name__}: {first_line(exc, 120)}"


_PENDING: list = []  # the figures of _draw_all, read by its forked processes (closures do not pickle)


def _draw_pending(i: int) -> str | None:
    return _draw(*_PENDING[i])


def _draw_all(items: list, processes: int) -> list[str | None]:
    """``_draw`` of each (out, draw) in ``items``: in up to ``processes`` forked processes (each starts
    with the data already read and matplotlib imported), else, or when a process dies, here one after
    another. Each figure is written atomically (``plots``), so a figure drawn twice is drawn whole."""
    import multiprocessing as mp

    global _PENDING
    n = max(1, min(int(processes), len(items)))
    if n > 1 and "fork" in mp.get_all_start_methods():
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        _PENDING = items
        try:
            with ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("fork")) as pool:
                return list(pool.map(_draw_pending, range(len(items))))
        except (BrokenProcessPool, OSError) as exc:
            log.warning("figures: drawing side by side failed (%s: %s); drawn one after another",
                        type(exc).__name__, first_line(exc))
        finally:
            _PENDING = []
    return [_draw(out, draw) for out, draw in items]


def report(cfg: LabConfig, *, bench_csv: Path, check_csv: Path, build_csv: Path, env_json: Path, figures: list[Path],
           sweeps: list[Path], epilogues: list[Path], ncu_csv: Path, ceilings_json: Path | None, sanitize_csv: Path,
           start_json: Path | None, out: Path, failures_csv: Path | None = None, statuses: list[Path] = (),
           steps_out: Path | None = None, dispatch_csv: Path | None = None, run_out: Path | None = None,
           records: "list[outcome.StepRecord] | None" = None, run: dict | None = None) -> None:
    """The markdown report; ``steps.csv``, what became of every step (status, message, log, seconds); and
    ``run.json``, the command and wall time of the run. A run drawn again (``rerender``) passes the
    ``records`` and ``run`` it committed instead of the status files and start record of a live run."""
    from dataclasses import asdict

    import pandas as pd

    from .sections import render

    def table(path, what, *required):
        return io.read_table(path, required=required, rows=False, what=what)

    if run is None:
        start = _record(start_json, "the run's start record") if start_json and Path(start_json).exists() else {}
        started = start.get("started_unix")
        run = {"command": start.get("command"), "wall_s": round(time.time() - started, 1) if started else None}
    base = Path(out).parent
    records = outcome.read_all(statuses) if records is None else records
    ceil = io.read_json_checked(ceilings_json, what="the measured ceilings") if ceilings_json else None
    text = render(cfg, command=run.get("command"), bench=table(bench_csv, "the run's bench table", *STAGE_BENCH),
                  checks=table(check_csv, "the run's check table", "kernel", "status"),
                  builds=table(build_csv, "the run's build table", "kernel"),
                  env=_record(env_json, "the environment record"),
                  figures={Path(f).stem: Path(f).relative_to(base) for f in figures},
                  sweeps={Path(p).stem: table(p, "a tile sweep", "kernel") for p in sweeps},
                  epilogues={Path(p).stem: table(p, "an epilogue table", "implementation") for p in epilogues},
                  ncu=table(ncu_csv, "the run's profile table", "kernel", "metric", "value"),
                  ceilings=ceil if isinstance(ceil, dict) and "fp32_tflops" in ceil else None,
                  sanitize=table(sanitize_csv, "the run's sanitizer table", "kernel"),
                  failures=table(failures_csv, "the failure tests' table", "case") if failures_csv else None,
                  outcomes=records, wall_s=run.get("wall_s"),
                  dispatch=table(dispatch_csv, "the dispatch table", "kernel") if dispatch_csv else None)
    if steps_out is not None:
        io.write_csv(steps_out, pd.DataFrame([asdict(r) for r in records], columns=outcome.WRITTEN))
    if run_out is not None:
        io.write_json(run_out, {"command": run.get("command"), "wall_s": run.get("wall_s")})
    # the same report as HTML, for the page the HTML report opens on (workflow/report/workflow.rst)
    io.write_text(Path(out).with_name(BODY), fragment(text))
    io.write_text(out, text)


def committed_sweeps(cfg: LabConfig, run_dir: Path) -> list[Path]:
    """The tile sweeps a run committed, of stages the configuration still has, in its order."""
    have = {p.stem: p for p in Path(run_dir, "sweeps").glob("*.csv")}
    return [have[k.id] for k in cfg.kernels if k.id in have]


def rerender(cfg: LabConfig, *, run_dir: Path, configfiles: list[Path] = (), html: bool = True,
             log_path: Path | None = None, processes: int = 1) -> StepStatus | None:
    """A finished run's figures and ``report.md`` drawn again from the tables it committed in ``run_dir``
    (``reports/<run>/``), on any machine: no GPU and no ``results/``; then (``html``) its HTML report,
    ``report.html`` beside them. What became of its steps and its command and wall time come from its
    ``steps.csv`` and ``run.json`` (a run from before ``run.json`` existed is drawn without its wall
    time); the configuration is the current one (the base config and ``configfiles``). The tables are
    read, never written."""
    from dataclasses import replace

    run_dir = Path(run_dir)
    cfg = replace(cfg, run=run_dir.name)
    missing = [name for name in RUN_TABLES if not (run_dir / name).is_file()]
    if missing:
        raise io.DamagedFile(f"{run_dir}: not the tables of a finished run (no {', '.join(missing)})")
    _check_committed(run_dir)
    status = _drawn_in_place(cfg, run_dir, processes)
    if html:
        html_report(run_dir, configfiles, log_path=log_path)
    return status


BENCH_NUMBERS = ("m", "n", "k", "median_ms", "iqr_ms", "reps", "tflops")
CHECK_NUMBERS = ("m", "n", "k", "rel_err", "max_abs_err", "tolerance")


def _check_committed(run_dir: Path) -> None:
    """A committed run's tables as a finished run holds them (``table_checks``): its bench table with
    rows of one GPU and commit (its environment record's), one row a measurement, possible values; its
    check table with numbers where numbers go. Refused with one line before anything is drawn."""
    from .table_checks import finished_run

    bench = io.read_table(run_dir / "bench.csv", required=STAGE_BENCH, numbers=BENCH_NUMBERS,
                          what="the run's bench table")
    env = _record(run_dir / "environment.json", "the run's environment record")
    finished_run(bench, env, bench=run_dir / "bench.csv", env_path=run_dir / "environment.json")
    io.read_table(run_dir / "check.csv", required=("kernel", "status"), numbers=CHECK_NUMBERS,
                  what="the run's check table")


def _drawn_in_place(cfg: LabConfig, run_dir: Path, processes: int = 1) -> StepStatus | None:
    """The figures and ``report.md`` drawn into a folder beside ``run_dir`` (the same filesystem), then
    moved over the committed ones only when every one of them was drawn: a figure that cannot be drawn,
    a full disk or any other failure leaves ``run_dir`` as it was (LabError, one line)."""
    import os
    import shutil
    import tempfile
    from types import SimpleNamespace

    def optional(name: str) -> Path | None:
        return run_dir / name if (run_dir / name).is_file() else None

    steps = io.read_table(run_dir / "steps.csv", required=outcome.COLUMNS, rows=False, what="the run's step table")
    records = [outcome.StepRecord(step=str(r.step), kernel=_text(r.kernel) or None, status=str(r.status),
                                  message=_text(r.message), log=_text(r.log) or None, seconds=float(r.seconds))
               for r in steps.itertuples()]
    run = _record(run_dir / "run.json", "the run record") if optional("run.json") else {}
    sweeps = committed_sweeps(cfg, run_dir)
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".rerender-{run_dir.name}-", dir=run_dir.parent))
    except OSError as exc:
        raise LabError(f"rerender {run_dir}: cannot make a folder to draw in beside it: {exc.strerror or exc}; "
                       "nothing was changed") from None
    try:
        figs = staging / "figures"
        figs.mkdir()
        outs = SimpleNamespace(**{name: figs / file for name, file in FIGURES.items()})
        heatmaps = [figs / f"sweep_{p.stem}.png" for p in sweeps]
        try:
            status = plot(cfg, bench_csv=run_dir / "bench.csv", ncu_csv=run_dir / "ncu_metrics.csv",
                          ceilings_json=optional("ceilings.json"), outs=outs, sweeps=sweeps, heatmaps=heatmaps,
                          check_csv=run_dir / "check.csv", processes=processes)
            if status is not None and status.status == FAILED:
                raise LabError(f"rerender {run_dir}: {status.message}; nothing was changed")
            report(cfg, bench_csv=run_dir / "bench.csv", check_csv=run_dir / "check.csv",
                   build_csv=run_dir / "build.csv", env_json=run_dir / "environment.json",
                   figures=list(vars(outs).values()) + heatmaps, sweeps=sweeps,
                   epilogues=sorted(Path(run_dir, "epilogue").glob("*.csv")), ncu_csv=run_dir / "ncu_metrics.csv",
                   ceilings_json=optional("ceilings.json"), sanitize_csv=run_dir / "sanitize.csv", start_json=None,
                   out=staging / "report.md", failures_csv=optional("failure_tests.csv"),
                   dispatch_csv=optional("dispatch.csv"), records=records, run=run)
        except OSError as exc:
            raise LabError(f"rerender {run_dir}: cannot write the drawing ({exc.strerror or exc}); nothing was "
                           "changed") from None
        drawn = [p for p in [*vars(outs).values(), *heatmaps, staging / BODY, staging / "report.md"] if p.is_file()]
        (run_dir / "figures").mkdir(exist_ok=True)
        for p in drawn:  # (a rename within one filesystem: each file whole, old or new)
            os.replace(p, run_dir / p.relative_to(staging))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return status


def html_report(run_dir: Path, configfiles: list[Path] = (), *, log_path: Path | None = None) -> Path:
    """``snakemake --report`` on a run's files as they stand: ``run_dir/report.html``, one self-contained
    page of the report and its figures (Snakemake's own report; what it says goes to ``log_path``)."""
    import subprocess
    import sys

    from ..results.logs import append

    out = Path(run_dir) / "report.html"
    cmd = [sys.executable, "-m", "snakemake", "--report", str(out), "--nolock", "--config", f"run={Path(run_dir).name}"]
    if configfiles:
        cmd += ["--configfile", *map(str, configfiles)]
    log.info("HTML report: %s", out)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    append(log_path, " ".join(cmd) + "\n" + proc.stdout + proc.stderr)
    if proc.returncode != 0 or not out.is_file():
        said = (proc.stderr or proc.stdout).strip().splitlines()
        raise LabError(f"snakemake --report for {run_dir} failed (exit {proc.returncode}): "
                       f"{first_line(said[-1]) if said else 'no output'}")
    return out


def _text(cell) -> str:
    """A text cell of a table read back: empty for a missing one (pandas reads an empty cell as NaN)."""
    return "" if cell is None or cell != cell else str(cell)
