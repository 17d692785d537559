"""tools/check_html.py: a page whose scripts fail, or that does not show what is expected, is refused."""

import importlib.util
import shutil

import pytest
from conftest import ROOT

spec = importlib.util.spec_from_file_location("check_html", ROOT / "tools" / "check_html.py")
check_html = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_html)

needs_browser = pytest.mark.skipif(not any(map(shutil.which, check_html.BROWSERS)),
                                   reason="no Chromium here (.ci/run installs it where it can)")


@needs_browser
def test_a_page_built_by_its_scripts_passes_and_a_missing_text_fails(tmp_path):
    page = tmp_path / "good.html"
    page.write_text('<html><body><div id="x"></div>'
                    '<script>document.getElementById("x").textContent = "built " + "by script";</script></body></html>')
    assert check_html.check(page, ["built by script"])[0] == 0
    rc, line = check_html.check(page, ["built by script", "not on the page"])
    assert rc == 1 and "lacks 'not on the page'" in line


@needs_browser
def test_an_uncaught_exception_fails(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text("<html><body><p>text</p><script>undefinedFunction();</script></body></html>")
    rc, line = check_html.check(page, ["text"])
    assert rc == 1 and "Uncaught ReferenceError: undefinedFunction is not defined" in line


def test_no_browser_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(check_html.shutil, "which", lambda name: None)
    rc, line = check_html.check(tmp_path / "x.html", [])
    assert rc == 2 and line.startswith("check_html: no Chromium on this machine")
