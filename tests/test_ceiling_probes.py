"""The ceilings step's probe kernels compile offline without spills (the FMA probe for sm_90, the tensor
probes for sm_90a), and the INT8 probe is the TF32 probe with every TF32 part replaced."""

import subprocess

import pytest

from sgemm_lab.gpu import compile as comp
from sgemm_lab.measure import ceilings

PROBES = {"lab_fma_probe": (ceilings._FMA_PROBE, "sm_90", f"-DCHAINS={ceilings.FMA_CHAINS}"),
          "lab_tf32_probe": (ceilings._TF32_PROBE, ceilings.TF32_ARCH, f"-DGROUP={ceilings.TF32_GROUP}"),
          "lab_int8_probe": (ceilings._INT8_PROBE, ceilings.TF32_ARCH, f"-DGROUP={ceilings.TF32_GROUP}")}


@pytest.mark.parametrize("entry", sorted(PROBES))
def test_each_probe_compiles_without_spills(entry, nvcc, tmp_path):
    text, arch, define = PROBES[entry]
    src = tmp_path / f"{entry}.cu"
    src.write_text(text)
    proc = subprocess.run([nvcc, "-cubin", f"-arch={arch}", "-O3", define, "-Xptxas", "-v", str(src), "-o",
                           str(tmp_path / f"{entry}.cubin")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    info = comp.parse_ptxas_info(proc.stdout + proc.stderr)[entry]
    assert info.registers <= 255 and info.spill_store_bytes == 0 and info.spill_load_bytes == 0


def test_the_int8_probe_is_the_tf32_probe_with_integer_operands():
    text = ceilings._INT8_PROBE
    for tf32_part in ("tf32", '"+f"', "1.2345f", "float d[", "float (&d)", "%132, 1, 1, 1;", "FP32", "floats"):
        assert tf32_part not in text.lower() if tf32_part.islower() else tf32_part not in text, tf32_part
    assert "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8" in text and text.count('"+r"(d[') == 128
    # the loop itself (fences, commit, wait, the descriptor) is the TF32 probe's, line for line
    loop = [ln for ln in ceilings._TF32_PROBE.splitlines() if "wgmma." in ln and "mma_async" not in ln]
    assert len(loop) == 4 and all(ln in text.splitlines() for ln in loop)
    # an edit of the TF32 probe that a replacement no longer matches is refused, not turned into a wrong probe
    with pytest.raises(AssertionError, match="m64n256k8.f32.tf32.tf32"):
        ceilings._int8_from_tf32(ceilings._TF32_PROBE.replace("m64n256k8.f32.tf32.tf32", "m64n256k8.f32.tf32 .tf32"))
