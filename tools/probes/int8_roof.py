"""The INT8 tensor-core roof of this GPU beside the ceilings step's own (FP32 FMA, TF32 wgmma, DRAM copy):
the ceilings probes with the INT8 one added (``measure.ceilings``, wgmma m64n256k32 s8), timed under the
lab's exclusive GPU lock. What the Ozaki-II model (``tools/ozaki2_model.py time --int8-tops``) takes as
given until the ceilings step measures it.

    python tools/probes/int8_roof.py --out int8_roof.json

Prints the rates and INT8's ratio to TF32 (dense Hopper: 4); writes the whole record as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("int8_roof.json"))
    args = ap.parse_args()
    from sgemm_lab.gpu.device import device_info
    from sgemm_lab.measure.ceilings import compile_probes, measure_ceilings
    from sgemm_lab.measure.gpulock import gpu_lock

    with gpu_lock(exclusive=True):
        dev = device_info()
        rec = measure_ceilings(compile_probes(dev.arch, int8=True))
    rec["gpu"] = dev.name
    args.out.write_text(json.dumps(rec, indent=1) + "\n")
    tf32, int8 = rec.get("tf32_tflops"), rec.get("int8_tops")
    print(f"{dev.name}: FP32 FMA {rec['fp32_tflops']:.1f} TFLOP/s, copy {rec['dram_gbps']:.0f} GB/s, "
          f"TF32 wgmma {tf32 or float('nan'):.0f} TFLOP/s, INT8 wgmma {int8 or float('nan'):.0f} TOPS"
          + (f" ({int8 / tf32:.2f}x TF32)" if tf32 and int8 else " (no tensor probes: not Hopper)"))


if __name__ == "__main__":
    main()
