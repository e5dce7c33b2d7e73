"""Every notebook of the course is graded as if its test cells were where the release has
them, whatever a student did to them: deleted, edited (and unlocked) or moved.

No kernel is needed to show it: nbgrader runs, in order, the cells it is left with after
the grader's inspection (``feedgpu.workflows.grading.inspection``) and its own clean-up
(``DeduplicateIds``, ``OverwriteCells`` with ``add_missing_cells``, ``CheckCellMetadata``,
run here in-process against a gradebook with every assignment registered). For each
notebook and each way of tampering, that notebook must be the one an honest student's
hand-in becomes: the same cells, in the same order, with the instructor's sources and
marks. (A notebook 06 whose test cells were deleted once stopped nbgrader with
``KeyError: 'test_helpers_b'`` and scored 0.)
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat
import pytest

from feedgpu.workflows.grading.grade import register_assignments
from feedgpu.workflows.grading.inspection import inspect_and_repair
from grading_fixtures import RELEASE, SOLUTIONS, course_notebooks, grade_id, is_test, meta, student_version

pytestmark = pytest.mark.grading

NAMES = course_notebooks()


def deleted(nb):
    """Every test cell removed (graded, not an answer), as a student who tidied up would."""
    nb.cells = [c for c in nb.cells if not is_test(c)]
    return nb


def edited(nb):
    """Every test cell unlocked and replaced by one that always passes."""
    for c in nb.cells:
        if is_test(c):
            c.source = "pass  # my code is right, trust me"
            c.metadata["nbgrader"]["locked"] = False
    return nb


def reordered(nb):
    """Every test cell moved to the top, in reverse order: each would run before its answer."""
    tests = [c for c in nb.cells if is_test(c)]
    nb.cells = list(reversed(tests)) + [c for c in nb.cells if not is_test(c)]
    return nb


TAMPERINGS = {"deleted": deleted, "edited": edited, "reordered": reordered}


@pytest.fixture(scope="module")
def gradebook(tmp_path_factory) -> str:
    """Every assignment registered, as ``feedgpu-grade`` does first (one nbgrader run)."""
    workdir = tmp_path_factory.mktemp("layouts")
    register_assignments(workdir, NAMES)
    return f"sqlite:///{workdir / 'gradebook.db'}"


def what_nbgrader_runs(nb, name: str, db_url: str):
    """``nb`` after nbgrader's clean-up for autograding (before it executes anything)."""
    from nbgrader.preprocessors import CheckCellMetadata, DeduplicateIds, OverwriteCells

    resources = {"nbgrader": {"notebook": name, "assignment": name, "db_url": db_url}}
    nb = copy.deepcopy(nb)
    for step in (DeduplicateIds(), OverwriteCells(add_missing_cells=True), CheckCellMetadata()):
        nb, resources = step.preprocess(nb, resources)
    return nb


def cells_run(nb) -> list[tuple]:
    """What grading depends on: each cell's kind, source, nbgrader marks and whether nbgrader
    treats it as locked (it does every graded cell, whatever its ``locked`` mark says), in order."""
    from nbgrader import utils

    return [(c.cell_type, c.source, {k: v for k, v in sorted(meta(c).items()) if k != "locked"},
             utils.is_locked(c)) for c in nb.cells]


@pytest.mark.parametrize("tampering", list(TAMPERINGS))
@pytest.mark.parametrize("name", NAMES)
def test_tampered_test_cells_are_graded_as_if_they_were_in_place(tmp_path: Path, gradebook: str, name: str,
                                                                tampering: str):
    release = RELEASE / name / f"{name}.ipynb"
    honest = student_version(nbformat.read(SOLUTIONS / name / f"{name}.ipynb", 4), nbformat.read(release, 4))
    mine = tmp_path / f"{name}.ipynb"
    nbformat.write(TAMPERINGS[tampering](copy.deepcopy(honest)), mine)
    report = inspect_and_repair(mine, release)
    expected = cells_run(what_nbgrader_runs(honest, name, gradebook))
    got = cells_run(what_nbgrader_runs(nbformat.read(mine, 4), name, gradebook))
    ids = lambda cells: [cell[2].get("grade_id", "-") for cell in cells]  # noqa: E731
    assert ids(got) == ids(expected), f"{name}, tests {tampering}: cells in another order than the release's"
    differ = [ids(expected)[i] for i, (a, b) in enumerate(zip(got, expected)) if a != b]
    assert not differ, f"{name}, tests {tampering}: these cells differ from an honest hand-in's: {differ}"
    tests = [grade_id(c) for c in honest.cells if is_test(c)]
    noted = " ".join(report.notes)
    assert all(gid in noted for gid in tests), f"{name}: every tampered test is noted: {report.notes}"


def test_nbgrader_alone_would_run_moved_tests_out_of_place(gradebook: str):
    """Without the inspection, the tests moved to the top stay there (each would fail for want
    of its answer): the repair above is what puts them back."""
    name = NAMES[0]
    honest = student_version(nbformat.read(SOLUTIONS / name / f"{name}.ipynb", 4),
                             nbformat.read(RELEASE / name / f"{name}.ipynb", 4))
    alone = cells_run(what_nbgrader_runs(reordered(copy.deepcopy(honest)), name, gradebook))
    assert alone != cells_run(what_nbgrader_runs(honest, name, gradebook))


def test_nbgrader_alone_stops_where_a_locked_helper_precedes_a_deleted_test(gradebook: str):
    """The failure the inspection's own restoring avoids: nbgrader 0.9's ``add_missing_cells``
    looks for the cell before a deleted test among the graded and answer cells only."""
    for name in NAMES:
        release = nbformat.read(RELEASE / name / f"{name}.ipynb", 4)
        marked = [c for c in release.cells if grade_id(c)]
        if any(is_test(c) and meta(p).get("locked") and not meta(p).get("grade") and not meta(p).get("solution")
               and p.cell_type == "code" for p, c in zip(marked, marked[1:])):
            honest = student_version(nbformat.read(SOLUTIONS / name / f"{name}.ipynb", 4), release)
            with pytest.raises(KeyError):
                what_nbgrader_runs(deleted(copy.deepcopy(honest)), name, gradebook)
            return
    pytest.skip("no notebook has a test cell right after a locked helper cell")
