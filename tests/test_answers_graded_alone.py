"""Each answer is graded on its own, in every notebook, and two independent gradings agree.

For each solution cell, the release's stub (``raise NotImplementedError()``) replaces it
while every other answer stays solved: exactly the test cells that follow it (up to the
next solution cell) must fail, and no other. So a student who leaves one answer out loses
exactly that answer's points, and the untouched release scores zero.

To stay quick, one kernel per notebook runs only what grading needs: the locked set-up
cells (imports, configuration, test helpers), the answers and the tests; the
demonstrations in between are skipped. In that kernel:

1. on one core (as on a small JupyterHub pod): the set-up cells and the solution, every
   answer and every test; no test may fail, and none may write to stderr, because
   nbgrader scores a test cell with stderr output zero (DataLoader warns there when a
   loader has more workers than the machine has cores);
2. for each answer, its stub, then the answers and tests after it (the cells before it
   run before it exists, in the grader too), then the answer again;
3. each answer that the course's own code could do (``feedgpu.testing.REFERENCES``) written
   as a delegation to that code (:data:`DELEGATIONS`), then its own tests: every one must
   fail, because the reference is unavailable while they run (``ReferenceHidden``); then
   the answer again;
4. the release: every answer stubbed, every test.

The pass/fail of each test in 1 and 4 is then compared with the points nbgrader gave each
test cell in the session's grading of the solution and of the release (``course_grading``):
two independent runs of the same tests, which must agree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

from feedgpu.testing import REFERENCES
from grading_fixtures import (
    DELEGATIONS,
    ALL_CORES,
    ONE_CORE,
    RELEASE,
    SOLUTIONS,
    OneKernel,
    error_of,
    grade_id,
    course_notebooks,
    graded_test_ids,
    is_answer,
    is_setup,
    is_test,
    own_tests,
    points_by_test,
    stderr_of,
)

NAMES = course_notebooks()

pytestmark = pytest.mark.notebook

@dataclass
class Run:
    """What the tests of one notebook did in its one kernel."""

    name: str
    owners: dict[str, list[str]]  # answer -> its own tests
    tests: list[str]
    points: dict[str, float]
    setup_errors: dict[str, str] = field(default_factory=dict)
    solution_failed: dict[str, str] = field(default_factory=dict)  # test -> error (pass 1)
    solution_stderr: dict[str, str] = field(default_factory=dict)  # test -> stderr (pass 1)
    stub_failed: dict[str, set[str]] = field(default_factory=dict)  # answer -> failed tests (pass 2)
    delegated: dict[str, dict[str, str | None]] = field(default_factory=dict)  # answer -> test -> error (pass 3)
    release_failed: set[str] = field(default_factory=set)  # pass 4


def run_notebook(name: str) -> Run:
    solution = nbformat.read(SOLUTIONS / name / f"{name}.ipynb", 4)
    assert (RELEASE / name / f"{name}.ipynb").is_file(), f"{name} has no release: run `make release`"
    release = nbformat.read(RELEASE / name / f"{name}.ipynb", 4)
    stubs = {grade_id(c): c.source for c in release.cells if is_answer(c)}
    cells = [c for c in solution.cells if is_setup(c) or is_answer(c) or is_test(c)]
    run = Run(name, own_tests(solution.cells), graded_test_ids(solution), points_by_test(solution))
    cell_by_id = {grade_id(c): c for c in cells}

    def answers_and_tests(kernel: OneKernel, start: int, stub: dict[str, str]) -> dict[str, list]:
        """Run the answers (``stub`` sources in place) and tests from cell ``start`` on;
        the outputs of each test."""
        outputs = {}
        for c in cells[start:]:
            if is_answer(c) or is_test(c):
                out = kernel.run(stub.get(grade_id(c), c.source))
                if is_test(c):
                    outputs[grade_id(c)] = out
        return outputs

    with OneKernel(SOLUTIONS / name) as kernel:
        kernel.run_ok(ONE_CORE, "putting the kernel on one core")
        for c in cells:
            if is_setup(c):
                err = error_of(kernel.run(c.source))
                if err:
                    run.setup_errors[grade_id(c)] = err
        if run.setup_errors:
            return run
        for gid, out in answers_and_tests(kernel, 0, {}).items():  # 1. the solution, one core
            if error_of(out):
                run.solution_failed[gid] = error_of(out)
            if stderr_of(out).strip():
                run.solution_stderr[gid] = stderr_of(out).strip()[:300]
        kernel.run_ok(ALL_CORES, "putting the kernel back on its cores")
        for index, c in enumerate(cells):  # 2. each answer stubbed alone
            if is_answer(c):
                answer = grade_id(c)
                got = answers_and_tests(kernel, index, {answer: stubs[answer]})
                run.stub_failed[answer] = {gid for gid, out in got.items() if error_of(out)}
                kernel.run_ok(c.source, f"{answer} (put back)")
        for c in cells:  # 3. each answer that could delegate, delegating
            if is_answer(c) and grade_id(c) in REFERENCES:
                answer = grade_id(c)
                kernel.run_ok(DELEGATIONS[answer], f"the delegation of {answer}")
                run.delegated[answer] = {gid: error_of(kernel.run(cell_by_id[gid].source))
                                         for gid in run.owners[answer]}
                kernel.run_ok(c.source, f"{answer} (put back)")
        got = answers_and_tests(kernel, 0, stubs)  # 4. the release
        run.release_failed = {gid for gid, out in got.items() if error_of(out)}
    return run


@pytest.fixture(scope="module", params=NAMES)
def one_kernel_run(request) -> Run:
    return run_notebook(request.param)


def test_every_answer_has_tests_and_set_up_runs(one_kernel_run):
    run = one_kernel_run
    assert run.owners and all(run.owners.values()), f"{run.name}: every answer needs tests after it: {run.owners}"
    assert not run.setup_errors, f"{run.name}: set-up cells raised {run.setup_errors}"


def test_solution_passes_every_test_on_one_core(one_kernel_run):
    run = one_kernel_run
    assert not run.setup_errors, f"{run.name}: set-up cells raised {run.setup_errors}"
    assert run.solution_failed == {}, f"{run.name}: the solution fails its own tests: {run.solution_failed}"


def test_no_test_cell_writes_to_stderr_on_one_core(one_kernel_run):
    """nbgrader gives a test cell with any stderr output zero points, however it ended."""
    run = one_kernel_run
    assert not run.setup_errors, f"{run.name}: set-up cells raised {run.setup_errors}"
    assert run.solution_stderr == {}, (
        f"{run.name}: these test cells write to stderr on one core and would score 0: {run.solution_stderr}")


def test_each_answer_is_graded_alone(one_kernel_run):
    run = one_kernel_run
    assert not run.setup_errors, f"{run.name}: set-up cells raised {run.setup_errors}"
    wrong = {answer: (sorted(run.stub_failed.get(answer, ())), sorted(tests))
             for answer, tests in run.owners.items() if run.stub_failed.get(answer) != set(tests)}
    assert not wrong, (f"{run.name}: with one answer left out, (failed tests, expected exactly its own) "
                       f"differ: {wrong}")


def test_release_fails_every_test(one_kernel_run):
    run = one_kernel_run
    assert not run.setup_errors, f"{run.name}: set-up cells raised {run.setup_errors}"
    passing = sorted(set(run.tests) - run.release_failed)
    assert not passing, f"{run.name}: these tests pass on the untouched release (no student code): {passing}"


def test_an_answer_that_calls_the_course_reference_fails_every_test(one_kernel_run):
    """A delegation to the course's own code scores nothing: each of its tests fails, and
    fails because the reference was unavailable (not by chance)."""
    run = one_kernel_run
    assert not run.setup_errors, f"{run.name}: set-up cells raised {run.setup_errors}"
    expected = sorted(answer for answer in run.owners if answer in REFERENCES)
    assert sorted(run.delegated) == expected, f"{run.name}: delegations run {sorted(run.delegated)}, expected {expected}"
    passed = {answer: sorted(gid for gid, err in tests.items() if err is None)
              for answer, tests in run.delegated.items()}
    assert not any(passed.values()), f"{run.name}: these tests pass for an answer that calls the reference: {passed}"
    other = {gid: err for tests in run.delegated.values() for gid, err in tests.items()
             if err and not err.startswith("ReferenceHidden")}
    assert not other, f"{run.name}: these tests failed for another reason than the hidden reference: {other}"


def test_every_answer_with_a_reference_hides_it_in_each_of_its_tests():
    """The table of references and the solutions' test cells agree (no kernel needed): each
    test of an answer listed in ``REFERENCES`` runs inside ``without_references(answer)``,
    every listed answer exists, and each has a delegation to try."""
    answers: dict[str, str] = {}
    for name in NAMES:
        solution = nbformat.read(SOLUTIONS / name / f"{name}.ipynb", 4)
        sources = {grade_id(c): c.source for c in solution.cells}
        for answer, tests in own_tests(solution.cells).items():
            assert answer not in answers, f"answer id {answer} in {answers.get(answer)} and {name}"
            answers[answer] = name
            if answer in REFERENCES:
                missing = [t for t in tests if f'without_references("{answer}")' not in sources[t]]
                assert not missing, f"{name}: these tests of {answer} do not hide its references: {missing}"
                assert answer in DELEGATIONS, f"{name}: no delegation of {answer} to try"
    if not os.environ.get("FEEDGPU_NOTEBOOKS"):  # the whole course: every listed answer is somewhere
        unknown = sorted(set(REFERENCES) - set(answers))
        assert not unknown, f"REFERENCES lists answers that no notebook has: {unknown}"


@pytest.mark.grading
def test_same_scores_as_the_session_grading(one_kernel_run, course_grading):
    """The tests that passed here are exactly the test cells nbgrader gave full points, for
    the solution and for the release: the same score twice, from two independent runs."""
    run = one_kernel_run
    for student, failed in (("ada_solution", set(run.solution_failed)), ("bob_untouched", run.release_failed)):
        scores = course_grading.cell_scores.get((student, run.name))
        assert scores is not None, f"nbgrader did not grade {student}/{run.name}"
        full = {gid for gid in run.tests if scores.get(gid) == run.points[gid]}
        zero = {gid for gid in run.tests if scores.get(gid) == 0}
        assert full | zero == set(run.tests), f"{student}/{run.name}: partial or missing points {scores}"
        passed = set(run.tests) - failed
        assert full == passed, (f"{student}/{run.name}: nbgrader gave full points to {sorted(full)}, "
                                f"but these passed in one kernel: {sorted(passed)}")
