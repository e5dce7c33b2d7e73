"""Each answer is graded on its own, in every notebook.

For each solution cell, the release's stub (``raise NotImplementedError()``) replaces it
while every other answer stays solved: exactly the test cells that follow it (up to the
next solution cell) must fail, and no other. So a student who leaves one answer out loses
exactly that answer's points, and the untouched release scores zero.

To stay quick, one kernel per notebook runs only what grading needs: the locked set-up
cells (imports, configuration, test helpers), the answers and the tests; the
demonstrations in between are skipped.
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NAMES = sorted(p.name for p in (ROOT / "solutions").iterdir() if list(p.glob("*.ipynb")))

pytestmark = pytest.mark.slow


def _meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def _is_test(cell) -> bool:
    return cell.cell_type == "code" and _meta(cell).get("grade") and not _meta(cell).get("solution")


def _is_answer(cell) -> bool:
    return cell.cell_type == "code" and bool(_meta(cell).get("solution"))


def _is_setup(cell) -> bool:
    m = _meta(cell)
    return cell.cell_type == "code" and bool(m) and m.get("locked") and not m.get("grade") and not m.get("solution")


def own_tests(cells) -> dict[str, list[str]]:
    """For each answer's grade id, the grade ids of the tests that follow it."""
    owner, out = None, {}
    for cell in cells:
        if _is_answer(cell):
            owner = _meta(cell)["grade_id"]
            out[owner] = []
        elif _is_test(cell) and owner:
            out[owner].append(_meta(cell)["grade_id"])
    return out


def failing_tests(client: NotebookClient, cells, stub: dict[str, str]) -> set[str]:
    """Run answers (with ``stub`` sources in place) and tests; the ids of tests that raised."""
    failed = set()
    for index, original in enumerate(cells):
        if not (_is_answer(original) or _is_test(original)):
            continue
        cell = copy.deepcopy(original)
        cell.source = stub.get(_meta(cell)["grade_id"], cell.source)
        client.execute_cell(cell, index)
        if _is_test(cell) and any(o.get("output_type") == "error" for o in cell.outputs):
            failed.add(_meta(cell)["grade_id"])
    return failed


@pytest.mark.parametrize("name", NAMES)
def test_each_answer_is_graded_alone(name):
    solution = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", 4)
    release = nbformat.read(ROOT / "notebooks" / name / f"{name}.ipynb", 4)
    stubs = {_meta(c)["grade_id"]: c.source for c in release.cells if _is_answer(c)}
    owners = own_tests(solution.cells)
    assert owners and all(owners.values()), f"{name}: every answer needs tests after it: {owners}"
    runnable = [c for c in solution.cells if _is_setup(c) or _is_answer(c) or _is_test(c)]
    skeleton = nbformat.v4.new_notebook(cells=runnable, metadata=solution.metadata)
    client = NotebookClient(skeleton, timeout=180, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(ROOT / "solutions" / name)}})
    cells = copy.deepcopy(skeleton.cells)  # nbclient writes executed cells back into skeleton
    with client.setup_kernel():
        for index, cell in enumerate(cells):
            if _is_setup(cell):
                cell = copy.deepcopy(cell)
                client.execute_cell(cell, index)
                errors = [o for o in cell.outputs if o.get("output_type") == "error"]
                assert not errors, f"{name}: set-up cell {_meta(cell)['grade_id']} raised {errors[0]['ename']}"
        assert failing_tests(client, cells, {}) == set(), f"{name}: the solution fails its own tests"
        for answer, tests in owners.items():
            got = failing_tests(client, cells, {answer: stubs[answer]})
            assert got == set(tests), (f"{name}: with {answer} left out, these tests failed: {sorted(got)}; "
                                       f"expected exactly its own: {sorted(tests)}")
