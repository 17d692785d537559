"""The SLURM profile (workflow/profiles/slurm) with one site's answers put in, as its admin would edit it:
the partitions, the account, the QoS, the GPU model and the status command. The lab's own SLURM runs
(tools/slurm_loopback.sh, tools/slurm_gpu_host.sh) use it, so that what they show is the shipped profile
with its SITE lines changed and nothing else.

    python tools/site_profile.py OUT_DIR [--cpu-partition P] [--gpu-partition P] [--account A | --no-account]
                                 [--qos Q] [--gpu-model M | --untyped-gpus] [--status-command sacct|squeue]
                                 [--set KEY=VALUE ...]
    python tools/site_profile.py --diff DIR     # what DIR/config.yaml changes of the shipped profile

OUT_DIR/config.yaml is written (a folder Snakemake takes as --workflow-profile). --untyped-gpus drops
the GPU model (a node whose GRES has no type: Gres=gpu:1); --set adds top-level profile settings
(e.g. --set slurm-init-seconds-before-status-checks=5).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cli import run  # noqa: E402

PROFILE = ROOT / "workflow" / "profiles" / "slurm" / "config.yaml"
SHIPPED_GPU_PARTITION = "gpu"


def site(profile: dict, *, cpu_partition: str | None = None, gpu_partition: str | None = None,
         account: str | None = None, no_account: bool = False, qos: str | None = None,
         gpu_model: str | None = None, untyped_gpus: bool = False, status_command: str | None = None,
         settings: dict | None = None) -> dict:
    """``profile`` (the shipped one, parsed) with a site's answers; the rest as shipped."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in profile.items()}
    defaults = out.setdefault("default-resources", {})
    rules = {rule: dict(res) for rule, res in out.get("set-resources", {}).items()}
    if cpu_partition:
        defaults["slurm_partition"] = cpu_partition
    if account:
        defaults["slurm_account"] = account
    if no_account:
        defaults.pop("slurm_account", None)
        out["slurm-no-account"] = True
    if qos:
        out["slurm-qos"] = qos
    if status_command:
        out["slurm-status-command"] = status_command
    for res in rules.values():
        if gpu_partition and res.get("slurm_partition") == SHIPPED_GPU_PARTITION:
            res["slurm_partition"] = gpu_partition
        if "gpu_model" in res:
            if untyped_gpus:
                del res["gpu_model"]
            elif gpu_model:
                res["gpu_model"] = gpu_model
    out["set-resources"] = rules
    out.update(settings or {})
    return out


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def difference(profile: dict, shipped: dict) -> list[str]:
    """One line per setting that ``profile`` adds to, changes in or drops from ``shipped``, by its path
    (``set-resources.bench_gpu.slurm_partition``)."""
    mine, theirs = _flat(profile), _flat(shipped)
    lines = []
    for key in sorted(set(mine) | set(theirs)):
        if key not in theirs:
            lines.append(f"+ {key}: {mine[key]}")
        elif key not in mine:
            lines.append(f"- {key}: {theirs[key]}")
        elif mine[key] != theirs[key]:
            lines.append(f"~ {key}: {theirs[key]} -> {mine[key]}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--diff", action="store_true", help="print what OUT_DIR/config.yaml changes; write nothing")
    ap.add_argument("--cpu-partition")
    ap.add_argument("--gpu-partition")
    who = ap.add_mutually_exclusive_group()
    who.add_argument("--account")
    who.add_argument("--no-account", action="store_true")
    ap.add_argument("--qos")
    model = ap.add_mutually_exclusive_group()
    model.add_argument("--gpu-model")
    model.add_argument("--untyped-gpus", action="store_true")
    ap.add_argument("--status-command", choices=["sacct", "squeue"])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    if args.diff:
        path = args.out_dir / "config.yaml"
        if not path.is_file():
            raise FileNotFoundError(f"no profile at {path}")
        lines = difference(yaml.safe_load(path.read_text()), yaml.safe_load(PROFILE.read_text()))
        print("\n".join(lines) if lines else "(the shipped profile, unchanged)")
        return 0
    if any("=" not in s for s in args.set):
        raise ValueError("--set takes KEY=VALUE")
    settings = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)}
    out = site(yaml.safe_load(PROFILE.read_text()), cpu_partition=args.cpu_partition,
               gpu_partition=args.gpu_partition, account=args.account, no_account=args.no_account, qos=args.qos,
               gpu_model=args.gpu_model, untyped_gpus=args.untyped_gpus, status_command=args.status_command,
               settings=settings)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "config.yaml").write_text(
        f"# {PROFILE.relative_to(ROOT)} with this site's answers (tools/site_profile.py)\n"
        + yaml.safe_dump(out, sort_keys=False))
    print(args.out_dir / "config.yaml")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
