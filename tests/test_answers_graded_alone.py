"""Each answer is graded on its own, in every notebook, and two independent gradings agree.

For each solution cell, the release's stub (``raise NotImplementedError()``) replaces it
while every other answer stays solved: exactly the test cells that follow it (up to the
next solution cell) must fail, and no other. So a student who leaves one answer out loses
exactly that answer's points, and the untouched release scores zero.

To stay quick, one kernel per notebook runs only what grading needs: the locked set-up
cells (imports, configuration, test helpers), the answers and the tests; the
demonstrations in between are skipped. Two notebooks run at a time, after the session's
grading (which has the machine to itself), each kernel, and every process it starts, on a
core of its own from the start: as on a small JupyterHub pod, and so that neither slows
the other's timing checks (a kernel on both cores took time from the other's one core, and
the capstone's loop missed its stall-free target so). Every step below runs on that one
core, so the stubs and wrong answers must fail where the solution passes. The capstone
(``GRADED_ALONE``) runs last, alone, on every core: its graded loop needs about a core's
worth of CPU, and one core shared with the kernel's own work (reclaiming the memory an
earlier notebook freed) left it short of its bound. In that kernel:

1. the set-up cells and the solution, every answer and every test; no test may fail, and
   none may write to stderr, because nbgrader scores a test cell with stderr output zero
   (DataLoader warns there when a loader has more workers than the machine has cores);
2. for each answer, its stub, then the answers and tests after it (the cells before it
   run before it exists, in the grader too), then the answer again;
3. each answer that the course's own code could do (``feedgpu.workflows.grading.testing.REFERENCES``) written
   as a delegation to that code (:data:`DELEGATIONS`), then its own tests: every one must
   fail, because the reference is unavailable while they run (``ReferenceHidden``); then
   the answer again;
4. each plausible wrong answer kept in ``tests/wrong_answers/``, then the tests it names:
   each must fail; after the last wrong answer of an answer, the answer again, and every
   test its wrong answers named: each must pass again (so the failures were the wrong
   answers', not something one of them left behind: what a wrong answer leaves in the
   kernel other than its own definitions would still be there; each wrong answer's own
   definitions are replaced by the next one's, as by the answer's);
5. the release: every answer stubbed, every test.

Two rules hold for every notebook, checked without a kernel: every answer has an entry in
``REFERENCES`` (one that hides nothing says why), and every graded test is named by at
least one wrong answer that it must fail.

The pass/fail of each test in 1 and 5 is then compared with the points nbgrader gave each
test cell in the session's grading of the solution and of the release (``course_grading``):
two independent runs of the same tests, which must agree.
"""

from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

from feedgpu.workflows.grading.testing import REFERENCES, NothingToHide
from grading_fixtures import (
    DELEGATIONS,
    GRADED_ALONE,
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
    one_core,
    own_tests,
    points_by_test,
    stderr_of,
)
from wrong_answers import WrongAnswer, wrong_answers

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
    wrong_caught: dict[str, dict[str, str | None]] = field(default_factory=dict)  # mistake -> test -> error (pass 4)
    wrong_errors: dict[str, str] = field(default_factory=dict)  # mistake -> error of its own cell (pass 4)
    wrong_not_restored: dict[str, dict[str, str]] = field(default_factory=dict)  # answer -> test -> error after
    release_failed: set[str] = field(default_factory=set)  # pass 5


