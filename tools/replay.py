"""Replay one check point from its row in a run's check.csv: the same inputs (shape, distribution, seed,
alpha, beta), and, on a GPU with the run's build in results/<run>/build/, the same implementation again.

    python tools/replay.py reports/h100/check.csv --kernel 18_wgmma_3xtf32 --shape 256x256x65536 \\
        --distribution positive --mode beta
    python tools/replay.py reports/h100/check.csv --row 412 --inputs-only

Without --inputs-only it needs what the pipeline needs (a GPU, env/pipeline.txt) and the build of the
implementation (`snakemake --cores 1 results/<run>/build/<kernel>.json --config run=<run>`); it prints the
recorded row and the replayed one side by side. --inputs-only needs no GPU: it draws the inputs again
and prints their checksums and the float64 reference's norm, which is how a seed is shown to replay.
The distributions are read from the configuration (config/config.yaml and any --configfile overlays).
Normal and log-uniform inputs are drawn in blocks (sgemm_lab.results.verify.BLOCK) since that draw
came in (BLOCK_DRAW below); rows of older runs of those two distributions replay with the tree of their
`git_commit`, and the replay warns when it is given one. Normal values are drawn in float32, whose rare
slow-path values NumPy builds may round differently in the last bit (1 of 393,237 values between NumPy
2.4.6 and 2.5.2): the replay warns when the NumPy here is not the run's (its environment.json).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from sgemm_lab.config import load as cfgmod  # noqa: E402
from sgemm_lab.config import records  # noqa: E402
from sgemm_lab.errors import LabError  # noqa: E402
from _cli import run  # noqa: E402 - tools/ is the script's folder


def pick(table: Path, args) -> dict:
    """The one row of ``table`` that --row or the filters name (as strings, seeds exact)."""
    import pandas as pd

    df = pd.read_csv(table, dtype=str, keep_default_na=False)
    if args.row is not None:
        if not 0 <= args.row < len(df):
            raise LabError(f"{table}: no row {args.row} (it has {len(df)})")
        return df.iloc[args.row].to_dict()
    sel = df[df["kernel"] == args.kernel] if args.kernel else df
    if args.shape:
        m, n, k = args.shape.lower().split("x")
        sel = sel[(sel["m"] == m) & (sel["n"] == n) & (sel["k"] == k)]
    for col in ("mode", "distribution"):
        value = getattr(args, col)
        if value:
            sel = sel[sel.get(col, "uniform") == value] if col in sel else sel.iloc[0:0]
    sel = sel[sel["seed"] != ""]
    if len(sel) != 1:
        raise LabError(f"{table}: {len(sel)} rows match (name --kernel, --shape, --mode and --distribution, or --row)")
    return sel.iloc[0].to_dict()


BLOCK_DRAW = "de12dd5"  # the commit from which normal and log-uniform inputs are drawn in blocks


def drawn_as_now(row: dict) -> bool | None:
    """Whether the row's inputs are drawn today as its run drew them: True for uniform, positive and
    extreme rows (one serial stream throughout) and for rows of commits with the block draw, False for
    normal and log-uniform rows of older commits, None where git cannot tell."""
    import subprocess

    if (row.get("distribution") or "uniform") not in ("normal", "loguniform"):
        return True
    commit = str(row.get("git_commit") or "").removesuffix("-dirty")
    try:
        r = subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor", BLOCK_DRAW, commit],
                           capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return {0: True, 1: False}.get(r.returncode)


def numpy_differs(table: Path, row: dict) -> str | None:
    """The run's NumPy version when it is not the one here and the row's normal values may then differ
    in the last bit of a rare value; None otherwise (or where the run did not record one)."""
    import numpy as np

    from sgemm_lab.results import io

    if (row.get("distribution") or "uniform") != "normal":
        return None
    try:
        theirs = io.read_json(table.parent / "environment.json")["packages"]["numpy"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return theirs if theirs and theirs != np.__version__ else None


def problem_of(row: dict, cfg):
    from sgemm_lab.config.records import UNIFORM, Shape
    from sgemm_lab.results import verify

    dist_name = row.get("distribution") or "uniform"
    dists = {d.name: d for d in cfg.check.distributions} | {"uniform": UNIFORM}
    if dist_name not in dists:
        raise LabError(f"distribution '{dist_name}' is not in the configuration (check.distributions)")
    try:
        shape = Shape(m=int(row["m"]), n=int(row["n"]), k=int(row["k"]))
    except (KeyError, ValueError):
        raise LabError(f"the row's shape is not three whole numbers: {row.get('m')}x{row.get('n')}x{row.get('k')}") from None
    # a shape no configuration could ask for, or one this machine cannot hold, is refused before any draw
    if min(shape.m, shape.n, shape.k) < 1 or max(shape.m * shape.k, shape.k * shape.n, shape.m * shape.n) > 2**31 - 1:
        raise LabError(f"shape {shape.m}x{shape.n}x{shape.k}: dimensions below 1 or an operand over 2^31 - 1 elements, "
                       "which no configuration accepts")
    from sgemm_lab.config import footprint as fp

    big = fp.too_big(fp.host_check_bytes(shape), fp.host_available_bytes(), "host")
    if big:
        raise LabError(f"shape {shape.m}x{shape.n}x{shape.k}: {big}")
    # the beta mode's alpha and beta: the modes differ only in which is set to 0
    return verify.make_problem(shape, alpha=cfg.check.alpha, beta=cfg.check.beta, seed=int(row["seed"]),
                               dist=dists[dist_name])


def checksum(x) -> str:
    return hashlib.sha256(x.tobytes()).hexdigest()[:16]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table", type=Path)
    ap.add_argument("--row", type=int)
    ap.add_argument("--kernel")
    ap.add_argument("--shape")
    ap.add_argument("--mode")
    ap.add_argument("--distribution")
    ap.add_argument("--configfile", action="append", default=[])
    ap.add_argument("--inputs-only", action="store_true")
    args = ap.parse_args(argv)
    try:
        import numpy as np

        from sgemm_lab.config.files import read
        from sgemm_lab.results import verify

        overrides = {}
        for f in args.configfile:
            overrides.update(read(f))
        cfg = cfgmod.load(ROOT / "config" / "config.yaml", overrides)
        row = pick(args.table, args)
        same = drawn_as_now(row)
        if same is not True:  # a warning, not a refusal: the checksums still say what is drawn now
            print(f"replay: warning: {row.get('distribution')} inputs of commit {row.get('git_commit')} "
                  + ("were drawn serially, before the block draw (" + BLOCK_DRAW + "): replay them with that "
                     "commit's tree" if same is False else "may predate the block draw (" + BLOCK_DRAW +
                     "; git cannot tell): if so, replay them with that commit's tree"), file=sys.stderr)
        theirs = numpy_differs(args.table, row)
        if theirs:
            print(f"replay: warning: the run drew these normal inputs with NumPy {theirs}, this is NumPy "
                  f"{np.__version__}: a rare value may differ in its last bit, and the checksums with it",
                  file=sys.stderr)
        p = problem_of(row, cfg)
        ref, _ = verify.references(p)
        print(f"{row['kernel']} {p.shape} {p.dist} seed {p.seed} (mode {row.get('mode', '-')}): "
              f"A {checksum(p.a)} B {checksum(p.b)} C {checksum(p.c)}, ||ref||_F = {np.linalg.norm(ref):.9e}")
        if args.inputs_only:
            return 0
        return replay(row, p, cfg)
    except LabError as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return 1


def replay(row: dict, p, cfg) -> int:
    from sgemm_lab.measure.runners import runner_for

    run_dir = ROOT / "results" / cfg.run
    impl = row["kernel"]
    binary = record = None
    if impl not in records.BASELINES:
        binary, record = run_dir / "build" / f"{impl}.bin", run_dir / "build" / f"{impl}.json"
        if not record.exists():
            raise LabError(f"no build of {impl} in {run_dir}: run `snakemake --cores 1 {record.relative_to(ROOT)}` first")
    runner = runner_for(cfg, impl, binary, record)
    try:
        rows = runner.check(p.shape, p.seed, next((d for d in cfg.check.distributions if d.name == p.dist), None)
                            or records.UNIFORM)
    finally:
        runner.close()
    for r in rows:
        if row.get("mode") in (None, "", r["mode"]):
            print(f"  {r['mode']:>15}: recorded rel err {row.get('rel_err', '?'):>12}, replayed {r['rel_err']:.6e} "
                  f"({'pass' if r['passed'] else 'FAIL ' + r['reason']}; cuBLAS FP32 {r['cublas_rel_err']:.3e})")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
