"""Check configuration files as the workflow will read them, without Snakemake: the base config and
any overlays (later ones win), strict YAML (line and column of a syntax error, repeated keys refused),
then the schema and the lab's own rules. Prints "ok" and the run name, or one line naming the file and
the key; exit 0 or 1.

    python tools/check_config.py my-overlay.yaml            # over config/config.yaml
    python tools/check_config.py --base .test/config/config.yaml overlay.yaml

Snakemake refuses an overlay that is not YAML at all before the workflow starts, in its own words
("Config file is not valid JSON or YAML", no file or line): this names both.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from sgemm_lab.config import load as cfgmod  # noqa: E402
from sgemm_lab.config.files import Origins, read  # noqa: E402
from sgemm_lab.errors import ConfigError  # noqa: E402
from _cli import run  # noqa: E402 - tools/ is the script's folder


def merge(base: dict, over: dict) -> dict:
    """``over`` on ``base`` as Snakemake merges config files: mappings key by key, anything else replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("overlays", nargs="*", type=Path)
    ap.add_argument("--base", type=Path, default=ROOT / "config" / "config.yaml")
    args = ap.parse_args(argv)
    try:
        files = [(str(p), read(p)) for p in [args.base, *args.overlays]]
        merged: dict = {}
        for _name, data in files:
            merged = merge(merged, data)
        lab = cfgmod.from_dict(merged, origins=Origins(files))
    except ConfigError as exc:
        print(f"check_config: {exc}", file=sys.stderr)
        return 1
    print(f"ok: run '{lab.run}', {len(lab.kernels)} stages, {len(lab.check.points())} check points per stage")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
