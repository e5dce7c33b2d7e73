"""The reference run as a static site (``feedgpu-site``, ``make site``), checked without a browser.

The course's site is built from the notebooks that the session's grading has executed
already (``course_grading``): no notebook runs twice. The pieces that do not need the
course (blanking, the cache key, the banner, the one-line errors, the swap of a failed
build) are checked on their own, and the whole path, execution included, on the grader's
tiny fixture assignment.
"""

from __future__ import annotations

import base64
import html
import io
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from PIL import Image

from feedgpu.workflows.course import site
from grading_fixtures import FIXTURE_SOURCE, FRESH_WORKERS_CELL, RELEASE, SOLUTIONS, TINY, course_notebooks

ROOT = Path(__file__).resolve().parents[1]

#: Cells that show a traceback on purpose (the notebooks do not tag them): (assignment, cell id).
ON_PURPOSE = {
    # Part G: a DataLoader worker started by spawn cannot find the notebook's class; the
    # worker's own traceback reaches the page, and the next cell explains it.
    ("01_dataset", "cell-48"),
}

#: Answer lines that a demonstration of the same notebook prints on purpose, so the release's
#: own run shows them too: (assignment, line).
PRINTED_ON_PURPOSE = {
    # Part A prints the slow loop's source (inspect.getsource); the fixed loop keeps its header.
    ("09_capstone", "for step, (images, labels, ids) in enumerate(loader):"),
}

TRACEBACK = "Traceback (most recent call last)"
#: A loaded resource (script, style sheet, image, frame) from another host: nothing may be.
REMOTE = re.compile(r"<(?:script|img|iframe)\b[^>]*\bsrc=[\"'](?:https?:)?//|"
                    r"<link\b[^>]*\bhref=[\"'](?:https?:)?//|url\([\"']?(?:https?:)?//", re.I)
SHORTEST = 25  # answer lines shorter than this are too generic to call a leak (`return total`)


# --------------------------------------------------------------------------- helpers


def regions(source: str, begin: str, end: str) -> list[str]:
    """The lines of ``source`` between the markers ``begin`` and ``end``."""
    out, inside = [], False
    for line in source.splitlines():
        if begin in line:
            inside = True
        elif end in line:
            inside = False
        elif inside:
            out.append(line)
    return out


def normalise(text: str) -> str:
    """Text as it may come out of a page: markdown marks and typography gone, spaces collapsed."""
    for fancy, plain in (("\u2019", "'"), ("\u2018", "'"), ("\u201c", '"'), ("\u201d", '"'),
                         ("\u2013", "--"), ("\u2014", "---"), ("\u00a0", " ")):
        text = text.replace(fancy, plain)
    text = re.sub(r"[`*_]", "", text)
    return re.sub(r"\s+", " ", text).strip()


def secret_lines(solution, release, begin: str, end: str, name: str = "") -> list[str]:
    """Lines of the regions that the release does not show (not even inside a longer line),
    long enough to mean something."""
    shown = "\n".join(normalise(line) for c in release.cells for line in c.source.splitlines())
    allowed = {normalise(line) for nb, line in PRINTED_ON_PURPOSE if nb == name}
    lines = {normalise(line) for c in solution.cells for line in regions(c.source, begin, end)}
    return sorted(line for line in lines if len(line) >= SHORTEST and line not in shown and line not in allowed)


def page_text(page: str) -> str:
    """What a reader can see of an HTML page (tags dropped, entities decoded), normalised."""
    return normalise(html.unescape(re.sub(r"<[^>]+>", "", page)))


def site_text(dest: Path) -> str:
    parts = [page_text(p.read_text(encoding="utf-8")) for p in sorted(dest.rglob("*.html"))]
    parts += [normalise(p.read_text(encoding="utf-8")) for p in sorted(dest.rglob("*.js"))]
    return "\n".join(parts)


