"""Shared fixtures: tiny LFW-layout trees built in a temporary folder, and the one grading
of the course's notebooks that every test of the notebooks shares.

What a test costs is in its marker (see ``pyproject.toml``): ``unit`` (seconds: no kernel,
no nbgrader; every test without another marker gets it here), ``notebook`` (runs cells of
the course's notebooks in a Jupyter kernel) and ``grading`` (runs nbgrader). ``make
test-quick`` runs the unit tests (less those marked ``slow``), ``make test`` everything.
"""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import numpy as np
import pytest
from PIL import Image

from grading_fixtures import (
    DELEGATING,
    FIXTURE_SOURCE,
    GRADED_ALONE,
    TINY,
    RELEASE,
    SOLUTIONS,
    course_notebooks,
    delegating_version,
    student_version,
    with_fresh_workers,
    write_submission,
)

ROOT = Path(__file__).resolve().parents[1]

# people in an order that differs from sorted order, with mixed case
TINY_PEOPLE = {"zoe_Last": 1, "Bob_B": 3, "alice_A": 2, "Carl_C": 1}

ASSIGNMENTS = course_notebooks()

#: Seconds that a fixture may add to the first test that requests it (pytest-timeout
#: counts a fixture's set-up in that test). Every test that requests one of these gets
#: the per-test timeout of ``pyproject.toml`` plus the fixture's budget, so a hung
#: DataLoader still fails one test, and a long grading fails none. Two whole-notebook
#: autogrades per course notebook; each grading budget is about four times what it
#: takes on 2 busy cores.
SESSION_BUDGET_S = {
    "course_grading": 120 + 360 * len(ASSIGNMENTS) + 120 * (DELEGATING in ASSIGNMENTS),  # tests/conftest.py
    "tiny_class": 900,  # tests/test_grading_robust.py
    "one_kernel_run": 600,  # tests/test_answers_graded_alone.py (one notebook, or the one before it)
}
# The one-kernel runs start after the session's grading (tests/test_answers_graded_alone.py).
SESSION_BUDGET_S["one_kernel_runs"] = SESSION_BUDGET_S["course_grading"]
COST_MARKERS = ("unit", "notebook", "grading")


def pytest_collection_modifyitems(config, items):
    """Mark unmarked tests ``unit``; give tests that set up a grading fixture its time."""
    default = float(config.getini("timeout") or 0)
    for item in items:
        if not any(item.get_closest_marker(m) for m in COST_MARKERS):
            item.add_marker(pytest.mark.unit)
        budget = sum(SESSION_BUDGET_S.get(name, 0) for name in item.fixturenames)
        if budget and default and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(default + budget))


def write_face(path: Path, seed: int, mode: str = "RGB", size: int = 32) -> None:
    """A small random image in ``mode``, saved by its file ending."""
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    pixels = rng.integers(0, 256, size=(size, size, channels), dtype=np.uint8)
    img = Image.fromarray(pixels.squeeze(-1) if channels == 1 else pixels, mode)
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path)


@pytest.fixture
def tiny_lfw(tmp_path: Path) -> Path:
    """A 4-person tree of 8 images (one grayscale JPEG, one RGBA PNG), stray files and a hidden folder."""
    root = tmp_path / "lfw"
    seed = 0
    for person, n in TINY_PEOPLE.items():  # created in non-sorted order on purpose
        for k in range(n, 0, -1):
            seed += 1
            write_face(root / person / f"{person}_{k:04d}.jpg", seed)
    write_face(root / "Bob_B" / "Bob_B_0002.jpg", 99, mode="L")
    write_face(root / "alice_A" / "alice_A_0003.png", 98, mode="RGBA")
    (root / "Bob_B" / "notes.txt").write_text("not an image")
    (root / "Bob_B" / ".DS_Store").write_bytes(b"\0\1")
    (root / ".hidden_person").mkdir()
    write_face(root / ".hidden_person" / "x_0001.jpg", 97)
    (root / "README.txt").write_text("a stray file at the top level")
    return root


@pytest.fixture(scope="session")
def tiny_release(tmp_path_factory) -> Path:
    """The fixture assignment's student release (``tests/fixtures/source/tiny``), made by
    ``feedgpu-release``'s code: the notebook's path."""
    from feedgpu.workflows.course import release

    dest = release.generate(tmp_path_factory.mktemp("tiny") / "release", source=FIXTURE_SOURCE)
    return dest / TINY / f"{TINY}.ipynb"


