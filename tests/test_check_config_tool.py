"""tools/check_config.py reads config files as the workflow does and names file, line and key."""

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import check_config  # noqa: E402


def test_a_good_overlay_is_ok(tmp_path, capsys):
    over = tmp_path / "o.yaml"
    over.write_text("run: 2024\nbench: {target_ms: 1e3}\n")
    assert check_config.main([str(over)]) == 0
    assert "ok: run '2024'" in capsys.readouterr().out


def test_an_overlay_snakemake_cannot_read_is_named_with_line_and_column(tmp_path, capsys):
    over = tmp_path / "o.yaml"
    over.write_text("check:\n  shapes: [[1, 2, 3]\n  alpha: 1\n")
    assert check_config.main([str(over)]) == 1
    err = capsys.readouterr().err
    assert f"{over}:" in err and "not valid YAML" in err and err.count("\n") == 1


def test_a_refused_key_names_the_overlay_that_set_it(tmp_path, capsys):
    over = tmp_path / "o.yaml"
    over.write_text("check: {alpha: 0.0}\n")
    assert check_config.main([str(over)]) == 1
    assert f"{over}: check.alpha must not be 0" in capsys.readouterr().err
    # a key set in the base and merely kept by the overlay is the base's
    base = tmp_path / "base.yaml"
    base.write_text((ROOT / "config" / "config.yaml").read_text().replace("beta: -0.75", "beta: 0"))
    over.write_text("check: {alpha: 1.0}\n")
    assert check_config.main(["--base", str(base), str(over)]) == 1
    assert f"{base}: check.beta must not be 0" in capsys.readouterr().err
