import shutil
import subprocess

import pandas as pd
import pytest
from conftest import ROOT

from sgemm_lab.gpu import sass
from sgemm_lab.report import tables

FIX = ROOT / "tests" / "fixtures" / "sass"


def test_counts_group_mnemonics_of_one_function_and_skip_padding():
    # cuobjdump -sass of stage 14 (WMMA, TF32) as built for sm_90: one K-tile of 128x128x16 is
    # 8 accumulators x 2 k-steps x 4 HMMA.1684, i.e. 64 HMMA in the unrolled loop body; its copy is
    # 4 LDGSTS per tile (3 prologue tiles + 1 in the loop); one barrier per K-step; WMMA's fragment
    # loads from shared memory are generic (LD), not LDS; 12 `@!PT LDS` lines are padding.
    text = (FIX / "14_wmma_tf32.sass").read_text()
    c = sass.counts(text, "sgemm_wmma_tf32")
    assert c["HMMA"] == 64 and c["LDGSTS"] == 16 and c["BAR"] == 1
    assert c["LDS"] == 0 and c["LD"] == 80 and c["HGMMA"] == 0
    assert c["LDGDEPBAR"] == 4 and c["DEPBAR"] == 2  # modifiers stripped, not merged into BAR
    assert sass.counts(text, "another_function") == {}


def test_sass_table_lists_the_counts_of_each_built_stage(lab):
    builds = pd.DataFrame([dict(kernel="08_warptiling", sass_ffma=2048, sass_hmma=0, sass_hgmma=0, sass_lds=256,
                                sass_total=3000),
                           dict(kernel="09_async_pipeline")])  # no counts recorded (no cuobjdump)
    text = tables.sass_table(lab, builds)
    line = next(ln for ln in text.splitlines() if ln.startswith("| `08_warptiling`"))
    assert line.startswith("| `08_warptiling` | fp32 | 2048 | 0 | 0 | 256 |") and line.endswith("| 3000 |")
    assert "09_async_pipeline" not in text
    assert tables.sass_table(lab, pd.DataFrame([dict(kernel="08_warptiling")])) is None


@pytest.mark.skipif(shutil.which("nvcc") is None or sass.cuobjdump() is None, reason="needs nvcc and cuobjdump")
def test_record_reads_a_real_cubin(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text('extern "C" __global__ void k(float* x, float a) { x[threadIdx.x] = fmaf(x[threadIdx.x], a, a); }\n')
    subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(tmp_path / "k.cubin"), str(src)], check=True)
    rec = sass.record((tmp_path / "k.cubin").read_bytes(), "k")
    assert rec["sass_ffma"] == 1 and rec["sass_total"] > rec["sass_ffma"] and rec["sass_hmma"] == 0


def test_listed_ahead_once_per_binary_and_read_back_by_record(monkeypatch):
    """A build job lists its stages' SASS side by side before its first module load (it holds the GPU from
    then on): each distinct binary is listed once, and the build's own record() lists nothing again."""
    text = (FIX / "14_wmma_tf32.sass").read_text()
    calls = []

    def fake_listing(path):
        calls.append(path.read_bytes())
        return text

    monkeypatch.setattr(sass, "listing", fake_listing)
    monkeypatch.setattr(sass, "_RECORDS", {})
    a, b = b"\x7fELF one binary", b"\x7fELF another"
    sass.records_ahead([(a, "sgemm_wmma_tf32"), (b, "sgemm_wmma_tf32"), (a, "sgemm_wmma_tf32"), (None, "x")], jobs=4)
    assert sorted(calls) == sorted([a, b])
    rec = sass.record(a, "sgemm_wmma_tf32")
    assert rec["sass_hmma"] == 64 and len(calls) == 2
    rec["sass_hmma"] = 0  # a copy: the kept record is not changed through it
    assert sass.record(a, "sgemm_wmma_tf32")["sass_hmma"] == 64
    # another entry of the same binary is another record; one that found nothing is listed again next time
    assert sass.record(a, "another_function") == {} and len(calls) == 3
    assert sass.record(a, "another_function") == {} and len(calls) == 4
