"""What `feedgpu-grade` tells the instructor about the cells of a graded notebook."""

from __future__ import annotations

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from feedgpu.workflows.grading import grade, submission


def _cell(grade_id: str, outputs: list, graded: bool = True):
    cell = new_code_cell("pass", outputs=outputs)
    cell.metadata["nbgrader"] = {"grade_id": grade_id, "grade": graded, "points": 1 if graded else 0}
    return cell


def _notes(tmp_path, *cells) -> list[str]:
    path = tmp_path / "graded.ipynb"
    nbformat.write(new_notebook(cells=list(cells)), path)
    return submission.cell_errors(path, cell_timeout=30)


def warning(text="UserWarning: This DataLoader will create 2 worker processes"):
    return new_output("stream", name="stderr", text=text + "\n")


def test_a_test_cell_that_only_wrote_to_stderr_is_explained(tmp_path):
    notes = _notes(tmp_path, _cell("test_loader", [new_output("stream", name="stdout", text="ok\n"), warning()]))
    assert len(notes) == 1 and notes[0].startswith("test_loader passed but scored 0"), notes
    assert "This DataLoader will create" in notes[0], "the note quotes what was written"


def test_stderr_outside_graded_cells_costs_nothing_and_is_not_noted(tmp_path):
    notes = _notes(tmp_path, _cell("plot_sweep", [warning()], graded=False),
                   _cell("test_quiet", [new_output("stream", name="stdout", text="fine\n")]))
    assert notes == [], f"stderr of an ungraded cell and stdout of a test cost nothing: {notes}"


def test_errors_are_noted_once_per_cell(tmp_path):
    timeout = new_output("error", ename="CellTimeoutError", evalue="", traceback=[])
    raised = new_output("error", ename="NameError", evalue="x", traceback=[])
    failed_test = new_output("error", ename="AssertionError", evalue="", traceback=[])
    notes = _notes(tmp_path, _cell("answer_slow", [timeout], graded=False),
                   _cell("answer_broken", [warning(), raised], graded=False),
                   _cell("test_answer", [warning(), failed_test]))
    assert notes == ["answer_slow ran past the 30 s limit per cell", "answer_broken raised NameError"], (
        "a failed test is in the feedback already, and its stderr is not the reason it failed")


@pytest.mark.parametrize("jobs", [0, -1, 1.5])
def test_grade_class_rejects_a_bad_number_of_jobs(tmp_path, jobs):
    """--jobs must be a whole number >= 1; nothing is graded or created otherwise."""
    with pytest.raises(ValueError, match="jobs"):
        grade.grade_class(tmp_path, tmp_path / "grading", jobs=jobs)
    assert not (tmp_path / "grading").exists(), "a rejected run must leave no grading folder"


#: nbgrader's output when the kernel ended before its first reply (seen on a fresh clone,
#: two submissions graded at once in a network namespace of their own).
NEVER_STARTED = ("[AutogradeApp | ERROR] There was an error processing assignment: ...\n"
                 "RuntimeError: Kernel died before replying to kernel_info\n")


@pytest.mark.parametrize("outcomes, runs, status", [
    ([(1, NEVER_STARTED), (0, "")], 2, "graded"),  # graded again, once, and graded
    ([(1, NEVER_STARTED), (1, NEVER_STARTED)], 2, "failed"),  # once only
    ([(1, "nbclient.exceptions.DeadKernelError: Kernel died")], 1, "failed"),  # died running the student's cells
    ([(None, NEVER_STARTED, "time")], 1, "failed"),  # stopped by a limit: the limit says why
])
def test_a_submission_whose_kernel_never_started_is_graded_again_once(monkeypatch, tmp_path, outcomes, runs, status):
    """A kernel that ended before it answered its first request ran nothing of the
    student's: the submission is graded again, once, with a note; a kernel that died while
    running the notebook, or a limit, is the grade."""
    from feedgpu.workflows.grading.sandbox import Outcome

    (tmp_path / "submitted_in" / "ann" / "a1").mkdir(parents=True)
    given = [Outcome(code, text, "", 1.0, 100.0, 3, *rest) for code, text, *rest in outcomes]
    calls = []

    def run_limited(cmd, limits, **kwargs):
        calls.append(cmd)
        return given[len(calls) - 1]

    monkeypatch.setattr(submission, "run_limited", run_limited)
    monkeypatch.setattr(submission, "read_scores", lambda *a: submission.Result("ann", "a1", "graded", 5.0, 8.0))
    monkeypatch.setattr(submission, "failed", lambda w, s, a, why: submission.Result(s, a, "failed", 0.0, reason=why))
    result = submission.grade_one(tmp_path / "work", tmp_path / "submitted_in", "ann", "a1",
                                  submission.Limits(), cell_timeout=30)
    assert len(calls) == runs and result.status == status, (calls, result)
    again = [n for n in result.notes if "graded again" in n]
    assert len(again) == (1 if outcomes[0][1] == NEVER_STARTED and runs == 2 else 0), result.notes