def leaks(text: str, solution, release, name: str = "") -> list[str]:
    """Answer lines and hidden-test lines of ``solution`` (assignment ``name``) found in ``text``."""
    found = []
    for begin, end in (("BEGIN SOLUTION", "END SOLUTION"), ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS")):
        found += [line for line in secret_lines(solution, release, begin, end, name) if line in text]
    return found


def images(page: Path) -> list[bytes]:
    """The bytes of every ``<img>`` of ``page`` (files next to it, or data URIs)."""
    out = []
    for src in re.findall(r"<img\b[^>]*\bsrc=\"([^\"]+)\"", page.read_text(encoding="utf-8")):
        if src.startswith("data:"):
            out.append(base64.b64decode(src.split(",", 1)[1]))
        else:
            path = page.parent / html.unescape(src).split("?")[0]
            assert path.is_file(), f"{page.name}: image {src} is missing"
            out.append(path.read_bytes())
    return out


def local_links(page: Path) -> list[str]:
    hrefs = re.findall(r"<a\b[^>]*\bhref=\"([^\"]+)\"", page.read_text(encoding="utf-8"))
    return sorted({h.split("#")[0] for h in hrefs if not re.match(r"^(?:[a-z]+:|//|#)", h)} - {""})


def stamped(nb, **run):
    """``nb`` with a reference run in its metadata, as :func:`site.execute` leaves it."""
    nb = nbformat.from_dict(nb)
    nb.metadata[site.RUN_KEY] = {"cores": 2, "gpu": None, "start_method": "fork", "date": "2026-01-02",
                                 "python": "3.11.7", "torch": "2.14.1", "execution_s": 12.0, **run}
    return nb


# --------------------------------------------------------------------------- the pieces


def test_blanking_matches_the_student_release():
    """Every cell of a blanked solution reads as in notebooks/: same stubs, no hidden test."""
    for name in course_notebooks():
        solution = nbformat.read(SOLUTIONS / name / f"{name}.ipynb", as_version=4)
        release = nbformat.read(RELEASE / name / f"{name}.ipynb", as_version=4)
        blanked = site.blank(solution)
        assert [c.source for c in blanked.cells] == [c.source for c in release.cells], \
            f"{name}: the site's blanking differs from the release's (make release?)"


def test_blank_keeps_demonstrations_and_drops_what_the_answers_printed():
    solution = nbformat.read(FIXTURE_SOURCE / TINY / f"{TINY}.ipynb", as_version=4)
    executed = nbformat.from_dict(solution)
    for c in executed.cells:
        if c.cell_type == "code":
            c.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"printed by {c.id}\n")]
            c.execution_count = 1
    page = site.blank(executed)
    by_id = {c.id: c for c in page.cells}
    answers = [c.id for c in solution.cells if c.metadata.get("nbgrader", {}).get("solution")]
    for c in page.cells:
        if c.cell_type == "code" and c.id in answers:
            assert c.outputs == [] and c.execution_count is None, f"answer {c.id} keeps its outputs"
            assert "YOUR CODE HERE" in c.source and "### BEGIN SOLUTION" not in c.source, c.source
        elif c.cell_type == "code":
            assert c.outputs and c.outputs[0]["text"] == f"printed by {c.id}\n", f"cell {c.id} lost its outputs"
    assert "double(-1.5)" not in by_id["ccf93b08"].source, "the hidden test is still there"
    assert 'double("ab")' in by_id["ccf93b08"].source, "the visible test went too"
    assert by_id["00186796"].source == "YOUR ANSWER HERE", by_id["00186796"].source
    assert "return x + x" in executed.cells[4].source and executed.cells[4].outputs, "blank() changed its argument"


def test_blank_restores_an_answer_that_lost_its_markers():
    """A notebook graded by nbgrader holds the answers without markers: the page still shows
    the signature and docstring of the release, not a bare stub."""
    solution = nbformat.read(FIXTURE_SOURCE / TINY / f"{TINY}.ipynb", as_version=4)
    graded = nbformat.from_dict(solution)
    graded.cells[4].source = "def double(x):\n    return 2 * x  # the student's own"
    page = site.blank(graded, solution)
    assert page.cells[4].source == site.blank(solution).cells[4].source
    assert page.cells[4].source.startswith("def double(x):\n    \"\"\"Return x + x.\"\"\""), page.cells[4].source
    assert "2 * x" not in page.cells[4].source


