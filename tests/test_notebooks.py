"""The course's notebooks: one per assignment, named like it, in solutions/ and notebooks/.

That every solution notebook executes without an error is checked where nbgrader runs
them anyway (tests/test_nbgrader_pipeline.py), so each runs once per test session.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("*/*.ipynb"))


def test_there_are_solution_notebooks():
    names = [p.parent.name for p in SOLUTIONS]
    assert "00_orientation" in names and "01_dataset" in names, names
    for p in SOLUTIONS:
        assert p.stem == p.parent.name, f"one notebook per assignment, named like it: {p}"


def test_solutions_are_saved_without_outputs():
    for p in SOLUTIONS:
        nb = nbformat.read(p, as_version=4)
        with_outputs = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.outputs]
        assert not with_outputs, f"{p.name}: clear the outputs of cells {with_outputs}"
        assert nb.metadata.get("kernelspec", {}).get("name") == "python3", p.name


def test_every_notebook_opens_with_goals_and_ends_with_a_reflection():
    for p in SOLUTIONS:
        cells = nbformat.read(p, as_version=4).cells
        first, last = cells[0].source.lower(), cells[-1]
        assert "time needed" in first, f"{p.name}: say how long it takes, first"
        assert any(w in first for w in ("goal", "you will", "in this notebook you")), \
            f"{p.name}: state the learning goals first"
        meta = last.metadata.get("nbgrader", {})
        assert last.cell_type == "markdown" and meta.get("grade") and meta.get("solution"), \
            f"{p.name}: end with a manually graded reflection"
