"""The shapes of a config's held-out draw (suite.held_out), or of the draw its dispatch rules are fitted on,
as a YAML list to paste into a probe configuration.

    python tools/draw_shapes.py [--config config/config.yaml] [--stream fit|score]

Both streams come from suite.held_out's seed and per_class (``sgemm_lab.config.load.held_out_streams``),
neither holding a shape of the config's suite or bench; ``score`` is what the pipeline times as held out,
``fit`` what tools/fit_rules.py fits the rules' STEPs on. One line a shape, with the class it was drawn for.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cli import run  # noqa: E402
from sgemm_lab.config import load as cfgmod  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "config" / "config.yaml"))
    ap.add_argument("--stream", choices=("fit", "score"), default="fit")
    args = ap.parse_args()
    cfg = cfgmod.load(args.config)
    d = cfg.held_out_draw
    if d is None:
        raise ValueError(f"{args.config} has no held-out draw (suite.held_out with per_class > 0)")
    fit, score = cfgmod.held_out_streams(d, cfg.suite, cfg.bench.shapes)
    drawn = fit if args.stream == "fit" else score
    print(f"# {args.stream} stream of seed {d.seed}, {d.per_class} a class")
    print("shapes:")
    for cls, s in drawn:
        print(f"  - [{s.m}, {s.n}, {s.k}]  # {cls}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
