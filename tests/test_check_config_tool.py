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


def test_the_config_files_of_a_snakemake_command_line_are_read_before_snakemake(tmp_path, capsys):
    """What env/pipeline.sh runs before Snakemake: the files named by --configfile / --configfiles (one or
    several, `=` or not) read as the workflow reads them, so that those Snakemake's own reader answers with a
    traceback or runs (YTE) end in one line; silent when they read; --config is no abbreviation of them."""
    digits = tmp_path / "digits.yaml"
    digits.write_text("check:\n  alpha: " + "9" * 5001 + "\n")
    deep = tmp_path / "deep.yaml"
    deep.write_text("x: " + "[" * 100000 + "]" * 100000 + "\n")
    yte = tmp_path / "yte.yaml"
    yte.write_text('__use_yte__: true\nrun: ?"x"\n')
    good = ROOT / ".test" / "config" / "config.yaml"
    for args, want in (
            (["--cores", "all", "--configfile", str(digits)], "a number of 5001 characters"),
            ([f"--configfile={deep}", "--config", "run=x"], "nested too deeply to read"),
            (["--configfiles", str(good), str(yte)], "__use_yte__: a YTE template"),
            (["--configfile", str(tmp_path / "none.yaml")], "not found"),
            (["--cores", "1", "--configfile"], "--configfile names no file")):
        assert check_config.main(["--snakemake-args", *args]) == 1
        err = capsys.readouterr().err
        assert want in err and err.count("\n") == 1 and "Traceback" not in err, err
    for args in ([], ["--cores", "1", "--configfile", str(good), "--config", "run=t"], ["--config", "run=t"]):
        assert check_config.main(["--snakemake-args", *args]) == 0
        assert capsys.readouterr() == ("", "")


def test_the_pipeline_command_reads_its_config_files_first():
    text = (ROOT / "env" / "pipeline.sh").read_text()
    check = text.index('*" --configfile"*) "$PY" tools/check_config.py --snakemake-args "$@" || exit 1 ;;')
    assert check < text.index('exec "$PY" -m snakemake')