# --------------------------------------------------------------------------- the course's grading


@dataclass
class CourseGrading:
    """The course graded once: ``ada_solution`` hands in every solution with DataLoader
    workers that start from a fresh interpreter and get their dataset pickled, as under
    spawn on macOS and Windows (:func:`with_fresh_workers`), so every worker-starting cell
    of the course runs once the way it must work there; ``bob_untouched`` hands in
    every release notebook as it was given (and a stray folder that is no assignment),
    ``cy_delegates`` the solution of :data:`DELEGATING` with each answer that the course's
    own code could do written as a call of that code."""

    workdir: Path
    results: list  # submission.Result of this run
    rows: dict[tuple[str, str], dict]  # (student, assignment) -> row of grades.csv
    cell_scores: dict[tuple[str, str], dict[str, float | None]] = field(default_factory=dict)
    seconds: float = 0.0

    def autograded(self, student: str, assignment: str):
        """The notebook nbgrader ran for ``student``'s ``assignment``, with its outputs."""
        path = self.workdir / "autograded" / student / assignment / f"{assignment}.ipynb"
        assert path.is_file(), f"nbgrader did not grade {student}/{assignment}: {self.rows.get((student, assignment))}"
        return nbformat.read(path, 4)


@pytest.fixture(scope="session")
def course_grading(tmp_path_factory) -> CourseGrading:
    """Grade the course once per test session, with ``feedgpu-grade``'s defaults.

    This is the only whole-notebook run of each solution (it is also the check that each
    executes without an error), of each untouched release notebook and of the delegating
    notebook; every test that needs one of them shares it.
    """
    from nbgrader.api import Gradebook

    from feedgpu.workflows.grading import grade

    base = tmp_path_factory.mktemp("course")
    subs = base / "submitted"

    def hand_in(names: list[str], solutions: bool = True, releases: bool = True) -> None:
        for name in names:
            if not (RELEASE / name / f"{name}.ipynb").is_file():
                continue  # not released yet: test_release_has_every_assignment says so, and no grade is found
            released = nbformat.read(RELEASE / name / f"{name}.ipynb", 4)
            solution = nbformat.read(SOLUTIONS / name / f"{name}.ipynb", 4)
            if solutions:
                write_submission(subs, "ada_solution", name, with_fresh_workers(student_version(solution, released)))
                if name == DELEGATING:
                    write_submission(subs, "cy_delegates", name, delegating_version(solution, released))
            if releases:
                write_submission(subs, "bob_untouched", name, released)

    # Every untouched release (none has a loop to time: its answers raise) and the solutions
    # but those of GRADED_ALONE.
    hand_in([name for name in ASSIGNMENTS if name not in GRADED_ALONE])
    hand_in([name for name in ASSIGNMENTS if name in GRADED_ALONE], solutions=False)
    (subs / "bob_untouched" / "not_an_assignment").mkdir()
    start = time.perf_counter()
    # Two at a time, as an instructor with a 2-core machine may (feedgpu-grade --jobs 2):
    # the notebooks' timing checks must pass on a machine shared with another grading.
    results = grade.grade_class(subs, base / "grading", progress=False, jobs=2)
    # Then, alone, the solution whose graded run needs about a core for its loader (see
    # GRADED_ALONE): a later run grades only what is new, as an instructor's second run does.
    hand_in([name for name in ASSIGNMENTS if name in GRADED_ALONE], releases=False)
    results += grade.grade_class(subs, base / "grading", progress=False, jobs=1)
    seconds = time.perf_counter() - start
    workdir = base / "grading"
    with (workdir / grade.CSV_NAME).open() as f:
        rows = {(r["student"], r["assignment"]): r for r in csv.DictReader(f)}
    scores = {}
    with Gradebook(f"sqlite:///{workdir / 'gradebook.db'}") as gb:
        for r in results:
            if r.status == "graded":
                nb = gb.find_submission_notebook(r.assignment, r.assignment, r.student)
                scores[(r.student, r.assignment)] = {g.name: g.score for g in nb.grades}
    return CourseGrading(workdir, results, rows, scores, seconds)
