"""The nbgrader pipeline on the course's notebooks, with real nbgrader: release, autograde,
feedback, grades CSV.

Every test here that needs graded notebooks shares the session's one grading of the course
(``course_grading`` in ``conftest.py``): the solutions and the untouched release, each
notebook graded once.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from feedgpu.workflows.grading.testing import REFERENCES
from feedgpu.workflows.grading import grade
from feedgpu.workflows.course import release
from grading_fixtures import DELEGATING, DELEGATIONS, course_notebooks, graded_test_ids, own_tests, points_by_test

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = release.assignments()
GRADED = course_notebooks()  # the session's grading: every assignment, unless FEEDGPU_NOTEBOOKS narrows it
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


@pytest.mark.grading
def test_regenerated_release_equals_committed(course_grading):
    """The grader registers every assignment with nbgrader's generate_assignment, exactly as
    `make release` does; its release must be the committed notebooks/."""
    fresh, committed = course_grading.workdir / "release", ROOT / "notebooks"
    files = sorted(p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(committed) for p in committed.rglob("*") if p.is_file()), \
        "same files; run `make release`"
    for rel in files:
        assert nbformat.read(fresh / rel, 4) == nbformat.read(committed / rel, 4), \
            f"{rel} is out of date; run `make release` and commit notebooks/"


@pytest.mark.grading
def test_solutions_get_full_marks(course_grading):
    for name in GRADED:
        r = course_grading.rows.get(("ada_solution", name))
        assert r is not None, f"no grade for the solution of {name}: {sorted(course_grading.rows)}"
        assert r["status"] == "graded", r
        assert float(r["max_code_score"]) > 0, f"{name} has no autograded points"
        assert float(r["code_score"]) == float(r["max_code_score"]), r
        assert r["needs_manual_grade"] == "True", f"{name}: the written answer is left to grade by hand: {r}"
        assert not r["notes"] and not r["flags"], f"{name}: nothing to note on the solution: {r}"


@pytest.mark.grading
def test_untouched_release_gets_zero_without_crashing(course_grading):
    bob = sorted(a for s, a in course_grading.rows if s == "bob_untouched")
    assert bob == GRADED, f"the stray folder is skipped, every assignment graded: {bob}"
    for name in GRADED:
        r = course_grading.rows[("bob_untouched", name)]
        assert r["status"] == "graded", r
        assert float(r["code_score"]) == 0.0, r
        assert float(r["max_code_score"]) > 0, r


@pytest.mark.grading
def test_feedback_is_written_for_everyone(course_grading):
    workdir = course_grading.workdir
    for r in course_grading.results:
        html = workdir / "feedback" / r.student / r.assignment / f"{r.assignment}.html"
        assert html.is_file(), f"no feedback for {r.student}/{r.assignment}"
        text = html.read_text()
        assert r.assignment in text, f"{html} does not name its assignment"
        assert f"{r.score} / {r.max_score}" in text, f"{html} does not show the score {r.score} / {r.max_score}"


@pytest.mark.grading
def test_grades_csv_and_status_agree_with_the_gradebook(course_grading):
    """grades.csv has one row per submission, and the scores nbgrader recorded."""
    workdir = course_grading.workdir
    expected = {(s, a) for a in GRADED for s in ("ada_solution", "bob_untouched")}
    expected |= {("cy_delegates", a) for a in GRADED if a == DELEGATING}
    assert set(course_grading.rows) == expected, sorted(course_grading.rows)
    status = json.loads((workdir / grade.STATUS_NAME).read_text())
    assert set(status) == {f"{s}/{a}" for s, a in expected}, sorted(status)
    for (student, assignment), row in course_grading.rows.items():
        tests = graded_test_ids(nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", 4))
        scores = course_grading.cell_scores[(student, assignment)]
        assert set(tests) <= set(scores), f"{student}/{assignment}: test cells without a grade"
        assert float(row["code_score"]) == pytest.approx(sum(scores[t] for t in tests)), (student, assignment, row)


@pytest.mark.grading
def test_a_delegating_answer_earns_none_of_its_points_and_is_flagged(course_grading):
    """``cy_delegates`` answers with calls of the course's references: nbgrader gives each
    test of such an answer 0 points (the references are unavailable while it runs), the
    other answers keep theirs, and the inspection flags each delegation with its reason."""
    if DELEGATING not in GRADED:
        pytest.skip(f"{DELEGATING} is not graded in this session (FEEDGPU_NOTEBOOKS)")
    row = course_grading.rows[("cy_delegates", DELEGATING)]
    solution = nbformat.read(ROOT / "solutions" / DELEGATING / f"{DELEGATING}.ipynb", 4)
    owners, points = own_tests(solution.cells), points_by_test(solution)
    delegated = [answer for answer in owners if answer in DELEGATIONS]
    lost = {test for answer in delegated for test in owners[answer]}
    assert delegated and lost, f"{DELEGATING} has no answer to delegate: {owners}"
    scores = course_grading.cell_scores[("cy_delegates", DELEGATING)]
    assert {t: scores[t] for t in lost} == {t: 0 for t in lost}, f"a delegating answer scored: {scores}"
    assert all(scores[t] == points[t] for t in set(points) - lost), f"the other answers lost points: {scores}"
    assert row["status"] == "graded" and float(row["code_score"]) == sum(points.values()) - sum(
        points[t] for t in lost), row
    for answer in delegated:
        reference = REFERENCES[answer][0].replace(":", ".")
        assert f"{answer}: uses the course's reference {reference}" in row["flags"], (answer, row["flags"])