def test_the_banner_names_the_machine_and_the_tests_outcome():
    solution = nbformat.read(FIXTURE_SOURCE / TINY / f"{TINY}.ipynb", as_version=4)
    executed = stamped(solution, cores=16, gpu="NVIDIA H100", start_method="spawn")
    failing = executed.cells[5]  # test_double_numbers
    failing.outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="no", traceback=[])]
    page = site.page(executed, solution)
    top = page.cells[0]
    assert top.cell_type == "markdown" and top.id == "reference-run"
    assert "Reference run on 16 cores, NVIDIA H100, spawn start method, 2026-01-02" in top.source, top.source
    assert "1 of its 4 autograded tests failed" in top.source, top.source
    assert site.RUN_KEY not in page.metadata
    plain = site.page(stamped(solution), solution).cells[0].source
    assert "2 cores, no GPU, fork start method" in plain and "all 4 of its autograded tests passed" in plain, plain


def test_a_figure_gets_the_summary_its_cell_printed_as_alternative_text():
    solution = nbformat.read(FIXTURE_SOURCE / TINY / f"{TINY}.ipynb", as_version=4)
    executed = stamped(solution)
    drawn = next(c for c in executed.cells  # a cell whose outputs the page keeps (not an answer)
                 if c.cell_type == "code" and not c.metadata.get("nbgrader", {}).get("solution"))
    png = nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"})
    said = nbformat.v4.new_output("stream", name="stdout", text="In the figure: serial 142 ms against 112 ms\n")
    drawn.outputs = [png, said]
    page = site.page(executed, solution)
    cell = next(c for c in page.cells if c.get("id") == drawn.get("id"))
    assert cell.metadata["mystnb"]["image"]["alt"] == "serial 142 ms against 112 ms"
    drawn.outputs = [png]
    cell = next(c for c in site.page(executed, solution).cells if c.get("id") == drawn.get("id"))
    assert "mystnb" not in cell.metadata, "no summary printed: no alternative text invented"


def test_links_to_the_reference_pages_point_at_the_site_pages():
    """A notebook links ../GLOSSARY.md (from work/); on the site that is glossary.md. Other links stay."""
    text = "the [glossary](../GLOSSARY.md), the [rubrics](../RUBRICS.md#notebook-03), [a file](data/GLOSSARY.md)"
    assert site.site_links(text) == ("the [glossary](glossary.md), the rubrics (`RUBRICS.md` in the course), "
                                     "[a file](data/GLOSSARY.md)"), "the rubrics give answers away: not on the site"


@pytest.mark.grading
def test_course_site_has_the_reference_pages_the_notebooks_link(course_site):
    assert "rubrics" not in course_site.pages, "the rubrics give the reflections' answers away"
    for file, doc in site.REFERENCE_PAGES.items():
        assert doc in course_site.pages, f"{file} is not on the site"
        assert (course_site.dest / f"{doc}.html").is_file(), doc
    for name in course_site.notebooks:
        page = (course_site.dest / f"{name}.html").read_text(encoding="utf-8")
        hrefs = re.findall(r"<a\b[^>]*\bhref=\"([^\"]+)\"", page)
        for doc in site.REFERENCE_PAGES.values():  # once in the side bar, and from the notebook's text
            assert hrefs.count(f"{doc}.html") >= 2, f"{name}.html: its text does not link {doc}.html"
        assert not [h for h in hrefs if h.endswith(tuple(site.REFERENCE_PAGES) + site.UNPUBLISHED)], f"{name}: a dead link"


def test_cache_key_changes_with_the_notebook_and_with_what_it_runs(tmp_path):
    notebook, module = tmp_path / "nb.ipynb", tmp_path / "module.py"
    notebook.write_text("{}")
    module.write_text("A = 1\n")
    key = site.cache_key(notebook, [module], root=tmp_path)
    assert site.cache_key(notebook, [module], root=tmp_path) == key, "the same files give the same key"
    module.write_text("A = 2\n")
    assert site.cache_key(notebook, [module], root=tmp_path) != key, "a changed source must change the key"
    module.write_text("A = 1\n")
    notebook.write_text('{"cells": []}')
    assert site.cache_key(notebook, [module], root=tmp_path) != key, "a changed notebook must change the key"
    sources = {p.relative_to(ROOT).as_posix() for p in site.run_sources()}
    assert {"lfw_dataset.py", "feedgpu/workflows/grading/testing.py", "feedgpu/workloads/cost.py"} <= sources, sources
    workflows = {s for s in sources if s.startswith("feedgpu/workflows/")}
    assert workflows == {"feedgpu/workflows/__init__.py", "feedgpu/workflows/grading/__init__.py",
                         "feedgpu/workflows/grading/testing.py"}, f"no notebook runs the other workflows: {workflows}"


