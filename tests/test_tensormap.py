"""TMA stages' host-side rules: tensor-map requests, the rows16 shape rule, cluster-rounded grids and the
per-stage compile target. No GPU: the driver's encoder is not called here."""

import pytest

from sgemm_lab.config import geometry
from sgemm_lab.config import load as cfgmod
from sgemm_lab.config.records import Shape
from sgemm_lab.errors import CompileError, ConfigError, LabError
from sgemm_lab.gpu import tensormap
from sgemm_lab.gpu.compile import target_arch


def wgmma(lab):
    return lab.kernel("17_wgmma_tf32")


def test_requests_follow_the_operands_and_the_config_boxes(lab):
    spec = wgmma(lab)
    a, b = tensormap.requests(spec, Shape(m=1000, n=600, k=1004))
    assert (a.symbol, a.operand, a.dims, a.row_bytes) == ("tmap_a", "A", (1004, 1000), 4016)
    assert (b.symbol, b.operand, b.dims, b.row_bytes) == ("tmap_b", "B", (600, 1004), 2400)
    p = spec.params
    assert a.box == (p["BK"], p["BM"] // p["CLUSTER_N"]) and b.box == (32, p["BK"])
    assert a.swizzle == b.swizzle == 128


@pytest.mark.parametrize("shape, operand", [(Shape(m=64, n=64, k=66), "A"), (Shape(m=64, n=66, k=64), "B")])
def test_rows_off_16_byte_boundaries_are_refused_naming_the_map(lab, shape, operand):
    with pytest.raises(LabError, match=f"of {operand} .*not a multiple of 16 B"):
        tensormap.requests(wgmma(lab), shape)


def test_a_box_wider_than_its_swizzle_is_refused(lab):
    spec = wgmma(lab)
    wide = spec.__class__(**{**spec.__dict__, "tensor_maps": ({"symbol": "tmap_b", "operand": "B", "box": (64, 32),
                                                              "swizzle": 128},)})
    with pytest.raises(LabError, match="exceeds the 128-byte swizzle"):
        tensormap.requests(wide, Shape(m=256, n=256, k=256))


def test_rows16_stages_take_every_shape_reading_odd_rows_from_re_pitched_copies(lab):
    from sgemm_lab.gpu import padding

    spec = wgmma(lab)
    assert geometry.unsupported_reason(spec, Shape(m=1001, n=1000, k=1004)) is None
    odd = Shape(m=257, n=131, k=67)
    assert geometry.unsupported_reason(spec, odd) is None
    assert padding.needs_padding(odd) and not padding.needs_padding(Shape(m=257, n=132, k=68))
    assert padding.pitches(odd) == (68, 132)
    # the maps keep the shape's extents (zeros past them) and take the copies' pitches
    a, b = tensormap.requests(spec, odd, padding.pitches(odd))
    assert (a.dims, a.row_bytes) == ((67, 257), 4 * 68) and (b.dims, b.row_bytes) == ((131, 67), 4 * 132)
    with pytest.raises(LabError, match="not a multiple of 16 B"):
        tensormap.requests(spec, odd)  # packed odd rows: what the copies are for
    with pytest.raises(LabError, match="row pitches 64, 132 too small"):
        tensormap.requests(spec, odd, (64, 132))
    # only the operand whose rows are off 16 bytes is copied; the other keeps its own (equal) pitch
    assert padding.copies(odd) == (True, True)
    for shape, copied in [(Shape(m=257, n=132, k=67), (True, False)), (Shape(m=257, n=131, k=68), (False, True))]:
        assert padding.needs_padding(shape) and padding.copies(shape) == copied
        lda, ldb = padding.pitches(shape)
        assert (lda == shape.k) != copied[0] and (ldb == shape.n) != copied[1]
        tensormap.requests(spec, shape, (lda, ldb))


def test_padded_copies_cover_every_row_and_column_within_the_grid_limits():
    from sgemm_lab.gpu import padding

    for rows, cols in [(997, 1504), (1504, 3332), (1, 1), (200_000, 8), (3, 1_000_000), (70_000, 70_000)]:
        gx, gy = padding.repitch_grid(rows, cols)
        assert gx * padding.THREADS >= cols  # x covers a row in one pass; rows beyond gy are strided
        assert 1 <= gy <= min(rows, padding.MAX_GRID_Y)


def test_cluster_stages_get_whole_clusters_along_n(lab):
    spec = wgmma(lab)
    assert spec.params["CLUSTER_N"] == 2
    assert geometry.plan(spec, Shape(m=256, n=128, k=64)).grid == (2, 1, 1)  # one tile, padded to a cluster
    assert geometry.plan(spec, Shape(m=300, n=300, k=64)).grid == (4, 2, 1)  # three tiles -> two clusters
    assert geometry.plan(spec.with_params(CLUSTER_N=1), Shape(m=300, n=300, k=64)).grid == (3, 2, 1)


def test_arch_specific_stages_compile_for_their_target_or_say_why_not(lab):
    spec = wgmma(lab)
    assert spec.arch == "sm_90a"
    assert target_arch(spec, "sm_90") == "sm_90a"
    with pytest.raises(CompileError, match="built for sm_90a only.*sm_80"):
        target_arch(spec, "sm_80")
    assert target_arch(lab.kernel("15_mma_tf32"), "sm_80") == "sm_80"


def test_schema_refuses_a_tensor_map_of_an_unknown_operand(raw_config):
    raw = dict(raw_config)
    raw["kernels"] = [dict(k) for k in raw_config["kernels"]]
    entry = next(k for k in raw["kernels"] if k["id"] == "17_wgmma_tf32")
    entry["tensor_maps"] = [{"symbol": "tmap_a", "operand": "C", "box": [32, 128]}]
    with pytest.raises(ConfigError, match="tensor_maps"):
        cfgmod.from_dict(raw)


def test_box_expressions_must_name_known_parameters(raw_config):
    raw = dict(raw_config)
    raw["kernels"] = [dict(k) for k in raw_config["kernels"]]
    entry = next(k for k in raw["kernels"] if k["id"] == "17_wgmma_tf32")
    entry["tensor_maps"] = [{"symbol": "tmap_a", "operand": "A", "box": ["BK", "NOPE"]}]
    with pytest.raises(ConfigError, match="NOPE"):
        cfgmod.from_dict(raw)


def test_the_driver_values_typed_into_the_encoder_are_the_drivers_own():
    """The encoder calls libcuda through ctypes with enum values as numbers; cuda-bindings (the driver's
    maintained Python bindings) names them, and must agree (no GPU needed)."""
    from cuda.bindings import driver as cu

    assert tensormap._DATA_TYPE[4] == int(cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32)
    assert tensormap._DATA_TYPE[1] == int(cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8)
    assert tensormap._L2_256B == int(cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B)
    names = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}
    assert {b: int(getattr(cu.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{n}")) for b, n in names.items()} \
        == tensormap._SWIZZLE
    assert int(cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE) == 0  # passed as 0
    assert int(cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == 0  # passed as 0


def test_a_misaligned_operand_is_refused_before_the_driver(lab):
    spec = next(k for k in lab.kernels if k.tensor_maps)
    req = tensormap.requests(spec, Shape(m=256, n=384, k=512))[0]
    enc = object.__new__(tensormap.Encoder)  # no libcuda here: the check comes before any driver call
    with pytest.raises(LabError, match="is not 16-byte aligned"):
        enc(req, 0x10004)


def stage18(lab):
    return lab.kernel("18_wgmma_3xtf32")


def test_a_stage_with_residue_maps_reads_an_odd_b_in_place_and_still_copies_an_odd_a(lab):
    from sgemm_lab.gpu import padding

    spec = stage18(lab)
    assert spec.params["ODD_B"] == 1
    assert tensormap.symbols(spec) == ["tmap_a", "tmap_b", "tmap_br0", "tmap_br1", "tmap_br2", "tmap_br3"]
    own = tensormap.in_place(spec)
    assert own == (False, True)
    # N odd, K a multiple of 4: nothing copied; A's plain map and B's four residue maps, no plain map of B
    shape = Shape(m=61, n=20001, k=2400)
    assert not padding.needs_padding(shape, own)
    reqs = tensormap.requests(spec, shape)
    assert [r.symbol for r in reqs] == ["tmap_a", "tmap_br0", "tmap_br1", "tmap_br2", "tmap_br3"]
    for r, req in enumerate(reqs[1:]):
        # rows of 4 N floats from B itself; extent to the end of row 4q + r; the q with 4q + r < K
        assert req.row_bytes == 16 * 20001 and req.dims == (r * 20001 + 20001, 600) and req.swizzle == 0
        assert req.box == (40, spec.params["BK"] // 4)
    # K odd too: A alone is copied, B keeps its own pitch
    odd = Shape(m=257, n=131, k=67)
    assert padding.copies(odd, own) == (True, False) and padding.pitches(odd, own) == (68, 131)
    reqs = tensormap.requests(spec, odd, padding.pitches(odd, own))
    assert [r.symbol for r in reqs][:2] == ["tmap_a", "tmap_br0"] and reqs[0].row_bytes == 4 * 68
    assert [r.dims[1] for r in reqs[1:]] == [17, 17, 17, 16]  # K = 67: rows 64, 65, 66 end residues 0-2
    # N a multiple of 4: the plain map, no residue maps
    assert [r.symbol for r in tensormap.requests(spec, Shape(m=64, n=132, k=67), (68, 132))] == ["tmap_a", "tmap_b"]
    # the stage without ODD_B has no residue maps and copies both
    plain = spec.with_params(ODD_B=0)
    assert tensormap.symbols(plain) == ["tmap_a", "tmap_b"] and tensormap.in_place(plain) == (False, False)
    assert padding.copies(odd, tensormap.in_place(plain)) == (True, True)


# The residue layout as kernels/17_wgmma_tf32.cu builds it (ODD_B): the box of residue r starts at inner
# coordinate r N + c0 - off(r), and column c0 + n of row 4q + r is read at word off(r) + n of the box's line.
RB_W = 40


def rb_offset(n_cols: int, r: int) -> int:
    return ((r * n_cols) & 3) + (4 if (n_cols & 3) == 2 and r >= 2 else 0)


def frag_col(g: int, s: int, rem: int) -> int:
    inner = (16 * (g // 4) + 4 * (s % 4) + g % 4 if rem == 0 else
             4 * g + s % 4 if rem & 1 else 8 * (g // 2) + 2 * (s % 4) + g % 2)
    return 32 * (s // 4) + inner


@pytest.mark.parametrize("m, n, k", [(5, 9, 13), (64, 3, 1), (33, 7, 2), (100, 202, 3), (70, 2, 4099),
                                     (200, 1, 64), (65, 5, 5), (8, 131, 67), (3, 58, 41), (2, 1001, 9)])
def test_residue_boxes_bring_each_row_of_b_and_zeros_past_n_and_k_reading_nothing_past_b(lab, m, n, k):
    """The accelerator's rule (a box's elements inside the map's extents are read, the rest are zeros)
    applied to the maps `requests` encodes: every K-tile's 32-column boxes, read where the kernel reads
    them, give B's rows, zeros past N and K, and no element past B's end is ever read."""
    import numpy as np

    spec = stage18(lab)
    reqs = [r for r in tensormap.requests(spec, Shape(m=m, n=n, k=k), (-(-k // 4) * 4, n)) if r.symbol.startswith("tmap_br")]
    rng = np.random.default_rng(k * 1000 + n)
    b = rng.standard_normal(k * n).astype(np.float32)
    bk = spec.params["BK"]
    want = np.zeros((-(-k // bk) * bk, -(-n // 32) * 32), np.float32)
    want[:k, :n] = b.reshape(k, n)
    got = np.full_like(want, np.nan)
    for r, req in enumerate(reqs):
        pitch = req.row_bytes // 4
        width, lines = req.box
        assert width == RB_W and lines == bk // 4
        for kt in range(want.shape[0] // bk):
            for c0 in range(0, want.shape[1], 32):
                x0, y0 = r * n + c0 - rb_offset(n, r), kt * lines
                assert x0 % 4 == 0 and x0 >= 0  # a 16-byte boundary: the accelerator's rule
                for line in range(lines):
                    for j in range(32):
                        x, y = x0 + rb_offset(n, r) + j, y0 + line
                        inside = x < req.dims[0] and y < req.dims[1]
                        if inside:
                            assert y * pitch + x < k * n  # never past B's end
                        got[kt * bk + 4 * line + r, c0 + j] = b[y * pitch + x] if inside else 0.0
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("rem", [0, 1, 2, 3])
def test_the_fragment_columns_put_one_load_of_a_warp_in_32_banks_and_cover_the_slice(rem):
    """For each warp w and half h (s = 2w + h): the 32 lanes (g, t) of a fragment load read residue t's
    region at word off(t) + n(g, s) (the residue layout; regions 320 floats apart, a multiple of 32) or,
    for N % 4 == 0, the swizzled line t at chunk n / 4 ^ t. Distinct banks; and the 64 columns of a
    consumer's slice are each one fragment row's."""
    n_cols = 4 + rem
    for s in range(8):
        banks = set()
        for g in range(8):
            for t in range(4):
                col = frag_col(g, s, rem) % 32
                word = (t * 8 * RB_W + rb_offset(n_cols, t) + col) if rem else (t * 32 + ((col // 4) ^ t) * 4 + col % 4)
                banks.add(word % 32)
        assert len(banks) == 32, (rem, s)
    assert sorted(frag_col(g, s, rem) for s in range(8) for g in range(8)) == list(range(64))


def odd_a_candidate(lab):
    """Stage 20's candidate that reads A in place (ODD_A) at 64 rows, as a stage of its own."""
    from sgemm_lab.dispatch import choice

    spec = choice.resolve(lab, lab.kernel("20_dispatch_3xtf32"))
    i = next(i for i, c in enumerate(spec.candidates) if c.get("ODD_A") and c.get("BM") == 64)
    return choice.listed_candidate(spec, i)


def test_an_odd_a_candidate_reads_a_in_place_only_where_k_is_odd(lab):
    from sgemm_lab.gpu import padding

    spec = odd_a_candidate(lab)
    assert tensormap.in_place(spec) == (True, True)
    assert tensormap.symbols(spec)[-4:] == ["tmap_ar0", "tmap_ar1", "tmap_ar2", "tmap_ar3"]
    odd = Shape(m=30001, n=47, k=1601)
    assert not padding.needs_padding(odd, (True, True))
    reqs = {r.symbol: r for r in tensormap.requests(spec, odd)}
    assert "tmap_a" not in reqs and "tmap_b" not in reqs
    for r in range(4):  # rows of 4 K floats; extent to the end of row 4q + r; the q with 4q + r < M
        a = reqs[f"tmap_ar{r}"]
        assert (a.row_bytes, a.dims, a.box) == (16 * 1601, (r * 1601 + 1601, -(-(30001 - r) // 4)), (36, 16))
    # K a multiple of 4: the build is refused (the configured candidates take it), not run with copies
    assert geometry.unsupported_reason(spec, Shape(m=64, n=64, k=64)) is not None
    assert geometry.unsupported_reason(spec, odd) is None
    assert geometry.unsupported_reason(lab.kernel("18_wgmma_3xtf32"), Shape(m=64, n=64, k=64)) is None


@pytest.mark.parametrize("m, n, k", [(5, 9, 13), (64, 3, 1), (33, 7, 2), (3, 8, 3), (70, 2, 4099), (1, 64, 3),
                                     (65, 5, 5), (130, 12, 67), (2, 1001, 9), (257, 4, 35)])
def test_residue_boxes_of_a_bring_each_row_and_zeros_past_m_and_k_reading_nothing_past_a(lab, m, n, k):
    """As for B above, for A as ODD_A reads it: rows row0 + 4q + r of a BM-row tile, columns k0 .. k0 + 31
    of each K-tile, from the box at r K + k0 - (r K) % 4, read at word (r K) % 4 + j of its line."""
    import numpy as np

    spec = odd_a_candidate(lab)
    bm, bk = spec.params["BM"], spec.params["BK"]
    reqs = [r for r in tensormap.requests(spec, Shape(m=m, n=n, k=k), (k, -(-n // 4) * 4)) if r.symbol.startswith("tmap_ar")]
    if k % 4 == 0:
        assert reqs == []
        return
    rng = np.random.default_rng(m * 1000 + k)
    a = rng.standard_normal(m * k).astype(np.float32)
    want = np.zeros((-(-m // bm) * bm, -(-k // bk) * bk), np.float32)
    want[:m, :k] = a.reshape(m, k)
    got = np.full_like(want, np.nan)
    for r, req in enumerate(reqs):
        pitch = req.row_bytes // 4
        width, lines = req.box
        assert width == 36 and lines == bm // 4 and width >= 32 + 3
        for row0 in range(0, want.shape[0], bm):
            for k0 in range(0, want.shape[1], bk):
                x0, y0 = r * k + k0 - ((r * k) & 3), row0 // 4
                assert x0 % 4 == 0 and x0 >= 0
                for line in range(lines):
                    for j in range(32):
                        x, y = x0 + ((r * k) & 3) + j, y0 + line
                        inside = x < req.dims[0] and y < req.dims[1]
                        if inside:
                            assert y * pitch + x < m * k
                        got[row0 + 4 * line + r, k0 + j] = a[y * pitch + x] if inside else 0.0
    np.testing.assert_array_equal(got, want)
