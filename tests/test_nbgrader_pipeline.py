"""The nbgrader pipeline, with real nbgrader: release, autograde, feedback, grades CSV."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import nbformat
import pytest

from feedgpu.workflows import grade, release

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = release.assignments()
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS",
           "BEGIN MARK SCHEME")


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def test_release_has_every_assignment():
    released = sorted(p.name for p in (ROOT / "notebooks").iterdir() if p.is_dir())
    assert released == ASSIGNMENTS, f"notebooks/ {released} vs solutions/ {ASSIGNMENTS}"


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_release_has_no_solution_text_or_hidden_test(name):
    path = ROOT / "notebooks" / name / f"{name}.ipynb"
    text = path.read_text()
    for marker in MARKERS:
        assert marker not in text, f"{path.name} contains {marker!r}"
    source = ROOT / "solutions" / name / f"{name}.ipynb"
    hidden = [c["source"] for c in _cells(source) if "BEGIN HIDDEN TESTS" in "".join(c["source"])]
    assert hidden, f"{name}: the solutions should have hidden tests"
    outputs = [c for c in _cells(path) if c["cell_type"] == "code" and c.get("outputs")]
    assert not outputs, f"{path.name}: the release must carry no outputs"


@pytest.mark.slow
def test_regenerated_release_equals_committed(tmp_path):
    fresh = release.generate(tmp_path / "notebooks")
    committed = ROOT / "notebooks"
    files = sorted(p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(committed) for p in committed.rglob("*") if p.is_file()), \
        "same files; run `make release`"
    for rel in files:
        assert nbformat.read(fresh / rel, 4) == nbformat.read(committed / rel, 4), \
            f"{rel} is out of date; run `make release` and commit notebooks/"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade two students: one handing in the solutions, one the untouched release."""
    base = tmp_path_factory.mktemp("class")
    subs = base / "submitted"
    for name in ASSIGNMENTS:
        for student, origin in (("ada_solution", "solutions"), ("bob_untouched", "notebooks")):
            dest = subs / student / name
            dest.mkdir(parents=True)
            shutil.copy(ROOT / origin / name / f"{name}.ipynb", dest)
    (subs / "bob_untouched" / "not_an_assignment").mkdir()
    results = grade.grade_class(subs, base / "grading", progress=False)
    rows = list(csv.DictReader((base / "grading" / grade.CSV_NAME).open()))
    return base / "grading", results, rows


@pytest.mark.slow
def test_solutions_execute_without_error(graded):
    workdir, _, _ = graded
    for name in ASSIGNMENTS:
        nb = nbformat.read(workdir / "autograded" / "ada_solution" / name / f"{name}.ipynb", 4)
        errors = [(i, o.get("ename"), o.get("evalue", "")[:200]) for i, c in enumerate(nb.cells)
                  if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, f"{name}: cells that raised {errors}"


@pytest.mark.slow
def test_solutions_get_full_marks(graded):
    _, _, rows = graded
    ada = [r for r in rows if r["student"] == "ada_solution"]
    assert sorted(r["assignment"] for r in ada) == ASSIGNMENTS
    for r in ada:
        assert r["status"] == "graded", r
        assert float(r["max_code_score"]) > 0, f"{r['assignment']} has no autograded points"
        assert float(r["code_score"]) == float(r["max_code_score"]), r


@pytest.mark.slow
def test_untouched_release_gets_zero_without_crashing(graded):
    _, _, rows = graded
    bob = [r for r in rows if r["student"] == "bob_untouched"]
    assert sorted(r["assignment"] for r in bob) == ASSIGNMENTS, "the stray folder is skipped"
    for r in bob:
        assert r["status"] == "graded", r
        assert float(r["code_score"]) == 0.0, r
        assert float(r["max_code_score"]) > 0, r


@pytest.mark.slow
def test_feedback_is_written_for_everyone(graded):
    workdir, results, _ = graded
    for r in results:
        html = workdir / "feedback" / r.student / r.assignment / f"{r.assignment}.html"
        assert html.is_file(), f"no feedback for {r.student}/{r.assignment}"
        assert r.assignment in html.read_text()[:20000] or "Score" in html.read_text(), html