def test_bad_requests_fail_in_one_line(tmp_path):
    with pytest.raises(site.SiteError) as err:
        site.build_site(tmp_path / "site", names=["no_such_notebook"], source=FIXTURE_SOURCE)
    assert "no_such_notebook" in str(err.value) and TINY in str(err.value) and "\n" not in str(err.value)
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{not json")
    with pytest.raises(site.SiteError) as err:
        site.build_site(tmp_path / "site", {TINY: broken}, source=FIXTURE_SOURCE, cache=tmp_path / "cache",
                        src=tmp_path / "src", progress=False)
    assert str(broken) in str(err.value) and "\n" not in str(err.value), err.value
    with pytest.raises(site.SiteError, match="no '## Course map' section"):
        site.index_page("# A README\n\n## Quick start\n", [TINY])


def test_a_failed_sphinx_build_leaves_the_site_as_it_was(tmp_path):
    dest = tmp_path / "site"
    dest.mkdir()
    (dest / "index.html").write_text("the old site")
    src = tmp_path / "src"
    src.mkdir()  # no conf.py: Sphinx refuses
    with pytest.raises(site.SiteError) as err:
        site.sphinx_build(src, tmp_path / "work", dest)
    assert "\n" not in str(err.value) and "unchanged" in str(err.value), err.value
    assert [p.name for p in dest.iterdir()] == ["index.html"] and (dest / "index.html").read_text() == "the old site"


def test_the_published_copy_leaves_out_what_earlier_builds_left(tmp_path):
    """Sphinx's output folder keeps the pages of removed notebooks and the images of
    replaced outputs; the published site has neither."""
    html_dir = tmp_path / "html"
    (html_dir / "_images").mkdir(parents=True)
    (html_dir / "index.html").write_text('<img alt="" src="_images/new.png" />')
    (html_dir / "gone.html").write_text("a notebook that was removed")
    for name in ("new.png", "old.png"):
        (html_dir / "_images" / name).write_bytes(b"png")
    (html_dir / ".buildinfo").write_text("sphinx")
    shutil.copytree(html_dir, tmp_path / "site", ignore=site._published(html_dir, ["index"]))
    published = sorted(p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("*"))
    assert published == ["_images", "_images/new.png", "index.html"], published


def test_leak_check_finds_a_highlighted_answer_line():
    """The check of the course's site below must be able to fail: an answer line split into
    highlighted tokens and HTML entities is still found."""
    solution = nbformat.read(FIXTURE_SOURCE / TINY / f"{TINY}.ipynb", as_version=4)
    release = site.blank(solution)
    page = ('<pre><span class="n">loader</span> <span class="o">=</span> <span class="n">DataLoader</span>'
            '(<span class="n">dataset</span>, <span class="n">batch_size</span><span class="o">=</span>batch_size, '
            'num_workers=num_workers)</pre><p>Under spawn a worker imports the class by name; a class defined '
            'in a notebook cell has no module to import it from.</p>'
            '<pre>assert double(-1.5) == -3.0, f&quot;double(-1.5) should be -3.0, got {double(-1.5)!r}&quot;</pre>')
    found = leaks(page_text(page), solution, release)
    assert len(found) == 3, found
    assert leaks(page_text("<p>nothing here</p>"), solution, release) == []


# --------------------------------------------------------------------------- the whole path, on the fixture


@pytest.mark.notebook
def test_build_executes_caches_and_rebuilds_only_what_changed(tmp_path, monkeypatch):
    """The fixture assignment, with a plot added, executed for real, blanked and built; a
    second build takes the executed notebook from the cache and leaves Sphinx's unchanged
    pages alone."""
    root = tmp_path / "course"  # the course's nbgrader settings, and no code that could change meanwhile
    root.mkdir()
    (root / "nbgrader_config.py").write_text((ROOT / "nbgrader_config.py").read_text())
    (root / "GLOSSARY.md").write_text("# Glossary\n\n| term | meaning |\n|---|---|\n| **hand-over** | a batch's trip |\n")
    solution = nbformat.read(FIXTURE_SOURCE / TINY / f"{TINY}.ipynb", as_version=4)
    solution.cells.insert(3, nbformat.v4.new_code_cell(
        'import matplotlib.pyplot as plt\n\nplt.plot([0, 1, 2], [2, 0, 1]);', id="a-plot"))
    (tmp_path / "solutions" / TINY).mkdir(parents=True)
    nbformat.write(solution, tmp_path / "solutions" / TINY / f"{TINY}.ipynb")
    monkeypatch.setenv("MPLBACKEND", "Agg")  # as under grading: the site's kernel draws inline all the same
    dirs = dict(source=tmp_path / "solutions", cache=tmp_path / "cache", src=tmp_path / "src", root=root,
                progress=False)
    first = site.build_site(tmp_path / "site", **dirs)
    assert first.executed == [TINY] and first.cached == [], first
    assert first.pages == ["index", TINY, "diagnose", "glossary"], first.pages
    assert first.notebooks == [TINY], first.notebooks
    assert "a batch's trip" in page_text((tmp_path / "site" / "glossary.html").read_text(encoding="utf-8"))
    page = tmp_path / "site" / f"{TINY}.html"
    text = page_text(page.read_text(encoding="utf-8"))
    assert "Reference run on " in text and "all 4 of its autograded tests passed" in text, text[:600]
    assert leaks(site_text(tmp_path / "site"), solution, site.blank(solution)) == []
    assert "YOUR CODE HERE" in text and "double(2) should be 4" in text, "the stubs and visible tests are shown"
    plots = images(page)
    assert len(plots) == 1 and plots[0], "the plot should be on the page"
    with Image.open(io.BytesIO(plots[0])) as img:
        assert img.format == "PNG" and img.width > 100, (img.format, img.size)
    for path in (tmp_path / "site").rglob("*.html"):
        assert not REMOTE.search(path.read_text(encoding="utf-8")), f"{path.name} loads something from another host"
    built = (tmp_path / "cache" / "sphinx" / "html" / f"{TINY}.html").stat().st_mtime_ns

    second = site.build_site(tmp_path / "site", **dirs)
    assert second.executed == [] and second.cached == [TINY], second
    assert (tmp_path / "cache" / "sphinx" / "html" / f"{TINY}.html").stat().st_mtime_ns == built, \
        "an unchanged page was written again"
    assert page.is_file() and not list(tmp_path.glob(".site-*")), "the new site replaced the old one whole"


@pytest.mark.notebook
def test_a_failing_notebook_is_named_in_one_line(tmp_path):
    folder = tmp_path / "solutions" / "broken"
    folder.mkdir(parents=True)
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "language": "python",
                                                           "display_name": "Python 3"}})
    nb.cells = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("1 / 0")]
    nb.cells[1].id = "divide"
    nbformat.write(nb, folder / "broken.ipynb")
    with pytest.raises(site.SiteError) as err:
        site.build_site(tmp_path / "site", source=tmp_path / "solutions", cache=tmp_path / "cache",
                        src=tmp_path / "src", progress=False)
    message = str(err.value)
    assert "\n" not in message and "broken.ipynb" in message and "divide" in message, message
    assert "ZeroDivisionError" in message and "make site" in message, message
    assert not (tmp_path / "site").exists() and not list((tmp_path / "cache").rglob("*.ipynb"))


