"""How nbgrader runs a submission's cells when it grades: its ``Execute``, with one change.

nbgrader gives every cell the same time limit (``--cell-timeout``, 120 s): a cell that runs
past it is interrupted, and the next cell starts. An answer that loops forever when it is
*called* then costs that limit once for every test that calls it. Here a runaway cell costs
its limit once per notebook: after the first cell that ran past the limit, the rest of
the notebook shares one more limit. A notebook whose other cells take less than the limit
together (the course's take 90 s at most, whole) runs them all as before, so no score of
a submission changes but the time a broken one costs: at most twice the limit, plus the
notebook's own time, instead of the limit times the tests.

The course's ``nbgrader_config.py`` puts :class:`OneRunawayExecute` in place of nbgrader's
``Execute`` in ``Autograde.autograde_preprocessors``.
"""

from __future__ import annotations

import time

from nbgrader.preprocessors import Execute


class OneRunawayExecute(Execute):
    """nbgrader's ``Execute``; after one cell runs past its limit, the cells that follow
    share one more limit (each gets what is left of it, at least a second)."""

    def preprocess(self, nb, resources=None, km=None):
        self.left_s: float | None = None  # None until a cell ran past its limit
        self._counting = False  # whether the cell now running spends what is left
        self.limits_s: list[int | None] = []  # the limit each code cell got, in order (for the tests)
        return super().preprocess(nb, resources, km)

    def _get_timeout(self, cell):
        timeout = super()._get_timeout(cell)
        left = getattr(self, "left_s", None)
        if timeout is not None and left is not None:
            timeout = max(1, min(timeout, int(left)))
        return timeout

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code":
            self.limits_s.append(self._get_timeout(cell))
        start = time.monotonic()
        try:
            return super().preprocess_cell(cell, resources, index)
        finally:
            if self.left_s is not None and self._counting:
                self.left_s = max(0.0, self.left_s - (time.monotonic() - start))
            self._counting = self.left_s is not None  # the cell that timed out does not count

    async def _async_handle_timeout(self, timeout, cell=None):
        if self.left_s is None:
            self.left_s = float(self.timeout or timeout)  # one more limit, for the rest
            self._counting = False
            why = f"this cell ran past its time limit of {timeout} s and was interrupted"
        else:
            self.left_s = 0.0  # a second runaway: what was left is spent
            why = (f"this cell ran past the {timeout} s left of the time the cells after a runaway cell "
                   "share, and was interrupted")
        self.error_on_timeout = {"ename": "CellTimeoutError", "evalue": why,
                                 "traceback": [f"\x1b[0;31mCellTimeoutError\x1b[0m: {why}"]}
        return await super()._async_handle_timeout(timeout, cell)
