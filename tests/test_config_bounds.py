"""Config files are bounded before anything is built from them: a file too big, aliases that expand past
any real configuration ("billion laughs"), nesting too deep, a number too long and a YTE template are
each refused in one line naming the file (and line and column where there is one), before anything is
built from it; a number nested in a --config value is read as a number."""

import pytest

from sgemm_lab.config import files
from sgemm_lab.config import load as cfgmod
from sgemm_lab.errors import ConfigError


def _refused(path) -> str:
    with pytest.raises(ConfigError) as err:
        files.read(path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def test_aliases_that_expand_past_any_configuration_are_refused(tmp_path):
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    (tmp_path / "laughs.yaml").write_text("\n".join(lines) + "\nbench: {square: *a9}\n")
    assert "expands to more than" in _refused(tmp_path / "laughs.yaml")


def test_the_lab_s_own_aliases_are_read(tmp_path):
    from conftest import ROOT

    data = files.read(ROOT / "config" / "config.yaml")
    assert len(data["kernels"]) > 10


@pytest.mark.parametrize("what, text, says", [
    ("deep", "x: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested"),
    ("long number", "check: {alpha: " + "1" * 5001 + "}\n", "a number of 5001 characters"),
    ("yte", "__use_yte__: true\nrun: x\n", "YTE template"),
])
def test_a_hostile_file_is_refused_in_one_line(tmp_path, what, text, says):
    (tmp_path / "c.yaml").write_text(text)
    assert says in _refused(tmp_path / "c.yaml")


def test_a_file_too_big_or_no_file_is_refused(tmp_path):
    big = tmp_path / "big.yaml"
    with open(big, "w") as fh:
        fh.write("run: x\n# " + "x" * (files.MAX_BYTES + 10) + "\n")
    assert "more than the" in _refused(big)
    (tmp_path / "folder.yaml").mkdir()
    assert "not a regular file" in _refused(tmp_path / "folder.yaml")


def test_numbers_nested_in_a_command_line_value_are_numbers(raw_config):
    from sgemm_lab.config.files import Origins

    cfg = dict(raw_config, check=dict(raw_config["check"], alpha="1.5", shapes=[["128", "128", "128"]]))
    origins = Origins([("config/config.yaml", raw_config)], {"check": {"alpha": "1.5", "shapes": [["128"] * 3]}})
    out = cfgmod.validate(cfg, origins=origins)
    assert out["check"]["alpha"] == 1.5 and out["check"]["shapes"] == [[128, 128, 128]]


def test_a_quoted_number_in_a_file_is_still_refused(raw_config):
    from sgemm_lab.config.files import Origins

    cfg = dict(raw_config, check=dict(raw_config["check"], alpha="1.5"))
    with pytest.raises(ConfigError, match="over.yaml: check.alpha: '1.5' is not of type 'number'"):
        cfgmod.validate(cfg, origins=Origins([("config/config.yaml", raw_config),
                                              ("over.yaml", {"check": {"alpha": "1.5"}})]))


@pytest.mark.parametrize("name", ["x\n", "x\ny", "\nx"])
def test_a_name_with_a_newline_is_refused(raw_config, name):
    with pytest.raises(ConfigError, match="run"):
        cfgmod.validate(dict(raw_config, run=name))


def test_an_unknown_key_is_blamed_on_the_file_that_set_it(raw_config):
    from sgemm_lab.config.files import Origins

    cfg = dict(raw_config, bencj={"square": [1]})
    with pytest.raises(ConfigError, match=r"^over.yaml: <top level>: Additional properties are not allowed"):
        cfgmod.validate(cfg, origins=Origins([("config/config.yaml", raw_config), ("over.yaml", {"bencj": {}})]))


def test_a_run_name_too_long_for_a_file_name_is_refused(raw_config):
    with pytest.raises(ConfigError, match="is too long"):
        cfgmod.validate(dict(raw_config, run="r" * 300))


def test_a_stage_s_refusal_names_the_file_that_set_the_stage(raw_config):
    from sgemm_lab.config.files import Origins

    bad = dict(raw_config["kernels"][9], id="99_bad", params={**raw_config["kernels"][9]["params"], "BM": 4096})
    cfg = dict(raw_config, kernels=[*raw_config["kernels"], bad])
    origins = Origins([("config/config.yaml", raw_config), ("over.yaml", {"kernels": cfg["kernels"]})])
    with pytest.raises(ConfigError, match=r"^over.yaml: "):
        cfgmod.from_dict(cfg, origins=origins)