# --------------------------------------------------------------------------- the course's site


@pytest.fixture(scope="module")
def course_site(course_grading, tmp_path_factory):
    """The course's site, built from the solutions that the session's grading executed (with
    fresh workers: their extra first cell is dropped, and the banner says forkserver)."""
    names = course_notebooks()
    base = tmp_path_factory.mktemp("site")
    executed = {}
    for name in names:
        nb = course_grading.autograded("ada_solution", name)
        nb.cells = [c for c in nb.cells if c.source != FRESH_WORKERS_CELL]
        path = base / "executed" / f"{name}.ipynb"
        path.parent.mkdir(exist_ok=True)
        nbformat.write(stamped(nb, start_method="forkserver"), path)
        executed[name] = path
    summary = site.build_site(base / "site", executed, names, cache=base / "cache", src=base / "src",
                              progress=False)
    assert summary.executed == [] and sorted(summary.cached) == sorted(names), summary
    return summary


@pytest.mark.grading
def test_course_site_index_links_every_page(course_site):
    index = course_site.dest / "index.html"
    links = local_links(index)
    missing = [link for link in links if not (course_site.dest / link).is_file()]
    assert not missing, f"the index links to pages that do not exist: {missing}"
    for doc in course_site.pages[1:]:
        assert f"{doc}.html" in links, f"the index does not link {doc}.html"


