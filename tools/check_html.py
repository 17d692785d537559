"""Open an HTML page in headless Chromium, as a reader's browser would, and say in one line whether it
rendered: exit 1 when a script on it failed (an uncaught exception, or a console message naming an
error or a resource that did not load) or an expected text is missing from the page its scripts built,
2 when no Chromium is installed here.
    python tools/check_html.py reports/h100/report.html --expect Ladder --expect Profile
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Chromium's log line for a console message: [pid:tid:time:INFO:CONSOLE(line)] "message", source: url (line)
CONSOLE = re.compile(r':INFO:CONSOLE[^\]]*\] "(?P<message>.*)", source: (?P<source>.*)$')
ERROR = re.compile(r"^Uncaught\b|\b\w*Error\b|^Failed to load")


def check(page: Path, expect: list[str], budget_ms: int = 20000) -> tuple[int, str]:
    browser = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if browser is None:
        return 2, f"check_html: no Chromium on this machine to open {page} (Debian: apt-get install chromium)"
    if not page.is_file():
        return 1, f"check_html: {page}: no such file"
    cmd = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
           f"--virtual-time-budget={budget_ms}", "--dump-dom", page.resolve().as_uri()]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        return 1, f"check_html: {page}: Chromium did not finish within 180 s"
    console = [m for m in map(CONSOLE.search, proc.stderr.splitlines()) if m]
    errors = [m["message"] for m in console if ERROR.search(m["message"])]
    if proc.returncode != 0:
        return 1, f"check_html: {page}: Chromium exit {proc.returncode}"
    if errors:
        return 1, f"check_html: {page}: {len(errors)} script error(s) on the console, the first: {errors[0][:200]}"
    text = re.sub(r"<[^>]+>", " ", re.sub(r"<script\b.*?</script>", " ", proc.stdout, flags=re.S))
    missing = [e for e in expect if e not in text]
    if missing:
        return 1, f"check_html: {page}: the rendered page lacks {', '.join(repr(m) for m in missing)}"
    return 0, (f"check_html: {page}: rendered without script errors ({len(console)} console message(s)), "
               f"{len(expect)} expected text(s) present")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page", type=Path)
    ap.add_argument("--expect", action="append", default=[], help="a text the rendered page must show")
    args = ap.parse_args(argv)
    rc, line = check(args.page, args.expect)
    print(line, file=sys.stderr if rc else sys.stdout)
    return rc


if __name__ == "__main__":
    sys.exit(main())
