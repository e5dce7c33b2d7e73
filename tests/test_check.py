"""``make check`` (``feedgpu-check``): a self-learner grades their own notebook.

The notebook checked is the fixture assignment's (``tests/fixtures/source/tiny``, seconds
to grade), half finished: the first answer solved, the second left as released. The
graded checks run it twice through the real pipeline (nbgrader, sandbox, inspection);
the others check how a notebook is found, and the one-line errors, without grading.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import nbformat
import psutil
import pytest

from feedgpu.workflows.course import check
from grading_fixtures import FIXTURE_SOURCE, TINY, cell, grade_id, own_tests, points_by_test, student_version

SOLUTION = FIXTURE_SOURCE / TINY / f"{TINY}.ipynb"
SOLVED, LEFT = "double", "count_batches"  # the answer the learner wrote, and the one left as released


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def notebooks(tmp_path_factory, tiny_release) -> Path:
    """A learner's ``notebooks/`` with the fixture half finished."""
    base = tmp_path_factory.mktemp("learner")
    released = nbformat.read(tiny_release, 4)
    half = student_version(nbformat.read(SOLUTION, 4), released)
    cell(half, LEFT).source = cell(released, LEFT).source
    (base / "notebooks" / TINY).mkdir(parents=True)
    nbformat.write(half, base / "notebooks" / TINY / f"{TINY}.ipynb")
    return base / "notebooks"


@pytest.fixture(scope="module")
def checked(notebooks, tmp_path_factory):
    """The half-finished notebook checked twice, and the tree before and after."""
    before = _tree(notebooks)
    feedback = tmp_path_factory.mktemp("feedback")
    runs = [check.check_notebook(TINY[:2], notebooks=notebooks, source=FIXTURE_SOURCE, feedback_dir=feedback)
            for _ in range(2)]
    return runs, before, _tree(notebooks)


@pytest.mark.grading
def test_points_per_task_from_the_instructors_tests(checked):
    """The solved answer earns all its points (hidden test included), the other none; the
    written answer is left to a person."""
    first = checked[0][0]
    solution = nbformat.read(SOLUTION, 4)
    points, owners = points_by_test(solution), own_tests(solution.cells)
    tasks = {t.name: t for t in first.tasks}
    assert list(tasks) == [SOLVED, LEFT, "reflection"], list(tasks)
    for answer in (SOLVED, LEFT):
        assert tasks[answer].max_score == sum(points[t] for t in owners[answer]), tasks[answer]
    assert tasks[SOLVED].score == tasks[SOLVED].max_score and not tasks[SOLVED].failing
    assert tasks[LEFT].score == 0 and len(tasks[LEFT].failing) == len(owners[LEFT])
    assert all("NotImplementedError" in f for f in tasks[LEFT].failing), tasks[LEFT].failing
    assert tasks["reflection"].by_hand and tasks["reflection"].score == 0


@pytest.mark.grading
def test_the_report_names_each_failing_test_and_the_total(checked):
    text = check.format_check(checked[0][0])
    solution = nbformat.read(SOLUTION, 4)
    for test in own_tests(solution.cells)[LEFT]:
        assert f"{test}: NotImplementedError" in text, text
    auto = sum(points_by_test(solution).values())
    assert f"total: {sum(points_by_test(solution)[t] for t in own_tests(solution.cells)[SOLVED]):g} / {auto:g}" in text
    assert "feedback:" in text


@pytest.mark.grading
def test_the_same_score_twice_and_the_notebook_untouched(checked):
    (first, second), before, after = checked
    assert [(t.name, t.score) for t in first.tasks] == [(t.name, t.score) for t in second.tasks]
    assert before == after, "checking must not write anything under notebooks/"


@pytest.mark.grading
def test_feedback_is_kept_and_no_process_is_left(checked):
    first = checked[0][0]
    assert first.feedback is not None and first.feedback.is_file() and first.feedback.stat().st_size > 1000
    assert "double" in first.feedback.read_text()
    strays = [p for p in psutil.Process().children(recursive=True) if "ipykernel" in " ".join(p.cmdline())]
    assert not strays, f"kernels left running: {strays}"


def _notebooks(tmp_path: Path, *names: str) -> Path:
    for name in names:
        (tmp_path / name).mkdir(parents=True)
        nbformat.write(nbformat.v4.new_notebook(), tmp_path / name / f"{name}.ipynb")
    return tmp_path


def test_a_unique_prefix_or_the_whole_name_finds_the_notebook(tmp_path):
    root = _notebooks(tmp_path, "03_prefetch_transfer", "04_augmentation")
    for name in ("03", "03_pre", "03_prefetch_transfer", "03_prefetch_transfer/", "03_prefetch_transfer.ipynb"):
        assert check.find_notebook(name, root) == ("03_prefetch_transfer",
                                                    root / "03_prefetch_transfer" / "03_prefetch_transfer.ipynb")


@pytest.mark.parametrize("case, expected", [
    ("nothing", "no notebook matches 'nothing'"),
    ("0", "matches 2 notebooks"),
    ("missing", "is missing"),
    ("broken", "is not a valid notebook"),
])
def test_one_line_errors(tmp_path, case, expected):
    root = _notebooks(tmp_path, "03_prefetch_transfer", "04_augmentation")
    (root / "missing_one").mkdir()
    (root / "broken_one").mkdir()
    (root / "broken_one" / "broken_one.ipynb").write_text("{ not json")
    with pytest.raises(check.CheckError, match=expected) as err:
        check.find_notebook(case, root)
    assert "\n" not in str(err.value)


def test_the_command_exits_2_with_one_line_and_no_traceback(tmp_path):
    root = _notebooks(tmp_path, "00_orientation")
    proc = subprocess.run([sys.executable, "-m", "feedgpu.workflows.course.check", "09", "--notebooks", str(root)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc
    assert proc.stderr.startswith("error: no notebook matches '09'") and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.parametrize("source, expected", [
    ("no_such_folder", "no instructor's tests at"),
    ("empty", "has no assignment 00_orientation"),
])
def test_missing_instructor_tests_are_one_line_too(tmp_path, source, expected):
    """Without solutions/ (a copy of the release alone), or without this notebook's tests."""
    root = _notebooks(tmp_path, "00_orientation")
    (tmp_path / "empty").mkdir()
    proc = subprocess.run([sys.executable, "-m", "feedgpu.workflows.course.check", "00", "--notebooks", str(root),
                           "--source", str(tmp_path / source)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and expected in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
