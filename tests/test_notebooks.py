"""Every solution notebook executes from top to bottom without an error."""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("*/*.ipynb"))
EXECUTED = ROOT / "build" / "executed"


@pytest.mark.slow
@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_solution_notebook_runs(path: Path):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on failure
    seconds = time.perf_counter() - start
    EXECUTED.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, EXECUTED / path.name)  # for a look at the outputs
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, f"{path.name}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
    print(f"{path.name}: {seconds:.1f} s")


def test_there_are_solution_notebooks():
    names = [p.parent.name for p in SOLUTIONS]
    assert "00_orientation" in names and "01_dataset" in names, names
    for p in SOLUTIONS:
        assert p.stem == p.parent.name, f"one notebook per assignment, named like it: {p}"
