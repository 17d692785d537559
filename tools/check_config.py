"""Check configuration files as the workflow will read them, without Snakemake: the base config and
any overlays (later ones win), strict YAML (line and column of a syntax error, repeated keys refused),
then the schema and the lab's own rules. Prints "ok" and the run name, or one line naming the file and
the key; exit 0 or 1.

    python tools/check_config.py my-overlay.yaml            # over config/config.yaml
    python tools/check_config.py --base .test/config/config.yaml overlay.yaml

Snakemake refuses an overlay that is not YAML at all before the workflow starts, in its own words
("Config file is not valid JSON or YAML", no file or line): this names both.

    python tools/check_config.py --snakemake-args --cores all --configfile my-overlay.yaml

reads only the config files of the Snakemake command line that follows (`env/pipeline.sh` does this
before it starts Snakemake), silently when they read.
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


def configfiles_of(snakemake_args: list[str]) -> list[Path]:
    """The files a Snakemake command line names with --configfile / --configfiles (each may take several)."""
    ap = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)  # (--config: Snakemake's)
    ap.add_argument("--configfile", "--configfiles", nargs="+", action="extend", default=[], dest="files")
    try:
        known, _ = ap.parse_known_args(snakemake_args)
    except argparse.ArgumentError:
        raise ConfigError("--configfile names no file") from None
    return [Path(f) for f in known.files]


def read_only(snakemake_args: list[str]) -> int:
    """Each config file of a Snakemake command line read as the workflow reads it (bounded, strict YAML,
    no YTE), before Snakemake's own reader, which answers some files with a traceback (a number of
    thousands of digits, nesting thousands deep) or runs their Python (YTE). Silent when all read;
    one line and exit 1 for the first that does not. The schema and the lab's rules are the workflow's
    (with the command's --config beside them)."""
    try:
        for path in configfiles_of(snakemake_args):  # (its own ConfigError for a --configfile with no file)
            read(path)
    except ConfigError as exc:
        print(f"config: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--snakemake-args"]:  # env/pipeline.sh: the rest is its Snakemake command line
        return read_only(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("overlays", nargs="*", type=Path)
    ap.add_argument("--base", type=Path, default=ROOT / "config" / "config.yaml")
    ap.add_argument("--snakemake-args", action="store_true",
                    help="first argument only: read the config files of the Snakemake command line that follows")
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