def run_notebook(name: str, core: int | None = 0) -> Run:
    """The one-kernel run of notebook ``name``, on the ``core``-th core (on every core: None)."""
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
        if core is not None:
            kernel.run_ok(one_core(core), "putting the kernel on one core")
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
        for index, c in enumerate(cells):  # 2. each answer stubbed alone
            if is_answer(c):
                answer = grade_id(c)
                got = answers_and_tests(kernel, index, {answer: stubs[answer]})
                run.stub_failed[answer] = {gid for gid, out in got.items() if error_of(out)}
                kernel.run_ok(c.source, f"{answer} (put back)")
        for c in cells:  # 3. each answer that could delegate, delegating
            if is_answer(c) and REFERENCES.get(grade_id(c)):
                answer = grade_id(c)
                kernel.run_ok(DELEGATIONS[answer], f"the delegation of {answer}")
                run.delegated[answer] = {gid: error_of(kernel.run(cell_by_id[gid].source))
                                         for gid in run.owners[answer]}
                kernel.run_ok(c.source, f"{answer} (put back)")
        mistakes = wrong_answers(name)  # 4. each answer's wrong answers, then the answer again
        for answer in dict.fromkeys(m.answer for m in mistakes):
            named: set[str] = set()
            for mistake in (m for m in mistakes if m.answer == answer):
                key = f"{mistake.answer}: {mistake.mistake}"
                err = error_of(kernel.run(mistake.source))
                if err:
                    run.wrong_errors[key] = err
                tests = [gid for gid in run.tests if gid in mistake.fails]
                run.wrong_caught[key] = {gid: error_of(kernel.run(cell_by_id[gid].source)) for gid in tests}
                named.update(tests)
            kernel.run_ok(cell_by_id[answer].source, f"{answer} (put back)")
            after = {gid: error_of(kernel.run(cell_by_id[gid].source)) for gid in run.tests if gid in named}
            run.wrong_not_restored[f"{answer} after its wrong answers"] = {gid: err for gid, err in after.items() if err}
        got = answers_and_tests(kernel, 0, stubs)  # 5. the release
        run.release_failed = {gid for gid, out in got.items() if error_of(out)}
    return run


#: Notebooks run at a time, each in its own kernel (the machine has 2 cores).
AT_ONCE = 2

#: The runs that take longest, started first so that the two kernels end together: run
#: alone on one core (2026-12-02), 02 took 63 s and 08 63 s (two torchrun launches, and one
#: for each of two wrong answers), 06 38 s, the others 9 to 25 s. In notebook order, one
#: kernel sat idle for the last minute while the other ran 08.
LONGEST_FIRST = ("08_distributed", "02_workers", "06_copy_on_write")


@pytest.fixture(scope="session")
def one_kernel_runs(request) -> dict[str, Future]:
    """The run of every notebook selected in this session, the longest first (:data:`LONGEST_FIRST`),
    then in notebook order, two at a time, each thread's kernel on a core of its own. The session's grading,
    when a selected test needs it, is made first, alone: its notebooks' timing checks get
    the machine they get in an instructor's grading."""
    items = request.session.items
    if any("course_grading" in item.fixturenames for item in items):
        request.getfixturevalue("course_grading")
    wanted = {item.callspec.params["one_kernel_run"] for item in items if "one_kernel_run" in item.fixturenames}
    cores, local = itertools.count(), threading.local()
    pool = ThreadPoolExecutor(AT_ONCE, thread_name_prefix="one-kernel",
                              initializer=lambda: setattr(local, "core", next(cores)))  # each thread its core
    last = ThreadPoolExecutor(1, thread_name_prefix="one-kernel-alone")
    order = [n for n in LONGEST_FIRST if n in NAMES] + [n for n in NAMES if n not in LONGEST_FIRST]
    runs = {name: pool.submit(lambda n: run_notebook(n, local.core), name)
            for name in order if name in wanted and name not in GRADED_ALONE}
    others = list(runs.values())

    def alone(name: str) -> Run:  # after the others, with the machine to itself (GRADED_ALONE)
        wait(others)
        return run_notebook(name, core=None)

    runs.update({name: last.submit(alone, name) for name in NAMES if name in wanted and name in GRADED_ALONE})
    try:
        yield runs
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        last.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module", params=NAMES)
def one_kernel_run(request, one_kernel_runs) -> Run:
    return one_kernel_runs[request.param].result()


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
    expected = sorted(answer for answer in run.owners if REFERENCES.get(answer))
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
            if REFERENCES.get(answer):
                missing = [t for t in tests if f'without_references("{answer}")' not in sources[t]]
                assert not missing, f"{name}: these tests of {answer} do not hide its references: {missing}"
                assert answer in DELEGATIONS, f"{name}: no delegation of {answer} to try"
    if not os.environ.get("FEEDGPU_NOTEBOOKS"):  # the whole course: every listed answer is somewhere
        unknown = sorted(set(REFERENCES) - set(answers))
        assert not unknown, f"REFERENCES lists answers that no notebook has: {unknown}"


