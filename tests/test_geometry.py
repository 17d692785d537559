import pytest
from conftest import kernel_entry

from sgemm_lab.config import geometry
from sgemm_lab.config import load as cfgmod
from sgemm_lab.config.records import Shape
from sgemm_lab.errors import ConfigError, ShapeError


def spec(**over):
    return cfgmod.from_dict({"kernels": [kernel_entry(**over)]}).kernels[0]


def test_launch_of_every_configured_kernel_covers_c_exactly(lab):
    shape = Shape(m=4096, n=2048, k=1024)
    for k in lab.kernels:
        if k.backend == "host" or k.autotuned:
            continue
        if k.runs_when and geometry.unsupported_reason(k, shape):  # a path for other shapes (N <= 16)
            assert "runs_when" in geometry.unsupported_reason(k, shape)
            continue
        launch = geometry.plan(k, shape)
        assert launch.threads <= 1024
        if k.geometry in ("elementwise", "grid2d"):
            assert launch.blocks * launch.threads >= shape.m * shape.n > (launch.blocks - 1) * launch.threads
        else:
            bm, bn, _ = geometry.tile(k)
            assert launch.grid == (shape.n // bn, shape.m // bm, 1)
            if "THREADS" not in k.params:  # derived: one thread per TM x TN micro-tile
                assert launch.threads * k.params.get("TM", 1) * k.params.get("TN", 1) == bm * bn


def test_runs_when_decides_the_shapes_a_stage_runs_and_names_itself_in_the_reason():
    s = spec(shapes="any", params={"BM": 32, "BN": 16, "BK": 128, "THREADS": 256}, runs_when=["N <= BN"])
    assert geometry.unsupported_reason(s, Shape(m=8192, n=12, k=6144)) is None
    assert geometry.plan(s, Shape(m=8192, n=16, k=7)).grid == (1, 256, 1)
    reason = geometry.unsupported_reason(s, Shape(m=8192, n=17, k=6144))
    assert reason == "runs only where N <= BN (runs_when; M=8192, N=17, K=6144)"
    with pytest.raises(ShapeError, match="N <= BN"):
        geometry.plan(s, Shape(m=4, n=64, k=4))


def test_narrow_rows_plans_the_transpose_of_an_output_of_few_rows():
    params = {"BM": 32, "BN": 16, "BK": 128, "THREADS": 256, "SPLIT_SLOTS": 264, "SPLIT_MAX": 64}
    rows = spec(shapes="any", params={**params, "NARROW_ROWS": 1},
                runs_when=["N <= BN or (NARROW_ROWS == 1 and M <= BN)"])
    # M <= 16 < N: blocks own 32 columns of all M rows (grid y over N), grid x is 1
    assert geometry.plan(rows, Shape(m=12, n=6144, k=10240)).grid == (1, 192, 1)
    assert geometry.oriented(rows, Shape(m=12, n=6144, k=10240)) == Shape(m=6144, n=12, k=10240)
    # few column groups split K as the transposed shape would: 4 tiles, 547 K-steps -> 61 slices of 9
    assert geometry.splits(rows, Shape(m=3, n=100, k=70001)) == 61
    assert geometry.plan(rows, Shape(m=3, n=100, k=70001)).grid == (1, 4, 61)
    names = geometry.plan_names(rows, Shape(m=3, n=100, k=70001), step=1)
    assert (names["M"], names["N"], names["TILES"], names["SPLIT"], names["KSTEPS"]) == (100, 3, 4, 61, 9)
    # narrow on both sides or on N only: the column path, as without NARROW_ROWS
    for shape in (Shape(m=12, n=12, k=999), Shape(m=8192, n=12, k=6144)):
        assert geometry.oriented(rows, shape) == shape
        assert geometry.plan(rows, shape).grid[:2] == (1, -(-shape.m // 32))
    assert "runs_when" in geometry.unsupported_reason(rows, Shape(m=17, n=17, k=64))
    # without NARROW_ROWS an output of few rows is neither transposed nor run
    cols = spec(shapes="any", params=params, runs_when=["N <= BN"])
    assert geometry.oriented(cols, Shape(m=12, n=6144, k=10240)) == Shape(m=12, n=6144, k=10240)
    assert geometry.unsupported_reason(cols, Shape(m=12, n=6144, k=10240)) is not None


def test_runs_when_may_name_only_parameters_and_the_shape():
    with pytest.raises(ConfigError, match=r"runs_when\[0\].*unknown parameter\(s\) L"):
        spec(shapes="any", params={"BM": 32, "BN": 16, "BK": 8, "THREADS": 64}, runs_when=["N <= BN and L > 0"])
    s = spec(shapes="any", params={"BM": 32, "BN": 16, "BK": 8, "THREADS": 64}, runs_when=["M * N <= 16 * BM", "K >= 1"])
    assert geometry.unsupported_reason(s, Shape(m=32, n=16, k=1)) is None
    assert "M * N <= 16 * BM" in geometry.unsupported_reason(s, Shape(m=33, n=16, k=1))


def test_block_tile_numbers():
    s = spec()
    launch = geometry.plan(s, Shape(m=128, n=256, k=64))
    assert launch.block == (512, 1, 1) and launch.grid == (4, 2, 1)


def test_elementwise_handles_any_shape():
    s = spec(geometry="elementwise", params={"BLOCK": 256}, shapes="any")
    launch = geometry.plan(s, Shape(m=1000, n=3, k=7))
    assert launch.grid == (12, 1, 1) and launch.block == (256, 1, 1)


def test_tile_multiple_rejects_non_multiples_with_reason():
    s = spec()
    reason = geometry.unsupported_reason(s, Shape(m=1000, n=64, k=12))
    assert reason == "needs M, N, K multiples of 64, 64, 8 (M=1000, K=12 not)"
    with pytest.raises(ShapeError) as err:
        geometry.plan(s, Shape(m=1000, n=64, k=12))
    assert str(err.value).startswith("kernel 99_test cannot run 1000x64x12: needs")


def test_explicit_threads_parameter_wins():
    s = spec(params={"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8, "THREADS": 128})
    assert geometry.threads_per_block(s) == 128


def test_grid_limits():
    s = spec()
    assert "grid limits" in geometry.unsupported_reason(s, Shape(m=64 * 70000, n=64, k=8))


def test_max_dim_skips_large_shapes_and_names_its_config_key(lab):
    s = spec(max_dim=2048)
    assert geometry.unsupported_reason(s, Shape(m=2048, n=2048, k=2048)) is None
    assert geometry.unsupported_reason(s, Shape(m=4096, n=64, k=64)) == "limited to dimensions <= 2048 (config max_dim)"
    host = next(k for k in lab.kernels if k.backend == "host")
    big = Shape(m=lab.cpu.max_dim + 1, n=8, k=8)
    assert geometry.unsupported_reason(host, big).endswith("(config cpu.max_dim)")


def _split_spec(**params):
    base = {"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8, "SPLIT_SLOTS": 264, "SPLIT_MAX": 16}
    return spec(source="11_general.cu", entry="sgemm_general", shapes="any", params={**base, **params})


@pytest.mark.parametrize("m,n,k,want", [
    (512, 512, 16384, 16),     # 16 tiles: 16 slices (SPLIT_MAX), 256 blocks
    (1024, 1024, 1024, 4),     # 64 tiles: 264 // 64 = 4
    (1024, 1024, 8192, 4),
    (2048, 2048, 2048, 1),     # 256 tiles already fill the slots
    (128, 128, 128, 1),        # 8 K-steps: too short to split
    (131, 67, 2053, 15),       # 2 tiles, 129 K-steps: 16 wanted, 15 slices of 9 so none is empty
])
def test_split_k_fills_idle_slots_without_empty_slices(m, n, k, want):
    s = _split_spec()
    shape = Shape(m=m, n=n, k=k)
    grid = geometry.plan(s, shape).grid
    assert grid[2] == geometry.splits(s, shape) == want
    tiles, k_tiles = grid[0] * grid[1], -(-k // 16)
    assert tiles * grid[2] <= 264  # the kernel's workspace holds SPLIT_SLOTS blocks
    per = -(-k_tiles // grid[2])
    assert (grid[2] - 1) * per < k_tiles  # the last slice has work
    if want > 1:
        assert k_tiles // grid[2] >= geometry.SPLIT_MIN_KTILES


@pytest.mark.parametrize("split_min,want", [(8, 1), (4, 2), (2, 5), (1, 10), (0, 10)])
def test_split_min_sets_the_shortest_slice(split_min, want):
    # 256 x 192 x 320 at 128 x 128 x 32 in clusters of 2: 4 blocks, 10 K-steps
    s = _split_spec(BK=32, CLUSTER_N=2, SPLIT_SLOTS=132, SPLIT_MAX=64, SPLIT_MIN=split_min)
    shape = Shape(m=256, n=192, k=320)
    assert geometry.splits(s, shape) == geometry.plan(s, shape).grid[2] == want
    if want > 1:
        assert 10 // want >= max(1, split_min)


def test_split_k_counts_the_spare_blocks_of_a_cluster():
    # 128 x 96 is one tile, but clusters of 2 along N launch two blocks: 132 // 2 = 66 slices wanted,
    # 1536 K-steps in slices of 24: 64
    s = _split_spec(BK=32, CLUSTER_N=2, SPLIT_SLOTS=132, SPLIT_MAX=128)
    shape = Shape(m=128, n=96, k=49152)
    grid = geometry.plan(s, shape).grid
    assert grid[:2] == (2, 1)
    assert grid[0] * grid[1] * grid[2] <= 132
    assert grid[2] == 64


@pytest.mark.parametrize("m,n,k,waves,want", [
    # 299 tiles of 64 x 64 for 528 resident blocks, 154 K-steps: one ragged wave unsplit; with room for
    # four waves, 7 slices are 2093 blocks, 3.96 waves of 22 K-steps (88 against 154)
    (58, 19111, 2452, 1, 1),
    (58, 19111, 2452, 4, 7),
    (58, 19111, 2452, 2, 3),     # at most 1056 blocks: 3 slices, 2 waves of 52 K-steps (104)
    (4096, 4096, 4096, 4, 1),    # 4096 tiles: more than the workspace's four waves, never split
    (512, 512, 16384, 4, 8),     # 64 tiles, 1024 K-steps: 8 slices fill one wave (16 in two tie: the fewer)
    (512, 512, 16384 * 2, 4, 8), # 33 slices in 4 waves are 252 wave-steps against 8's 256: not 5% fewer
])
def test_split_over_waves_takes_the_fewest_wave_steps(m, n, k, waves, want):
    s = _split_spec(BM=64, BN=64, SPLIT_SLOTS=528, SPLIT_MAX=128, SPLIT_WAVES=waves)
    shape = Shape(m=m, n=n, k=k)
    grid = geometry.plan(s, shape).grid
    assert grid[2] == geometry.splits(s, shape) == want
    tiles, k_tiles = grid[0] * grid[1], -(-k // 16)
    assert want == 1 or tiles * grid[2] <= 528 * waves  # the workspace holds SPLIT_WAVES waves of SPLIT_SLOTS blocks
    assert (grid[2] - 1) * -(-k_tiles // grid[2]) < k_tiles  # the last slice has work
    cost = lambda c: -(-tiles * c // 528) * -(-k_tiles // c)  # noqa: E731
    fits = [1] + [c for c in range(2, 129) if tiles * c <= 528 * waves and k_tiles // c >= 8]
    one = max([1] + [c for c in fits if tiles * c <= 528])  # as many slices as one wave holds
    best = min(fits, key=lambda c: (cost(c), c))
    assert want == (best if cost(best) < cost(one) * (1 - geometry.SPLIT_GAIN) else one)


def test_no_split_without_workspace_or_for_other_kernels():
    assert geometry.splits(_split_spec(SPLIT_SLOTS=0), Shape(m=512, n=512, k=16384)) == 1
    assert geometry.plan(spec(), Shape(m=64, n=64, k=65536)).grid[2] == 1


def test_sanitizers_run_a_narrow_stage_at_the_smallest_check_shape_it_takes():
    from sgemm_lab.sanitizers.sanitize import ODD, sanitize_shape

    narrow = spec(shapes="any", params={"BM": 32, "BN": 16, "BK": 128, "THREADS": 256}, runs_when=["N <= BN"])
    checks = [Shape(m=128, n=128, k=128), Shape(m=2000, n=16, k=1000), Shape(m=37, n=3, k=70001)]
    assert sanitize_shape(narrow, checks) == Shape(m=37, n=3, k=70001)
    anyshape = spec(shapes="any", params={"BM": 32, "BN": 16, "BK": 128, "THREADS": 256})
    assert sanitize_shape(anyshape, checks) == ODD


def test_the_narrow_stage_splits_its_transposed_plan_over_waves(lab):
    # stage 19 as configured: 8 x 6144 x 10240 runs as its transpose, 192 blocks of 32 columns for 264
    # resident slots; four slices over three waves (60 wave-steps) beat one slice in one (80) by over 5%
    narrow = next(k for k in lab.kernels if k.id == "19_narrow")
    assert narrow.params["SPLIT_WAVES"] > 1 and narrow.params["NARROW_ROWS"] == 1
    shape = Shape(m=8, n=6144, k=10240)
    grid = geometry.plan(narrow, shape).grid
    assert grid == (1, 192, 4)
    assert grid[1] * grid[2] <= narrow.params["SPLIT_SLOTS"] * narrow.params["SPLIT_WAVES"]
    # the same output one block short of a wave (8192 columns: 256 blocks) is not split
    assert geometry.plan(narrow, Shape(m=8, n=8192, k=8192)).grid == (1, 256, 1)
