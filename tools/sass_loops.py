"""The loops of a kernel's SASS and how far ahead of their use its shared loads are issued: a static
look at a main loop's schedule, for comparing two builds of one stage without a GPU.

    python tools/sass_loops.py build.sass [other.sass ...]      # `cuobjdump -sass` listings
    python tools/sass_loops.py --cubin results/local/build/11_general.bin   # a build's cubin

For every loop (a backward branch) of at least --min-length instructions it prints: its length, the
global loads in it and where the first one is issued (instructions from the loop's top), the shared
loads, and the distance from each shared load to the first instruction that reads what it loaded
(minimum, 10th percentile, median, and how many are read within --near instructions). A load read a
few instructions after it is issued stalls its warp for the rest of the shared-memory latency (about
30 cycles) unless other warps fill the gap; at two warps per scheduler they rarely can. Positions are
in the listing's order, which is the issue order within a basic block; a loop with forward branches
inside it (a conditional block) is read as laid out. A read is found by register name: an instruction
that reads a register pair or quad by its first register (HMMA's fragments, STS.128's data) is seen to
read only that one, so for tensor-core loops the distances are upper bounds. Global loads are LDG and
LDGSTS (cp.async), not the LDGDEPBAR fence.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from _cli import run  # noqa: E402 - tools/ is the script's folder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

_INSTR = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_PRED = re.compile(r"^@!?U?P\w+\s+")
_REG = re.compile(r"\bR(\d+)\b")


@dataclass(frozen=True, kw_only=True)
class Loop:
    start: int            # address of the loop's first instruction
    length: int           # instructions
    global_loads: int
    first_global_load: int | None  # position in the loop, from its top
    shared_loads: int
    distances: tuple[int, ...]  # per shared load: instructions until its result is first read

    def near(self, n: int) -> int:
        return sum(d < n for d in self.distances)


def instructions(sass: str) -> list[tuple[int, str]]:
    """(address, instruction without its predicate guard) of every instruction of a listing."""
    out = []
    for line in sass.splitlines():
        m = _INSTR.match(line)
        if m:
            out.append((int(m.group(1), 16), m.group(2).strip()))
    return out


def _width(mnemonic: str) -> int:
    """Registers a shared load writes: LDS.64/.128, and LDSM's .x2/.x4 forms (ldmatrix) two or four."""
    if mnemonic.startswith("LDSM"):
        return 4 if mnemonic.endswith(".4") else 2 if mnemonic.endswith(".2") else 1
    return 4 if ".128" in mnemonic else 2 if ".64" in mnemonic else 1


def _sources(text: str) -> set[int]:
    """Registers an instruction reads: every register after its first operand (the destination)."""
    parts = _PRED.sub("", text).split(None, 1)
    if len(parts) < 2 or "," not in parts[1]:
        return set()
    return {int(r) for r in _REG.findall(parts[1].split(",", 1)[1])}


def loops(sass: str, min_length: int = 100) -> list[Loop]:
    ins = instructions(sass)
    found = []
    for addr, text in ins:
        m = re.search(r"\bBRA\s+(0x[0-9a-f]+)", text)
        if not m or int(m.group(1), 16) >= addr:
            continue
        top = int(m.group(1), 16)
        body = [t for a, t in ins if top <= a <= addr]
        if len(body) < min_length:
            continue
        n, dists, glds, first = len(body), [], 0, None
        for i, text_i in enumerate(body):
            op = _PRED.sub("", text_i)
            mnemonic = op.split()[0]
            if mnemonic.startswith("LDG") and not mnemonic.startswith("LDGDEPBAR"):  # a fence, not a load
                glds += 1
                first = i if first is None else first
            if not mnemonic.startswith("LDS"):
                continue
            dst = _REG.search(op.split(None, 1)[1])
            if dst is None:
                continue
            loaded = set(range(int(dst.group(1)), int(dst.group(1)) + _width(mnemonic)))
            for j in range(1, n + 1):  # around the loop's back edge too
                if loaded & _sources(body[(i + j) % n]):
                    dists.append(j)
                    break
        found.append(Loop(start=top, length=n, global_loads=glds, first_global_load=first,
                          shared_loads=sum(_PRED.sub("", t).split()[0].startswith("LDS") for t in body),
                          distances=tuple(sorted(dists))))
    return found


def describe(loop: Loop, near: int) -> str:
    d = loop.distances
    ahead = (f"min {d[0]}, p10 {d[len(d) // 10]}, median {statistics.median(d):.0f}, read within {near}: "
             f"{loop.near(near)}") if d else "none read"
    first = "-" if loop.first_global_load is None else str(loop.first_global_load)
    return (f"loop at {loop.start:#x}: {loop.length} instructions, {loop.global_loads} global loads (first at "
            f"{first}), {loop.shared_loads} shared loads ({ahead})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--cubin", action="store_true", help="the files are cubins (a build's .bin): list them with cuobjdump")
    ap.add_argument("--min-length", type=int, default=100)
    ap.add_argument("--near", type=int, default=12)
    args = ap.parse_args(argv)
    for path in args.files:
        if args.cubin:
            from sgemm_lab.gpu.sass import listing  # finds cuobjdump as the build step does

            sass = listing(Path(path))
            if sass is None:
                print(f"sass_loops: no SASS listing of {path} (cuobjdump missing, or not a cubin)", file=sys.stderr)
                return 1
        else:
            with open(path) as f:
                sass = f.read()
        print(path)
        for loop in loops(sass, args.min_length):
            print("  " + describe(loop, args.near))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