def test_every_answer_has_an_entry_in_references():
    """Every graded code answer of every notebook is in ``REFERENCES``: with the code that does
    its job (hidden while its tests run), or with the reason nothing does (no kernel needed)."""
    missing, silent = [], []
    for name in NAMES:
        solution = nbformat.read(SOLUTIONS / name / f"{name}.ipynb", 4)
        for c in solution.cells:
            if is_answer(c) and own_tests(solution.cells).get(grade_id(c)):
                entry = REFERENCES.get(grade_id(c))
                if entry is None:
                    missing.append(f"{name}:{grade_id(c)}")
                elif not entry and not (isinstance(entry, NothingToHide) and entry.why.strip()):
                    silent.append(f"{name}:{grade_id(c)}")
    assert not missing, f"these answers have no entry in feedgpu.workflows.grading.testing.REFERENCES: {missing}"
    assert not silent, f"these entries hide nothing and do not say why (use NothingToHide): {silent}"


@pytest.mark.parametrize("name", NAMES)
def test_every_graded_test_fails_for_a_named_wrong_answer(name):
    """Each graded test cell is named by a plausible wrong answer of ``tests/wrong_answers/``,
    which names only tests of its own answer (no kernel needed; the one-kernel run checks
    that each really fails)."""
    solution = nbformat.read(SOLUTIONS / name / f"{name}.ipynb", 4)
    owners = own_tests(solution.cells)
    kept = wrong_answers(name)
    assert all(isinstance(w, WrongAnswer) for w in kept), f"{name}: WRONG_ANSWERS holds something else"
    strays = {f"{w.answer}: {w.mistake}": sorted(w.fails - set(owners.get(w.answer, ())))
              for w in kept if not w.fails or not w.fails <= set(owners.get(w.answer, ()))}
    assert not strays, (f"{name}: these wrong answers name no test, or tests that are not their answer's "
                        f"own (answer: tests): {strays}")
    named = {gid for w in kept for gid in w.fails}
    unnamed = [gid for gid in graded_test_ids(solution) if gid not in named]
    assert not unnamed, (f"{name}: no wrong answer in tests/wrong_answers/nb{name}.py fails these graded tests, "
                         f"so nothing shows they can fail: {unnamed}")
    keys = [f"{w.answer}: {w.mistake}" for w in kept]
    assert len(keys) == len(set(keys)), f"{name}: two wrong answers describe the same mistake"


def test_each_wrong_answer_fails_the_tests_that_name_it(one_kernel_run):
    """In the notebook's kernel, each wrong answer fails every test it names, and those tests
    pass again once the solution is back."""
    run = one_kernel_run
    assert not run.setup_errors, f"{run.name}: set-up cells raised {run.setup_errors}"
    assert not run.wrong_errors, f"{run.name}: these wrong answers do not even run: {run.wrong_errors}"
    passed = {key: sorted(gid for gid, err in tests.items() if err is None)
              for key, tests in run.wrong_caught.items()}
    passed = {key: tests for key, tests in passed.items() if tests}
    assert not passed, f"{run.name}: these tests pass for a wrong answer they should catch: {passed}"
    hidden = {key: {gid: err for gid, err in tests.items() if err and err.startswith("ReferenceHidden")}
              for key, tests in run.wrong_caught.items()}
    hidden = {key: tests for key, tests in hidden.items() if tests}
    assert not hidden, f"{run.name}: these wrong answers fail only because they call a reference: {hidden}"
    stuck = {key: tests for key, tests in run.wrong_not_restored.items() if tests}
    assert not stuck, f"{run.name}: with the solution put back, these tests still fail: {stuck}"


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
