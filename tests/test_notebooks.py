"""The course's notebooks: one per assignment, named like it, in solutions/ and notebooks/.

That every solution notebook executes without an error is checked on the session's one
grading of the course (``course_grading`` in ``conftest.py``): nbgrader runs each solution
once per test session, and that run is the check.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

from grading_fixtures import cell

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("*/*.ipynb"))


def test_there_are_solution_notebooks():
    names = [p.parent.name for p in SOLUTIONS]
    assert "00_orientation" in names and "01_dataset" in names, names
    for p in SOLUTIONS:
        assert p.stem == p.parent.name, f"one notebook per assignment, named like it: {p}"


def test_solutions_are_saved_without_outputs():
    for p in SOLUTIONS:
        nb = nbformat.read(p, as_version=4)
        with_outputs = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.outputs]
        assert not with_outputs, f"{p.name}: clear the outputs of cells {with_outputs}"
        assert nb.metadata.get("kernelspec", {}).get("name") == "python3", p.name


def test_every_notebook_opens_with_goals_and_ends_with_a_reflection():
    for p in SOLUTIONS:
        cells = nbformat.read(p, as_version=4).cells
        first, last = cells[0].source.lower(), cells[-1]
        assert "time needed" in first, f"{p.name}: say how long it takes, first"
        assert any(w in first for w in ("goal", "you will", "in this notebook you")), \
            f"{p.name}: state the learning goals first"
        meta = last.metadata.get("nbgrader", {})
        assert last.cell_type == "markdown" and meta.get("grade") and meta.get("solution"), \
            f"{p.name}: end with a manually graded reflection"


DRAWS = {"subplots", "figure", "bar_with_error", "show_faces", "imshow"}


def _calls(tree: ast.AST) -> list[str]:
    """The names called in ``tree``, outside function and class definitions."""
    names = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return
        if isinstance(node, ast.Call):
            f = node.func
            names.append(f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else "")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _draws(names: list[str]) -> bool:
    return any(n in DRAWS or n.startswith("plot_") for n in names)


def _parsed(source: str) -> ast.AST:
    return ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))


def test_the_figure_scan_finds_a_figure_without_its_summary():
    assert _draws(_calls(_parsed("fig, ax = plt.subplots()\nax.plot([1], [2])")))
    assert not _draws(_calls(_parsed("def show(ax):\n    plot_waits(ax)\n")))
    assert "describe" in _calls(_parsed("plot_waits(t)\ndescribe(f'{x} ms')"))
    assert "close" in _calls(_parsed("ax = plot_workers(df)\nplt.close('all')"))


def test_every_figure_is_followed_by_its_one_line_summary():
    """A reader who cannot see a figure loses nothing: every cell that draws one calls
    feedgpu.plots.describe (in that cell, or the code cell right after it), whose line is
    also the figure's alternative text on the reference site."""
    missing = []
    for p in SOLUTIONS:
        code = [(i, c) for i, c in enumerate(nbformat.read(p, as_version=4).cells) if c.cell_type == "code"]
        for k, (i, cell) in enumerate(code):
            names = _calls(_parsed(cell.source))
            if not _draws(names) or "close" in names:  # a cell that closes its figures shows none
                continue
            after = _calls(_parsed(code[k + 1][1].source)) if k + 1 < len(code) else []
            if "describe" not in names and "describe" not in after:
                missing.append(f"{p.parent.name} cell {i}")
    assert not missing, f"figures without a one-line summary (feedgpu.plots.describe): {missing}"


def test_every_prediction_is_asked_where_the_student_can_write():
    """A prediction prompt in a locked cell leaves the student nowhere to write it: every
    "*My prediction:*" sits in an editable markdown cell of its own."""
    locked = []
    for p in SOLUTIONS:
        for i, c in enumerate(nbformat.read(p, as_version=4).cells):
            if c.cell_type == "markdown" and "*My prediction:*" in c.source:
                if c.metadata.get("nbgrader", {}).get("locked"):
                    locked.append(f"{p.parent.name} cell {i}")
    assert not locked, f"prediction prompts in locked cells: {locked}"


@pytest.mark.grading
@pytest.mark.parametrize("name", [p.parent.name for p in SOLUTIONS])
def test_solution_executes_without_error(course_grading, name):
    nb = course_grading.autograded("ada_solution", name)
    errors = [(i, o.get("ename"), o.get("evalue", "")[:200]) for i, c in enumerate(nb.cells)
              if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{name}: cells that raised {errors}"
    code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    assert code and all(c.get("execution_count") for c in code), f"{name}: not every code cell ran"


@pytest.mark.grading
@pytest.mark.parametrize("name", [p.parent.name for p in SOLUTIONS])
def test_solution_ran_its_workers_as_under_spawn(course_grading, name):
    """The session's grading of the solutions is the course's run with workers that start
    from a fresh interpreter, as under *spawn* on macOS and Windows (forkserver: see
    ``FRESH_WORKERS_CELL``): the configuration cell reports the start method it found."""
    nb = course_grading.autograded("ada_solution", name)
    config = cell(nb, "config")
    if "START_METHOD" not in config.source:
        pytest.skip(f"{name} does not report its start method")
    printed = "".join(o.get("text", "") for o in config.get("outputs", []) if o.get("output_type") == "stream")
    found = re.search(r"start method:\s*(\w+)", printed)
    assert found and found.group(1) == "forkserver", \
        f"{name}: the solution should have run with fresh workers; its configuration printed {printed!r}"


#: The notebooks whose lesson needs *fork*, and the sentence in each that tells the student why.
FORK_LESSONS = {"01_dataset": "It asked for *fork*",  # a notebook's class reaches a worker only by fork
                "04_augmentation": "**Why the tests use fork.**",  # seed_worker, defined in the notebook
                "06_copy_on_write": "**On macOS or Windows?**"}  # copy-on-write is fork's own lesson


def _fork_requests(source: str) -> int:
    """How often code asks for the *fork* start method: a ``"fork"`` that is not only compared."""
    try:
        tree = ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))
    except SyntaxError:
        return 0
    compared = {id(node) for cmp in ast.walk(tree) if isinstance(cmp, ast.Compare)
                for node in (cmp.left, *cmp.comparators)}
    return sum(1 for node in ast.walk(tree)
               if isinstance(node, ast.Constant) and node.value == "fork" and id(node) not in compared)


def test_the_fork_scan_tells_a_request_from_a_comparison():
    assert _fork_requests('loader = DataLoader(ds, multiprocessing_context="fork")') == 1
    assert _fork_requests('FORK = "fork" if "fork" in mp.get_all_start_methods() else None') == 1
    assert _fork_requests('TIMEOUT = 10 if START == "fork" else 30') == 0


def test_fork_only_where_the_lesson_is_fork():
    """One fork policy: every other notebook's workers start with the platform's default
    method, and a notebook that asks for fork says why."""
    outside, unexplained = [], []
    for p in SOLUTIONS:
        cells = nbformat.read(p, as_version=4).cells
        asks = [i for i, c in enumerate(cells) if c.cell_type == "code" and _fork_requests(c.source)]
        name = p.parent.name
        if asks and name not in FORK_LESSONS:
            outside.append(f"{name} cells {asks}")
        elif asks and not any(FORK_LESSONS[name] in c.source for c in cells if c.cell_type == "markdown"):
            unexplained.append(name)
    assert not outside, f"fork asked for outside a lesson about fork (use the platform's default): {outside}"
    assert not unexplained, f"these ask for fork without the sentence that says why: {unexplained}"
