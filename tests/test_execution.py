"""A runaway cell costs its time limit once per notebook when nbgrader grades it
(``feedgpu.workflows.grading.execution``), and a notebook without one runs as before.

The limits each cell got are read from the preprocessor, not timed: the cells' costs are
known (a loop that never ends, a sleep of half a second).
"""

from __future__ import annotations

import nbformat
import pytest

from feedgpu.workflows.grading.execution import OneRunawayExecute

pytestmark = pytest.mark.slow  # a Jupyter kernel and a few interrupted loops: seconds

LOOP = "while True:\n    pass"


def _run(sources: list[str], limit: int, tmp_path) -> tuple[OneRunawayExecute, list]:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    ex = OneRunawayExecute(timeout=limit, kernel_name="python3")
    ex.preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    errors = [next((o.get("ename") for o in c.outputs if o.get("output_type") == "error"), None) for c in nb.cells]
    return ex, errors


def test_after_one_runaway_the_rest_share_one_more_limit(tmp_path):
    ex, errors = _run(["x = 1", LOOP, "import time\ntime.sleep(0.5)", LOOP, LOOP, "y = x + 1"], 3, tmp_path)
    assert ex.limits_s[:3] == [3, 3, 3], f"the full limit until a cell runs away, then what is left: {ex.limits_s}"
    assert 1 <= ex.limits_s[3] <= 3, f"what the sleep left of the shared limit: {ex.limits_s}"
    assert ex.limits_s[4:] == [1, 1], f"a second runaway spends the rest: {ex.limits_s}"
    assert errors[0] is None and errors[2] is None and errors[5] is None, f"the other cells ran: {errors}"
    assert all(errors[i] is not None for i in (1, 3, 4)), f"each runaway was stopped: {errors}"


def test_without_a_runaway_every_cell_gets_the_full_limit(tmp_path):
    ex, errors = _run(["x = 1", "import time\ntime.sleep(0.2)", "y = x + 1"], 3, tmp_path)
    assert ex.limits_s == [3, 3, 3] and errors == [None, None, None], (ex.limits_s, errors)
