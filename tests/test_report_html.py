"""report.md as the HTML fragment the HTML report opens on (sgemm_lab.report.html): the report's own
markdown subset, escaped, with headings that keep their anchors."""

from conftest import ROOT

from sgemm_lab.report.html import fragment


def test_the_report_markdown_becomes_html_blocks():
    md = "\n".join([
        "# Title", "", "Some **bold** text with `a<b` and a [link](#at-4096³).", "continued <uuid>.", "",
        "## At 4096³", "", "| stage | TFLOP/s |", "| :--- | ---: |", "| `12_dispatch` | 49.07† |", "",
        "- **Timing**: one", "- two", "", "![the ladder](figures/ladder.png)", ""])
    out = fragment(md)
    assert '<h1 id="title">Title</h1>' in out and '<h2 id="at-4096³">At 4096³</h2>' in out
    assert "<p>Some <strong>bold</strong> text with <code>a&lt;b</code> and a <a href=\"#at-4096³\">link</a>. " \
           "continued &lt;uuid&gt;.</p>" in out
    assert '<th style="text-align:left">stage</th><th style="text-align:right">TFLOP/s</th>' in out
    assert '<td style="text-align:left"><code>12_dispatch</code></td><td style="text-align:right">49.07†</td>' in out
    assert "<ul>\n<li><strong>Timing</strong>: one</li>\n<li>two</li>\n</ul>" in out
    assert "<em>Figure: the ladder (<code>figures/ladder.png</code>" in out and "<img" not in out


def test_the_reference_body_is_its_report_and_its_anchors_are_the_contents():
    import re

    body = (ROOT / "reports" / "h100" / "report_body.html").read_text()
    report = (ROOT / "reports" / "h100" / "report.md").read_text()
    assert body == fragment(report)
    ids = set(re.findall(r'<h2 id="([^"]+)"', body))
    toc = next(line for line in report.splitlines() if line.startswith("**Contents:**"))
    assert set(re.findall(r"\]\(#([^)]+)\)", toc)) == ids
    assert body.count("<table>") == report.count("\n| :") + report.count("\n| --")