@pytest.mark.grading
def test_course_site_images_decode(course_site):
    """Every image decodes. (The grading runs notebooks with ``MPLBACKEND=Agg``, so these
    pages hold few plots, if any: that the site shows the plots of a notebook it executes
    is checked on the fixture above.)"""
    for page in sorted(course_site.dest.glob("*.html")):
        for data in images(page):
            assert data, f"{page.name}: an empty image"
            with Image.open(io.BytesIO(data)) as img:
                img.load()
                assert img.width > 0 and img.height > 0, page.name


@pytest.mark.grading
def test_course_site_shows_no_answer_and_no_hidden_test(course_site):
    text = site_text(course_site.dest)
    for name in course_site.notebooks:
        solution = nbformat.read(SOLUTIONS / name / f"{name}.ipynb", as_version=4)
        release = nbformat.read(RELEASE / name / f"{name}.ipynb", as_version=4)
        assert secret_lines(solution, release, "BEGIN SOLUTION", "END SOLUTION"), f"{name}: nothing to look for?"
        found = leaks(text, solution, release, name)
        assert not found, f"{name}: answer or hidden-test lines on the site: {found[:3]}"


@pytest.mark.grading
def test_course_site_renders_no_traceback_but_on_purpose(course_site):
    src = course_site.dest.parent / "src"
    for name in course_site.notebooks:
        nb = nbformat.read(src / f"{name}.ipynb", as_version=4)
        expected = 0
        for c in nb.cells:
            for out in c.get("outputs", []):
                assert out.get("output_type") != "error", f"{name}: cell {c.id} raised {out.get('ename')}"
                shown = str(out.get("text", "")) + str(out.get("data", {}).get("text/plain", ""))
                if TRACEBACK in shown:
                    assert (name, c.id) in ON_PURPOSE, f"{name}: cell {c.id} shows a traceback: {shown[-300:]}"
                    expected += shown.count(TRACEBACK)
        page = (course_site.dest / f"{name}.html").read_text(encoding="utf-8")
        assert "\x1b[" not in page and 'class="output traceback' not in page, f"{name}: an error output is rendered"
        assert page_text(page).count(TRACEBACK) == expected, f"{name}: tracebacks on the page other than the known ones"


@pytest.mark.grading
def test_course_site_pages_carry_the_banner_and_load_nothing_remote(course_site):
    for doc in course_site.pages:
        page = (course_site.dest / f"{doc}.html").read_text(encoding="utf-8")
        assert not REMOTE.search(page), f"{doc}.html loads something from another host"
        assert not re.search(r"<script\b[^>]*mathjax", page, re.I), f"{doc}.html loads MathJax"
        if doc in course_site.notebooks:
            assert page_text(page).count("Reference run on ") == 1, f"{doc}.html: no banner"
            assert "forkserver start method" in page_text(page), f"{doc}.html: the banner names the start method"
    for css in course_site.dest.rglob("*.css"):
        assert not REMOTE.search(css.read_text(encoding="utf-8")), f"{css.name} loads something remote"
    if "03_prefetch_transfer" in course_site.pages:
        assert "<math" in (course_site.dest / "03_prefetch_transfer.html").read_text(encoding="utf-8"), \
            "03's formula (the queue model) should be MathML"
