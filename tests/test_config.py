import pytest
import yaml
from conftest import ROOT, kernel_entry, refused

from sgemm_lab.config import load as cfgmod
from sgemm_lab.errors import ConfigError


def test_default_config_is_valid_and_filled(lab):
    assert lab.run == "local"
    ids = [k.id for k in lab.kernels]
    assert ids == sorted(ids) and {"01_naive", "02_coalesced", "03_smem_caching", "04_1d_blocktiling"} <= set(ids)
    assert lab.implementations[-3:] == ("cublas", "cublas_tf32", "numpy") and lab.cublas_tf32
    tf32 = [k.id for k in lab.kernels if k.precision != "fp32"]
    assert tf32 and all(not k.suite for k in lab.kernels if k.precision == "tf32")  # never in the FP32 suite
    assert any(k.suite for k in lab.kernels if k.precision == "3xtf32")  # FP32-accurate: in the suite's race
    assert lab.bench.min_reps >= 3 and lab.bench.l2_policy == "flush"
    assert lab.check.beta != 0
    # the kernel list drives everything: ids are unique and each source exists
    assert all(k.source_path.is_file() for k in lab.kernels if not k.autotuned and not k.dispatched)


def test_test_config_is_valid():
    lab = cfgmod.load(ROOT / ".test" / "config" / "config.yaml")
    assert lab.run == "test" and {k.backend for k in lab.kernels} == {"cuda", "host"}
    assert any(k.autotuned for k in lab.kernels) and lab.swept


def test_defaults_come_from_the_schema():
    lab = cfgmod.from_dict({"kernels": [kernel_entry()]})
    schema = cfgmod.load_schema()
    bench_defaults = schema["properties"]["bench"]["properties"]
    assert lab.bench.warmup_ms == bench_defaults["warmup_ms"]["default"]
    assert [s.m for s in lab.bench.shapes] == bench_defaults["square"]["default"]
    assert lab.kernels[0].shapes == "tile_multiple" and lab.kernels[0].max_local_bytes == 0


@pytest.mark.parametrize(
    "patch, needle",
    [
        ({"bench": {"sqaure": [1024]}}, "bench: Additional properties are not allowed ('sqaure'"),
        ({"bench": {"square": [0]}}, "bench.square[0]: 0 is less than the minimum of 1"),
        ({"bench": {"square": [-4]}}, "bench.square[0]"),
        ({"bench": {"shapes": [[128, 128]]}}, "bench.shapes[0]"),
        ({"bench": {"warmup_ms": "long"}}, "bench.warmup_ms: 'long' is not of type 'number'"),
        ({"check": {"beta": 0}}, "check.beta"),
        ({"run": "../escape"}, "run: '../escape' does not match"),
        ({"colour": "blue"}, "Additional properties are not allowed ('colour'"),
    ],
)
def test_bad_config_is_one_line_naming_the_key(raw_config, patch, needle):
    assert needle in refused(raw_config, patch)


@pytest.mark.parametrize(
    "entry, needle",
    [
        (kernel_entry(source="nope.cu"), "source file kernels/nope.cu does not exist"),
        (kernel_entry(id="naive"), "kernels[0].id"),
        (kernel_entry(params={"BM": 64, "BN": 64, "BK": 8, "TM": 8, "lower": 1}), "kernels[0].params"),
        (kernel_entry(params={"BM": 64, "BN": 64, "BK": 8, "TM": 7}), "BM=64 must be a multiple of TM=7"),
        (kernel_entry(params={"BM": 64, "BN": 64}), "needs parameter(s) BK"),
        (kernel_entry(params={"BM": 128, "BN": 128, "BK": 8, "TM": 4}), "4096 threads per block"),
        (kernel_entry(geometry="spiral"), "kernels[0].geometry"),
        (kernel_entry(geometry="elementwise", params={"BLOCK": 256}), "set shapes: any"),
    ],
)
def test_bad_kernel_entries(entry, needle):
    with pytest.raises(ConfigError) as err:
        cfgmod.from_dict({"kernels": [entry]})
    assert needle in str(err.value)


def test_duplicate_and_reserved_ids():
    with pytest.raises(ConfigError, match="duplicate id"):
        cfgmod.from_dict({"kernels": [kernel_entry(), kernel_entry()]})
    with pytest.raises(ConfigError, match="does not match"):
        cfgmod.from_dict({"kernels": [kernel_entry(id="cublas")]})


def test_unknown_kernel_id(lab):
    with pytest.raises(ConfigError, match="unknown kernel id '07_magic'"):
        lab.kernel("07_magic")


def test_load_reports_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        cfgmod.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("kernels: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        cfgmod.load(bad)
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        cfgmod.load(bad)


def test_schema_is_valid_json_schema():
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text()))


def test_suite_shapes_are_timed_by_the_stages_in_the_suite(raw_config):
    from sgemm_lab.config.load import from_dict
    from sgemm_lab.config.records import Shape

    raw_config["suite"] = {"shapes": [[4096, 4096, 4096], [512, 512, 16384]]}
    lab = from_dict(raw_config)
    assert lab.suite == (Shape(m=4096, n=4096, k=4096), Shape(m=512, n=512, k=16384))
    long_k = Shape(m=512, n=512, k=16384)
    in_suite = [k.id for k in lab.kernels if k.suite and k.backend == "cuda"]
    assert in_suite and "09_async_pipeline" in in_suite and "01_naive" not in in_suite
    for impl in lab.implementations:
        shapes = lab.bench_shapes(impl)
        assert shapes[:len(lab.bench.shapes)] == lab.bench.shapes  # the size sweep first, unchanged
        assert (long_k in shapes) == (impl in in_suite or lab.kernel(impl).autotuned
                                      if impl not in ("cublas", "cublas_tf32", "numpy") else impl != "numpy")
        assert len(set(shapes)) == len(shapes)  # 4096^3 is in both lists, timed once
    raw_config["suite"] = {}
    assert all(from_dict(raw_config).bench_shapes(i) == lab.bench.shapes for i in lab.implementations)


def test_boolean_switches_given_on_the_command_line_are_booleans():
    from sgemm_lab.config import load as cfgmod

    raw = {"kernels": [{"id": "01_naive", "title": "t", "source": "01_naive.cu", "entry": "sgemm_naive",
                        "geometry": "elementwise", "params": {"BLOCK": 256}, "shapes": "any"}]}
    got = cfgmod.validate({**raw, "strict": "false", "failure_tests": "False"})
    assert got["strict"] is False and got["failure_tests"] is False
    from sgemm_lab.errors import ConfigError

    with pytest.raises(ConfigError, match="failure_tests"):
        cfgmod.validate({**raw, "failure_tests": "maybe"})
