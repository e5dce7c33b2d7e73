"""The course as a static site: a reference run of every notebook that anyone can read.

``feedgpu-site`` (``make site``) executes each solution notebook of ``solutions/`` on this
machine, blanks its answers and hidden tests with nbgrader's own preprocessors (as the
student release does, with the course's ``nbgrader_config.py``), puts a banner on top that
names the machine, and builds an HTML site with Sphinx and MyST-NB: the README's course
map as the index, a page per notebook, the README's "Diagnose your own training loop", and
the course's glossary, which the notebooks link to (not the reflections' rubrics: they give
the answers away, and the site blanks answers).
Nothing is fetched at build time or view time (the default theme; formulas as MathML).

Under ``build/``::

    site-cache/executed/<assignment>-<key>.ipynb   executed solutions, keyed by what they run
    site-cache/sphinx/                             Sphinx's own state (doctrees, html), for rebuilds
    site-src/                                      the Sphinx source folder: conf.py, index.md, pages
    site/                                          the site, swapped in whole after a build succeeds

Usage: ``feedgpu-site [--dest DIR] [--timeout S]``. This module is also the site's Sphinx
extension (:func:`setup`: formulas rendered as MathML instead of MathJax from a CDN).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import html
import importlib.util
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from ...base.cli import OneLineParser, UsageError, run_command
from ...base.files import replacing_folder, write_atomically
from .. import COURSE_ROOT as ROOT
from ..grading.course_layout import SOURCE, assignments
from .workcopy import REFERENCE_FILES

README = ROOT / "README.md"
DEST = ROOT / "build" / "site"
CACHE = ROOT / "build" / "site-cache"
SITE_SRC = ROOT / "build" / "site-src"

#: The key of an executed notebook's metadata that describes its run (machine, date, seconds).
RUN_KEY = "feedgpu_reference_run"

#: The README's sections that the site shows.
COURSE_MAP = "Course map"
DIAGNOSE = "Diagnose your own training loop"
#: The course's reference pages, at its root, that the notebooks link to as ``../NAME.md``
#: (in ``work/``, where :mod:`~feedgpu.workflows.course.workcopy` keeps a copy): {file: the site's page}.
REFERENCE_PAGES = {"GLOSSARY.md": "glossary"}
#: The reference files the site does not publish: the rubrics give the reflections' answers
#: away, and the site blanks answers. A notebook's link to one becomes plain words.
UNPUBLISHED = tuple(file for file in REFERENCE_FILES if file not in REFERENCE_PAGES)

logger = logging.getLogger("site")

CONF_PY = '''\
"""Sphinx settings of the course's reference run: written by feedgpu.workflows.course.site, do not edit."""
project = "Feeding the GPU: a reference run"
extensions = ["myst_nb", "feedgpu.workflows.course.site"]
html_theme = "alabaster"  # Sphinx's bundled default: no theme or font is downloaded
html_theme_options = {"page_width": "1250px", "body_max_width": "none", "show_powered_by": False}
pygments_style = "vs"  # 4.5:1 code colours but one (mended by site.SITE_CSS); the theme's own fail axe's color-contrast
html_title = project
html_show_copyright = False
html_copy_source = False  # the blanked notebooks are on the pages already
html_show_sourcelink = False
html_math_renderer = "mathml"  # feedgpu.workflows.course.site.setup: no MathJax from a CDN
html_static_path = ["_static"]
html_css_files = ["feedgpu-site.css"]  # site.SITE_CSS: mends what the theme and vs draw (its comments say what)
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3
nb_execution_mode = "off"  # the notebooks arrive executed (feedgpu-site runs them)
nb_ipywidgets_js = {}  # no require.js and widget bundle from CDNs on pages with widgets
'''

INTRO = """\
A reference run of *Feeding the GPU*, an autograded Jupyter course on PyTorch data
loading: every notebook executed with its reference solution on one machine, then its
answers and hidden tests blanked as in the student release. Each page says on top which
machine ran it. Those are that machine's figures, not yours: the course measures live,
so run the notebooks on your own machine (`make lab`) and compare."""

#: The heading levels of the theme's side bar, which follows each page's own headings:
#: the site's name, then the side bar's sections (the theme's ``<h3>``: Navigation, Related
#: Topics), then the caption of the list of pages inside Navigation. Each is one level
#: below the one before, and the name one below the page's title, so whatever heading a
#: page ends with, the levels never jump by more than one (axe-core's ``heading-order``).
SIDEBAR_NAME_LEVEL = 2
SIDEBAR_CAPTION_LEVEL = 4

#: The site's own style sheet (``_static/feedgpu-site.css``), loaded after the theme's.
#: Each rule's comment says what it mends. The contrasts are those of axe-core's
#: ``color-contrast`` (4.5:1 for text), on a wide screen and on a narrow one (narrower than
#: the theme's 1250 px page, where the side bar moves below the page and turns dark).
SITE_CSS = """\
/* Written by feedgpu.workflows.course.site, do not edit. */

/* The side bar's name, an h2 since site.accessible, drawn as the theme draws its h1.logo. */
div.sphinxsidebarwrapper h2.logo {
    font-size: 2em;
    margin-top: -10px;
    margin-bottom: 5px;
}

/* Code in a side bar link (a page's title with code in it) takes the link's colour: the
   theme draws it #222 without a background, so on a narrow screen, where the side bar
   turns #333, it could not be read (1.25:1). */
div.sphinxsidebar a code {
    color: inherit;
}

/* vs's colour of class names and types, #2B91AF, is 3.3:1 on the theme's code background
   (#FAF3E8); this darker one of the same hue is 4.9:1. */
.highlight .nc, .highlight .kt {
    color: #1E7391;
}
"""


class SiteError(RuntimeError):
    """The site cannot be built; the message says in one line what to do."""


@dataclass
class SiteSummary:
    """What :func:`build_site` made."""

    dest: Path
    pages: list[str]  # Sphinx's document names: index, one per notebook, diagnose, the reference pages
    size_bytes: int
    build_s: float
    executed: list[str]  # notebooks executed by this build
    cached: list[str]  # notebooks taken from the cache or from ``executed=``
    warnings: int  # Sphinx's warnings (logged)

    @property
    def notebooks(self) -> list[str]:
        """The pages that are notebooks, in the site's order."""
        shown = set(self.executed) | set(self.cached)
        return [doc for doc in self.pages if doc in shown]

    def __str__(self) -> str:
        return (f"site: {len(self.pages)} pages, {self.size_bytes / 1e6:.1f} MB, {self.build_s:.0f} s "
                f"({len(self.executed)} notebooks executed, {len(self.cached)} reused, "
                f"{self.warnings} Sphinx warnings); open {self.dest / 'index.html'}")


# --------------------------------------------------------------------------- executing


#: What the notebooks import of ``feedgpu/workflows/``: their test cells' helpers, and the
#: package files Python runs on the way to them.
NOTEBOOK_WORKFLOWS = ("__init__.py", "grading/__init__.py", "grading/testing.py")


def run_sources(root: Path = ROOT) -> list[Path]:
    """What a solution notebook runs besides itself: the course's package, the dataset
    module and the pinned packages. Of ``feedgpu/workflows/`` (release, grading, this
    site...) only the test cells' helpers (:data:`NOTEBOOK_WORKFLOWS`): no notebook imports
    the rest, and a change there must not re-run the course."""
    package = root / "feedgpu"
    workflows = package / "workflows"
    code = [p for p in sorted(package.rglob("*.py"))
            if p.relative_to(package).parts[0] != "workflows"
            or p.relative_to(workflows).as_posix() in NOTEBOOK_WORKFLOWS]
    return code + [root / "lfw_dataset.py", root / "requirements.txt"]


def cache_key(notebook: Path, sources: Iterable[Path], root: Path = ROOT) -> str:
    """A hash of the notebook and of every file in ``sources`` (names and bytes)."""
    digest = hashlib.sha256()
    for path in [Path(notebook), *sources]:
        name = path.relative_to(root) if path.is_relative_to(root) else Path(path.name)
        digest.update(f"{name.as_posix()}\0".encode())
        digest.update(path.read_bytes() if path.is_file() else b"(missing)")
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def reference_run(execution_s: float | None = None, **overrides) -> dict:
    """This machine as the banner names it: cores, GPU, start method, date, versions."""
    from feedgpu.measure.machine import describe_machine

    info = describe_machine()
    gpu = info.get("cuda_device_name") or ("Apple GPU (MPS)" if info.get("mps_available") else None)
    run = {"cores": info.get("usable_cores"), "gpu": gpu, "start_method": info.get("start_method"),
           "date": date.today().isoformat(), "python": info.get("python"), "torch": info.get("torch"),
           "execution_s": None if execution_s is None else round(execution_s, 1)}
    run.update(overrides)
    return run


def execute(notebook: Path, timeout_s: float = 600, log: Path | None = None):
    """``notebook`` executed in a fresh kernel in its own folder (as the course runs it),
    with :func:`reference_run` in its metadata under :data:`RUN_KEY`. What the kernel and
    its child processes write to their own stdout and stderr (not to the notebook: a
    DataLoader worker's traceback, say) goes to ``log``, or to ours when it is None.
    Plots go into the notebook as in Jupyter, whatever ``MPLBACKEND`` says here (grading
    sets ``Agg``, which draws nothing into a notebook).

    Raises:
        SiteError: a cell raised, ran past ``timeout_s`` seconds, or the kernel died.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(notebook, as_version=4)
    where = _shown(notebook)
    seen = f" (the kernel's own output: {_shown(log)})" if log is not None else ""
    client = NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                            resources={"metadata": {"path": str(Path(notebook).parent)}})
    start = time.perf_counter()
    logger.info("executing %s", where)
    try:
        with contextlib.ExitStack() as stack:
            kernel_output = {"env": {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}}
            if log is not None:
                Path(log).parent.mkdir(parents=True, exist_ok=True)
                out = stack.enter_context(open(log, "w"))
                kernel_output.update(stdout=out, stderr=out)
            client.execute(**kernel_output)
    except CellTimeoutError as err:
        raise SiteError(f"{where}: a cell ran past {timeout_s:.0f} s; give it longer with "
                        f"make site SITE_ARGS='--timeout {2 * timeout_s:.0f}'") from err
    except CellExecutionError as err:
        cell = next((c for c in nb.cells if any(o.get("output_type") == "error" for o in c.get("outputs", []))), None)
        name = (cell or {}).get("id", "?")
        message = (str(err.evalue).strip().splitlines() or [""])[0][:200]
        raise SiteError(f"{where} failed in cell {name} ({err.ename}: {message}); run it in Jupyter "
                        f"to see why{seen}, fix it, then make site again") from err
    except DeadKernelError as err:
        raise SiteError(f"{where}: the kernel died (out of memory?); run it in Jupyter to see "
                        f"where{seen}, then make site again") from err
    nb.metadata[RUN_KEY] = reference_run(time.perf_counter() - start)
    return nb


def executed_solution(notebook: Path, cache: Path, sources: list[Path], timeout_s: float = 600):
    """The executed ``notebook`` from ``cache`` if its :func:`cache_key` is there, else
    executed now and written there (atomically; older entries of it removed).

    Returns:
        ``(notebook node, True if it came from the cache)``.
    """
    import nbformat

    from ...base.files import write_json_atomically

    notebook = Path(notebook)
    path = Path(cache) / "executed" / f"{notebook.stem}-{cache_key(notebook, sources)}.ipynb"
    if path.is_file():
        return nbformat.read(path, as_version=4), True
    nb = execute(notebook, timeout_s, log=Path(cache) / "logs" / f"{notebook.stem}.log")
    write_json_atomically(path, nb)  # a notebook is JSON; a crash never leaves half an entry
    for old in path.parent.glob(f"{notebook.stem}-*.ipynb"):
        if old != path:
            old.unlink()
    return nb, False


# --------------------------------------------------------------------------- blanking


def _nbgrader_config(root: Path):
    """The course's nbgrader settings (stubs, delimiters), so the site blanks as the release does."""
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    if not (Path(root) / "nbgrader_config.py").is_file():
        return Config()
    return PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()


def blank(nb, solution=None, root: Path = ROOT):
    """A copy of the executed ``nb`` with no answer and no hidden test, the outputs kept.

    nbgrader's ``ClearSolutions`` and ``ClearHiddenTests`` do the blanking, configured by
    ``root/nbgrader_config.py``, so each answer cell reads as in the student release.
    The outputs of the answer cells go too (they show what the solution printed). When
    ``solution`` (the source notebook) is given, each answer cell first gets its source
    back from it by grade id: a notebook graded by nbgrader holds the answers without the
    solution markers, and blanking would then drop the signature and docstring.
    """
    from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions
    from nbgrader.utils import is_solution

    nb = copy.deepcopy(nb)
    if solution is not None:
        sources = {c.metadata["nbgrader"]["grade_id"]: c.source for c in solution.cells if is_solution(c)}
        for cell in nb.cells:
            gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if is_solution(cell) and gid in sources:
                cell.source = sources[gid]
    config = _nbgrader_config(root)
    resources: dict = {}
    nb, resources = ClearSolutions(config=config).preprocess(nb, resources)
    nb, resources = ClearHiddenTests(config=config).preprocess(nb, resources)
    for cell in nb.cells:
        if cell.cell_type == "code" and is_solution(cell):
            cell.outputs = []
            cell.execution_count = None
    return nb


def banner(run: dict, tests: int, failed: int) -> str:
    """The text on top of a page: whose figures these are."""
    gpu = run.get("gpu") or "no GPU"
    took = f"; the notebook ran in {run['execution_s']:.0f} s" if run.get("execution_s") is not None else ""
    outcome = (f"all {tests} of its autograded tests passed" if not failed
               else f"{failed} of its {tests} autograded tests failed")
    return (f"```{{admonition}} Whose figures these are\n:class: note reference-run\n"
            f"Reference run on {run.get('cores')} cores, {gpu}, {run.get('start_method')} start method, "
            f"{run.get('date')} (Python {run.get('python')}, torch {run.get('torch')}{took}). "
            f"These are that machine's figures, not yours: run the notebook on your machine "
            f"(`make lab`) and compare. The answers are blanked as in the student release; "
            f"{outcome}.\n```")


#: The output of a Jupyter widget: in the course, a tqdm progress bar drawn by ``tqdm.auto``.
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def figure_summary(cell) -> str | None:
    """The one-line summary a code cell printed after its figure
    (:func:`feedgpu.plots.describe`), when the cell drew an image; else None."""
    from ...plots import SUMMARY_PREFIX

    outputs = cell.get("outputs", [])
    if not any(k.startswith("image/") for o in outputs for k in o.get("data", {})):
        return None
    lines = [line for o in outputs if o.get("output_type") == "stream"
             for line in "".join(o.get("text", "")).splitlines() if line.startswith(SUMMARY_PREFIX)]
    return lines[-1][len(SUMMARY_PREFIX):].strip() if lines else None


def page(executed, solution=None, root: Path = ROOT):
    """The notebook a site page shows: ``executed`` blanked, with the banner on top.

    Its outputs as Jupyter shows them: consecutive prints merged and a progress bar
    written over itself (``\\r``) down to its last state, by nbconvert's
    ``CoalesceStreamsPreprocessor``. Widgets (progress bars) are left out: a static page
    cannot run them, and their text is the state they were created in ("0/8"). A figure
    gets the one-line summary its cell printed as its alternative text (:func:`figure_summary`).
    """
    import nbformat
    from nbconvert.preprocessors import CoalesceStreamsPreprocessor
    from nbgrader.utils import is_grade, is_solution

    nb = blank(executed, solution, root)
    nb, _ = CoalesceStreamsPreprocessor().preprocess(nb, {})
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = site_links(cell.source)
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if WIDGET_VIEW not in o.get("data", {})]
            alt = figure_summary(cell)
            if alt:  # MyST-NB's render_image_options, per cell: the figure's alternative text
                cell.metadata.setdefault("mystnb", {}).setdefault("image", {})["alt"] = alt
    run = executed.metadata.get(RUN_KEY) or reference_run()
    tests = [c for c in nb.cells if c.cell_type == "code" and is_grade(c) and not is_solution(c)]
    failed = [c for c in tests if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    cell = nbformat.v4.new_markdown_cell(banner(run, len(tests), len(failed)))
    cell.id = "reference-run"  # a fixed id: an unchanged notebook makes the same page source
    nb.cells.insert(0, cell)
    nb.metadata.pop(RUN_KEY, None)
    nb.metadata.pop("widgets", None)  # widget state: of no use without the widgets' JavaScript
    return nb


# --------------------------------------------------------------------------- the Sphinx source


def site_links(text: str) -> str:
    """A notebook's links to the course's reference pages (``../GLOSSARY.md``, from ``work/``)
    pointed at the site's pages (``glossary.md``); a link to a file the site does not
    publish (:data:`UNPUBLISHED`) becomes its words and the file's name in the course."""
    for file, doc in REFERENCE_PAGES.items():
        text = re.sub(r"\]\((?:\.\./)+" + re.escape(file) + r"(#[^)]*)?\)", rf"]({doc}.md\1)", text)
    for file in UNPUBLISHED:
        text = re.sub(r"\[([^\]]*)\]\((?:\.\./)+" + re.escape(file) + r"(?:#[^)]*)?\)",
                      rf"\1 (`{file}` in the course)", text)
    return text


def reference_pages(root: Path = ROOT) -> dict[str, str]:
    """``{page: text}`` of the course's reference pages found at ``root``."""
    return {doc: (Path(root) / file).read_text(encoding="utf-8")
            for file, doc in REFERENCE_PAGES.items() if (Path(root) / file).is_file()}


def readme_section(text: str, title: str) -> str:
    """The body of the README's ``## title`` section (up to the next ``## ``)."""
    lines = text.splitlines()
    try:
        start = lines.index(f"## {title}") + 1
    except ValueError:
        raise SiteError(f"README.md has no '## {title}' section: the site shows it; put it back") from None
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "\n".join(lines[start:end]).strip()


def _promoted(section: str) -> str:
    """A README section's subheadings one level up: on its own page the section's title is
    the page's ``#``, so its ``###`` become ``##`` (no level skipped)."""
    return re.sub(r"^#(#{2,}) ", r"\1 ", section, flags=re.M)


def index_page(readme_text: str, names: list[str], references: Iterable[str] = ()) -> str:
    """The index: a short introduction and the README's course map, each row linked to its page."""
    course_map = readme_section(readme_text, COURSE_MAP)
    for name in names:
        cell = f"| `{name}` |"
        if cell not in course_map:
            logger.warning("the README's course map has no row for %s: it is only in the side bar", name)
        course_map = course_map.replace(cell, f"| [{name}]({name}.ipynb) |")
    anchor = "#" + DIAGNOSE.lower().replace(" ", "-")
    course_map = course_map.replace(f"]({anchor})", "](diagnose.md)")
    toctree = "\n".join([*names, "diagnose", *references])
    return (f"# Feeding the GPU: a reference run\n\n{INTRO}\n\n## {COURSE_MAP}\n\n{course_map}\n\n"
            f"```{{toctree}}\n:hidden:\n:caption: Notebooks\n\n{toctree}\n```\n")


def _write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` unless the file holds it already: Sphinx rebuilds what is newer."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    write_atomically(path, text)
    return True


def write_sources(src: Path, pages: dict, readme_text: str, references: dict[str, str] | None = None) -> list[str]:
    """Write the Sphinx source folder: conf.py, the style sheet (:data:`SITE_CSS`), index.md,
    diagnose.md, the pages (``{name: notebook}``) and the reference pages (``{page: markdown}``); return the
    document names. Files that did not change are not touched, and stray pages of an
    earlier build are removed."""
    import nbformat

    src.mkdir(parents=True, exist_ok=True)
    references = references or {}
    files = {"conf.py": CONF_PY, "_static/feedgpu-site.css": SITE_CSS,
             "index.md": index_page(readme_text, list(pages), references),
             "diagnose.md": f"# {DIAGNOSE}\n\n{_promoted(readme_section(readme_text, DIAGNOSE))}\n"}
    files.update({f"{doc}.md": text for doc, text in references.items()})
    files.update({f"{name}.ipynb": nbformat.writes(nb) for name, nb in pages.items()})
    for name, text in files.items():
        _write_if_changed(src / name, text)
    for stray in [*src.glob("*.ipynb"), *src.glob("*.md")]:
        if stray.name not in files:
            stray.unlink()
    return ["index", *pages, "diagnose", *references]


# --------------------------------------------------------------------------- building


def _published(html_dir: Path, docs: list[str] | None):
    """A ``copytree`` filter: Sphinx's output less what a reader never gets, and less what
    earlier builds left there (pages of removed notebooks, images of replaced outputs)."""
    pages = {f"{doc}.html" for doc in docs or []} | {"genindex.html", "search.html"}
    used = {name for page in html_dir.glob("*.html")
            for name in re.findall(r'src="_images/([^"?#]+)"', page.read_text(encoding="utf-8"))}

    def ignore(folder: str, names: list[str]) -> set[str]:
        skip = {".buildinfo", "_sources"} & set(names)
        if Path(folder) == html_dir and docs is not None:
            skip |= {n for n in names if n.endswith(".html") and n not in pages}
        if Path(folder) == html_dir / "_images":
            skip |= {n for n in names if n not in used}
        return skip

    return ignore


def accessible(page: str) -> str:
    """A Sphinx page with what the theme leaves out, that screen readers and keyboard users
    need: code blocks that take the keyboard's focus (:func:`focusable_code`) and a side
    bar whose headings continue the page's outline (:func:`sidebar_outline`)."""
    return sidebar_outline(focusable_code(page))


def focusable_code(page: str) -> str:
    """Every code block (``<pre>``, which scrolls sideways) of ``page`` can take the
    keyboard's focus, so a keyboard user can scroll it (axe-core's ``scrollable-region-focusable``)."""
    return re.sub(r"<pre(?![^>]*\btabindex=)", '<pre tabindex="0"', page)


def sidebar_outline(page: str) -> str:
    """``page`` with the side bar's headings at :data:`SIDEBAR_NAME_LEVEL` and
    :data:`SIDEBAR_CAPTION_LEVEL`, so that no heading skips a level (axe-core's
    ``heading-order``) and the page's title is its only ``<h1>``.

    Alabaster's side bar comes after the page's body and opens with the site's name as an
    ``<h1 class="logo">``, then its sections as ``<h3>``: every page jumped from level 1
    to 3 there, whatever its own headings. The name becomes an ``<h2>`` (drawn as before,
    :data:`SITE_CSS`). The caption of the list of pages (``role="heading"``, which the theme
    gives no level, so axe-core's ``aria-required-attr`` fails) gets the level below
    Navigation's ``<h3>``, the section it is in.
    """
    name = SIDEBAR_NAME_LEVEL
    page = re.sub(r'<h1 class="logo\b([^"]*)">(.*?)</h1>', rf'<h{name} class="logo\1">\2</h{name}>', page, flags=re.S)
    return re.sub(r'role="heading"(?![^>]*\baria-level=)', f'role="heading" aria-level="{SIDEBAR_CAPTION_LEVEL}"', page)


def sphinx_build(src: Path, work: Path, dest: Path, docs: list[str] | None = None) -> int:
    """Build the HTML from ``src`` in ``work`` (Sphinx's doctrees and output stay there,
    so a rebuild redoes only the pages that changed), then swap a copy of the pages
    ``docs`` (default: all) into ``dest`` whole: a failed build leaves the old site as it
    was. Returns the number of warnings."""
    html_dir = work / "html"
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-d", str(work / "doctrees"), str(src), str(html_dir)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    warnings = [line for line in proc.stderr.splitlines() if line.strip()]
    for line in warnings:
        logger.warning("sphinx: %s", line)
    if proc.returncode:
        last = warnings[-1] if warnings else f"exit status {proc.returncode}"
        raise SiteError(f"Sphinx failed ({last[:300]}); {dest} is unchanged: fix the cause and run make site again")
    with replacing_folder(dest) as new:
        shutil.copytree(html_dir, new, ignore=_published(html_dir, docs), dirs_exist_ok=True)
        for page in new.glob("*.html"):
            page.write_text(accessible(page.read_text(encoding="utf-8")), encoding="utf-8")
    return sum("WARNING" in line for line in warnings)


def build_site(dest: Path = DEST, executed: dict[str, Path] | None = None, names: list[str] | None = None, *,
               source: Path = SOURCE, readme: Path = README, cache: Path = CACHE, src: Path = SITE_SRC,
               root: Path = ROOT, timeout_s: float = 600, progress: bool = True) -> SiteSummary:
    """Build the course's reference run as a static site in ``dest``.

    Args:
        dest: the site's folder (replaced whole when the build succeeds).
        executed: ``{assignment: path}`` of notebooks already executed (by a test session);
            the others are executed here, or taken from ``cache``.
        names: the assignments to show (default: every folder of ``source``).
        source: the solution notebooks, ``<source>/<name>/<name>.ipynb``.
        readme: the README whose course map and diagnosis section the site shows.
        cache: executed notebooks and Sphinx's state, so a rebuild without changes is quick.
        src: the Sphinx source folder written for the build.
        root: the course (``nbgrader_config.py``, and the sources a notebook runs).
        timeout_s: seconds a cell may run.
        progress: a progress bar over the notebooks (tqdm, on stderr).

    Raises:
        SiteError: what to do, in one line (a notebook failed, Sphinx is missing or failed).
    """
    import nbformat
    from tqdm import tqdm

    start = time.perf_counter()
    if importlib.util.find_spec("myst_nb") is None or importlib.util.find_spec("sphinx") is None:
        raise SiteError("Sphinx and MyST-NB are not installed in this environment: run make venv "
                        "(they are pinned in requirements.txt)")
    source, cache, src = Path(source), Path(cache), Path(src)
    every = assignments(source) if source.is_dir() else []
    names = list(names or every)
    unknown = [n for n in names if n not in every]
    if unknown:
        raise SiteError(f"no solution notebook for {', '.join(unknown)} in {source}: "
                        f"the assignments are {', '.join(every) or 'none'}")
    executed = {name: Path(p) for name, p in (executed or {}).items()}
    sources = run_sources(root) if any(name not in executed for name in names) else []
    pages, ran, reused = {}, [], []
    for name in tqdm(names, desc="notebooks", unit="notebook", disable=not progress):
        solution_path = source / name / f"{name}.ipynb"
        solution = nbformat.read(solution_path, as_version=4)
        if name in executed:
            nb = _read_executed(name, executed[name])
            reused.append(name)
        else:
            nb, cached = executed_solution(solution_path, cache, sources, timeout_s)
            (reused if cached else ran).append(name)
        pages[name] = page(nb, solution, root)
    readme_text = Path(readme).read_text(encoding="utf-8")
    docs = write_sources(src, pages, readme_text, reference_pages(root))
    warnings = sphinx_build(src, cache / "sphinx", Path(dest), docs)
    size = sum(p.stat().st_size for p in Path(dest).rglob("*") if p.is_file())
    return SiteSummary(Path(dest).resolve(), docs, size, time.perf_counter() - start, ran, reused, warnings)


def _read_executed(name: str, path: Path):
    import nbformat

    try:
        return nbformat.read(path, as_version=4)
    except (OSError, ValueError) as err:  # missing, or not a notebook (invalid JSON is a ValueError)
        raise SiteError(f"the executed notebook given for {name}, {path}, cannot be read ({err.__class__.__name__}): "
                        f"pass an executed notebook, or leave {name} out to execute it here") from err


def _shown(path: Path) -> str:
    path = Path(path)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# --------------------------------------------------------------------------- Sphinx extension


def _mathml(translator, node, block: bool) -> None:
    """A formula as MathML in the page (browsers draw it natively; docutils converts it)."""
    from docutils import nodes
    from docutils.utils.math.latex2mathml import tex2mathml

    try:
        translator.body.append(tex2mathml(node.astext(), as_block=block))
    except Exception as err:  # an unsupported command: show the LaTeX rather than fail the build
        logger.warning("formula left as LaTeX (%s): %s", err, node.astext()[:80])
        translator.body.append(f"<code class=\"math\">{html.escape(node.astext())}</code>")
    raise nodes.SkipNode


def setup(app) -> dict:
    """Sphinx extension: the ``mathml`` math renderer (``html_math_renderer = "mathml"``)."""
    app.add_html_math_renderer("mathml",
                               inline_renderers=(lambda t, n: _mathml(t, n, False), None),
                               block_renderers=(lambda t, n: _mathml(t, n, True), None))
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


# --------------------------------------------------------------------------- command


def main(argv: list[str] | None = None) -> int:
    return run_command("feedgpu-site", _main, argv, interrupted="interrupted: the site is as it was")


def _main(argv: list[str]) -> int:
    parser = OneLineParser(prog="feedgpu-site", description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEST, help="the site's folder (default build/site)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a notebook cell may run (default 600)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="site: %(message)s")
    logging.getLogger("traitlets").setLevel(logging.WARNING)  # nbclient's "Executing notebook with kernel"
    try:
        summary = build_site(args.dest, timeout_s=args.timeout)
    except SiteError as err:
        raise UsageError(str(err)) from None
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
