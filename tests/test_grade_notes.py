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
