"""The reference site's pages pass an automated accessibility check: axe-core in Chromium.

axe-core (Deque's rules for WCAG 2) runs inside each page of a site built from the fixture
assignment with a figure and its one-line summary, a class and code in its title, in
Debian's ``chromium`` without a window (``--headless --dump-dom``: the page's result is
written into the page, then the page is printed). Any violation of impact *moderate*,
*serious* or *critical* fails the test: a heading that skips a level (``heading-order``)
is only moderate, yet a screen reader's user finds their way by the headings; *minor* ones
do not fail it. The Makefile installs axe-core from the npm registry into ``build/``
(``make test``), and ``.ci/run`` installs ``chromium`` with apt; where either is missing,
the test is skipped and says what to install.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

from feedgpu.workflows.course import site
from grading_fixtures import FIXTURE_SOURCE, TINY

ROOT = Path(__file__).resolve().parents[1]
AXE = ROOT / "build" / "node_modules" / "axe-core" / "axe.min.js"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
FAILING = {"moderate", "serious", "critical"}

pytestmark = pytest.mark.notebook


@pytest.fixture(scope="module")
def browser() -> str:
    """Chromium's path; the test is skipped, saying what to install, without it or axe-core."""
    found = next((shutil.which(name) for name in BROWSERS if shutil.which(name)), None)
    if found is None:
        pytest.skip("no Chromium to run the accessibility check in: `apt-get install chromium` (as .ci/run does)")
    if not AXE.is_file():
        pytest.skip(f"axe-core is missing ({AXE.relative_to(ROOT)}): `make test` installs it with npm")
    return found


def violations(page: Path, browser: str) -> list[dict]:
    """axe-core's violations on ``page``: ``{"id", "impact", "help", "nodes"}`` each."""
    probe = page.with_name(f".axe-{page.name}")
    script = ("<script>" + AXE.read_text(encoding="utf-8") + "</script><script>"
              "window.addEventListener('load', function () { axe.run(document, {resultTypes: ['violations']})"
              ".then(function (r) { var pre = document.createElement('pre'); pre.id = 'axe-result';"
              "pre.textContent = JSON.stringify(r.violations.map(function (v) { return {id: v.id, impact: v.impact,"
              " help: v.help, nodes: v.nodes.map(function (n) { return n.target.join(' '); })}; }));"
              "document.body.appendChild(pre); }); });</script>")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", script + "</body>"), encoding="utf-8")
    try:
        out = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=30000",
                              "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    finally:
        probe.unlink()
    found = re.search(r'<pre id="axe-result">(.*?)</pre>', out.stdout, re.S)
    assert found, f"axe-core gave no result for {page.name}: {out.stderr[-800:]}"
    return json.loads(html.unescape(found.group(1)))


def test_the_check_finds_violations_of_every_failing_impact(tmp_path, browser):
    """The control: an image without alternative text (critical), grey text on white
    (serious) and a heading that skips a level (moderate)."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html lang="en"><head><title>t</title></head><body><main>'
                    '<h1>Title</h1><h3>Skipped a level</h3>'
                    '<img src="x.png"><p style="color:#bbb">faint</p></main></body></html>', encoding="utf-8")
    found = {v["id"]: v["impact"] for v in violations(page, browser)}
    expected = {"image-alt": "critical", "color-contrast": "serious", "heading-order": "moderate"}
    assert {rule: found.get(rule) for rule in expected} == expected, found
    assert set(expected.values()) == FAILING, "the control has a violation of each impact that fails the check"


@pytest.fixture(scope="module")
def fixture_site(tmp_path_factory, browser):
    """The fixture assignment, executed and built as ``make site`` does, with what the course's
    pages have and axe-core checks: a figure and its summary, a class (vs colours its name), and
    code in the title (the side bar's links draw it)."""
    base = tmp_path_factory.mktemp("accessible")
    root = base / "course"
    root.mkdir()
    (root / "nbgrader_config.py").write_text((ROOT / "nbgrader_config.py").read_text())
    for file in site.REFERENCE_PAGES:  # the glossary, as the course has it
        (root / file).write_text((ROOT / file).read_text(encoding="utf-8"), encoding="utf-8")
    solution = nbformat.read(FIXTURE_SOURCE / TINY / f"{TINY}.ipynb", as_version=4)
    title = solution.cells[0]
    assert title.source.startswith("# "), title.source[:80]
    title.source = title.source.replace("\n", ", with `code` in its title\n", 1)
    solution.cells.insert(3, nbformat.v4.new_code_cell('class Points(list):\n    """A class."""', id="a-class"))
    solution.cells.insert(3, nbformat.v4.new_code_cell(
        "import matplotlib.pyplot as plt\nfrom feedgpu.plots import describe\n\n"
        "plt.plot([0, 1, 2], [2, 0, 1])\ndescribe('a line from 2 down to 0, then up to 1')", id="a-plot"))
    (base / "solutions" / TINY).mkdir(parents=True)
    nbformat.write(solution, base / "solutions" / TINY / f"{TINY}.ipynb")
    summary = site.build_site(base / "site", source=base / "solutions", cache=base / "cache", src=base / "src",
                              root=root, progress=False)
    return base / "site", summary.pages


def test_the_site_has_no_moderate_serious_or_critical_violation(fixture_site, browser):
    dest, pages = fixture_site
    found = {doc: [v for v in violations(dest / f"{doc}.html", browser) if v["impact"] in FAILING] for doc in pages}
    assert "glossary" in pages, pages
    found = {doc: v for doc, v in found.items() if v}
    impacts = ", ".join(sorted(FAILING))
    assert not found, f"accessibility violations (axe-core, {impacts}): {json.dumps(found, indent=1)}"
    figure = (dest / f"{TINY}.html").read_text(encoding="utf-8")
    assert 'alt="a line from 2 down to 0, then up to 1"' in figure, "the figure's summary is its alternative text"
