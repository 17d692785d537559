"""kernels/NOTES.md and kernels/notes/: every page short enough to read, one page per stage of the
ladder linked from the index, and no relative link that leads nowhere."""
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
INDEX = ROOT / "kernels" / "NOTES.md"
NOTES = ROOT / "kernels" / "notes"
MAX_LINES = 300
PAGES = [INDEX, *sorted(NOTES.rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def stage_ids():
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    return [k["id"] for k in config["kernels"]]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_is_short(page):
    assert len(page.read_text().splitlines()) <= MAX_LINES


def test_every_stage_has_a_page_linked_from_the_index():
    targets = set(LINK.findall(INDEX.read_text()))
    for stage in stage_ids():
        assert (NOTES / f"{stage}.md").is_file(), stage
        assert f"notes/{stage}.md" in targets, stage


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks hold no links
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            broken.append(target)
    assert not broken


def test_the_numbers_on_the_stage_pages_are_what_the_reference_run_gives():
    """Each page's "Numbers now" section is what tools/notes_numbers.py writes from reports/h100/bench.csv:
    nothing in it typed by hand, and none of it left behind by a new reference run."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, str(ROOT / "tools" / "notes_numbers.py"), "--check"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_the_config_s_texts_cite_notes_that_exist():
    """The explanations in the config (the report prints them) cite note pages that are there."""
    text = (ROOT / "config" / "config.yaml").read_text()
    cited = set(re.findall(r"kernels/notes/[\w./-]+", text))
    assert cited, "the config cites no note page"
    missing = sorted(c for c in cited if not (ROOT / c.rstrip(".,)")).exists())
    assert not missing, missing
    assert "kernels/NOTES.md, \"" not in text  # titled sections live in the journal's pages, not the index
