"""feedgpu.workflows.inspection: what happens to a submission before nbgrader grades it.

A tiny assignment is built here with nbformat (an answer cell and two test cells), and
each test hands in one altered copy: the repairs and notes it must cause are stated by
the module's contract (an unknown or repeated id loses its marks, a test cell that was
edited, unlocked or deleted is noted), and each tamper pattern is written out by hand.
An ordinary answer must come through with no flag at all.
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat
import pytest

from feedgpu.workflows.inspection import inspect_and_repair, scan_code

pytestmark = pytest.mark.unit

ANSWER = "def double(x):\n    return 2 * x"
STUB = "def double(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
TEST_A = '"""double doubles."""\nassert double(2) == 4, "2 doubled is 4"'
TEST_B = '"""double keeps the type."""\nassert isinstance(double(1.5), float), "a float stays a float"'
HONEST = ("import math\nimport numpy as np\n\ndef double(x):\n    \"\"\"Twice x.\"\"\"\n"
          "    return 2 * x  # not os._exit, not sys.excepthook: a comment may mention them\n")


def _meta(grade_id: str, *, grade: bool, solution: bool, locked: bool, points: int = 0) -> dict:
    meta = {"grade_id": grade_id, "grade": grade, "solution": solution, "locked": locked,
            "schema_version": 3}
    if grade:
        meta["points"] = points
    return {"nbgrader": meta}


def _release() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# A tiny assignment", metadata=_meta("header", grade=False, solution=False,
                                                                             locked=True)),
        nbformat.v4.new_code_cell("import math", metadata=_meta("setup", grade=False, solution=False, locked=True)),
        nbformat.v4.new_code_cell(STUB, metadata=_meta("double", grade=False, solution=True, locked=False)),
        nbformat.v4.new_code_cell(TEST_A, metadata=_meta("test_double", grade=True, solution=False, locked=True,
                                                         points=1)),
        nbformat.v4.new_code_cell(TEST_B, metadata=_meta("test_double_type", grade=True, solution=False,
                                                         locked=True, points=1)),
        nbformat.v4.new_code_cell("print(double(3))"),  # an ordinary, ungraded cell
    ]
    return nb


def _cell(nb: nbformat.NotebookNode, grade_id: str) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def _answered() -> nbformat.NotebookNode:
    """The release with the answer written: what an honest student hands in."""
    nb = _release()
    _cell(nb, "double").source = ANSWER
    return nb


def _inspect(tmp_path: Path, submitted: nbformat.NotebookNode):
    release = tmp_path / "release.ipynb"
    mine = tmp_path / "submitted.ipynb"
    nbformat.write(_release(), release)
    nbformat.write(submitted, mine)
    return inspect_and_repair(mine, release), nbformat.read(mine, as_version=4)


# --------------------------------------------------------------------------- inspect_and_repair


def test_an_honest_submission_is_neither_noted_nor_flagged_nor_rewritten(tmp_path):
    nb = _answered()
    _cell(nb, "double").source = HONEST
    nb.cells.append(nbformat.v4.new_code_cell("x = [double(i) for i in range(3)]\nprint(x)"))
    report, _ = _inspect(tmp_path, nb)
    assert report.flags == [], f"an ordinary answer must not be flagged: {report.flags}"
    assert report.notes == [], f"nothing was repaired, so nothing is noted: {report.notes}"
    assert report.changed is False, "an honest notebook is not rewritten"


def test_a_renamed_test_cell_loses_its_marks_and_is_noted(tmp_path):
    nb = _answered()
    _cell(nb, "test_double").metadata["nbgrader"]["grade_id"] = "my_own_test"
    report, after = _inspect(tmp_path, nb)
    assert report.changed, "the notebook must be rewritten, or nbgrader stops at the unknown id"
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in after.cells]
    assert "my_own_test" not in ids, f"the unknown id must be gone from the rewritten notebook: {ids}"
    assert any("my_own_test" in note and "does not know" in note for note in report.notes), (
        f"a note must name the unknown id: {report.notes}"
    )
    assert any(note.startswith("test cell test_double ") and "missing" in note for note in report.notes), (
        f"the test cell whose id vanished must be noted as missing (nbgrader restores it): {report.notes}"
    )


def test_a_duplicated_test_cell_id_keeps_the_first_and_unmarks_the_second(tmp_path):
    nb = _answered()
    twin = copy.deepcopy(_cell(nb, "test_double"))
    twin.source = "pass  # my copy"
    twin["id"] = "my-copy"  # a copied cell gets a cell id of its own in Jupyter
    nb.cells.append(twin)
    report, after = _inspect(tmp_path, nb)
    marked = [c for c in after.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_double"]
    assert len(marked) == 1 and marked[0].source == TEST_A, (
        f"only the first cell keeps the id test_double, got {len(marked)} marked cells"
    )
    assert "nbgrader" not in after.cells[-1].metadata, "the repeated cell becomes an ordinary cell"
    assert any("repeats" in note and "test_double" in note for note in report.notes), (
        f"a note must say the id repeats: {report.notes}"
    )
    assert report.changed, "the repair must be written back"


def test_edited_unlocked_and_deleted_test_cells_are_noted(tmp_path):
    nb = _answered()
    _cell(nb, "test_double").source = "pass  # I trust my code"
    _cell(nb, "test_double_type").metadata["nbgrader"]["locked"] = False
    report, _ = _inspect(tmp_path, nb)
    assert any("test_double was edited" in note for note in report.notes), f"edit not noted: {report.notes}"
    assert any("test_double_type was unlocked" in note for note in report.notes), f"unlock not noted: {report.notes}"
    assert report.flags == [], f"an edited test cell is not scanned (the instructor's runs): {report.flags}"

    deleted = _answered()
    deleted.cells.remove(_cell(deleted, "test_double_type"))
    report, _ = _inspect(tmp_path, deleted)
    assert report.notes == ["test cell test_double_type was missing: restored from the assignment"], (
        f"a deleted test cell is noted as missing, and nothing else: {report.notes}"
    )


def test_tampering_in_an_answer_or_an_added_cell_is_flagged_with_its_place(tmp_path):
    nb = _answered()
    _cell(nb, "double").source = HONEST + "\nimport os\nos._exit(0)\n"
    nb.cells.insert(3, nbformat.v4.new_code_cell(
        "ip = get_ipython()\nip.input_transformers_post.append(lambda lines: [])"))
    report, _ = _inspect(tmp_path, nb)
    assert "double: kills or exits the kernel" in report.flags, f"the answer cell's exit: {report.flags}"
    assert "an added cell: changes IPython's input transformers" in report.flags, (
        f"the added cell's transformer: {report.flags}"
    )


def test_an_unchanged_release_cell_is_not_scanned(tmp_path):
    # The release's own code (here the setup cell) is the instructor's: never a flag,
    # whatever it contains.
    nb = _answered()
    report, _ = _inspect(tmp_path, nb)
    assert report.flags == [] and report.notes == [], f"an untouched release: {report.flags} {report.notes}"


def test_an_unreadable_notebook_gives_a_note_and_no_crash(tmp_path):
    release = tmp_path / "release.ipynb"
    nbformat.write(_release(), release)
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{ not json")
    report = inspect_and_repair(broken, release)
    assert len(report.notes) == 1 and "broken.ipynb" in report.notes[0], f"one note naming the file: {report.notes}"
    assert broken.read_text() == "{ not json", "an unreadable file is left as it is"


# --------------------------------------------------------------------------- scan_code


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("ip = get_ipython()\nip.input_transformers_cleanup.append(f)", "changes IPython's input transformers"),
        ("get_ipython().ast_transformers.append(Silence())", "changes IPython's AST transformers"),
        ("import ast\nclass Silence(ast.NodeTransformer):\n    pass", "changes IPython's AST transformers"),
        ("get_ipython().events.register('pre_run_cell', hide)", "registers IPython hooks or magics"),
        ("from IPython.core.magic import register_cell_magic", "registers IPython hooks or magics"),
        ("get_ipython().set_custom_exc((AssertionError,), quiet)", "changes how errors are reported"),
        ("import sys\nsys.excepthook = lambda *a: None", "changes how errors are reported"),
        ("import builtins\nbuiltins.print = lambda *a: None", "modifies builtins"),
        ("__builtins__.len = lambda x: 0", "modifies builtins"),
        ("AssertionError = Exception", "redefines AssertionError"),
        ("(AssertionError, x) = (Warning, 1)", "redefines AssertionError"),
        ("def assert_close(a, b):\n    pass", "redefines an assert helper"),
        ("import numpy as np\nnp.testing.assert_allclose = lambda *a, **k: None", "redefines an assert helper"),
        ("import sys\nsys.settrace(None)", "tampers with the interpreter (trace, modules)"),
        ("import sys\nsys.modules['feedgpu.testing'] = fake", "tampers with the interpreter (trace, modules)"),
        ("import sys\nsys.modules.pop('numpy')", "tampers with the interpreter (trace, modules)"),
        ("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)", "ignores interrupts"),
        ("from signal import signal, SIGINT\nsignal(SIGINT, lambda *a: None)", "ignores interrupts"),
        ("import os\nos._exit(1)", "kills or exits the kernel"),
        ("from os import _exit", "kills or exits the kernel"),
        ("from os import _exit as e\ne(1)", "kills or exits the kernel"),
        ("from os import *\n_exit(1)", "kills or exits the kernel"),
        ("import os\ngetattr(os, '_exit')(1)", "kills or exits the kernel"),
        ("import os as o\no.kill(o.getpid(), 9)", "kills or exits the kernel"),
        ("import os\nquit_now = os.abort\nquit_now()", "kills or exits the kernel"),
        ("__import__('os')._exit(0)", "kills or exits the kernel"),
        ("exec('import os; os._exit(0)')", "kills or exits the kernel"),
    ],
)
def test_scan_code_flags_each_tamper_pattern(source, what):
    found = scan_code(source)
    assert what in found, f"{source!r} should be flagged as {what!r}, found {found}"


@pytest.mark.parametrize(
    "source",
    [
        HONEST,
        "from numpy.testing import assert_allclose\nassert_allclose(double(1.0), 2.0)",
        "import os\nfiles = sorted(os.listdir('.'))\nprint(os.getpid(), os.cpu_count())",
        "import signal\nprint(signal.SIGINT)",
        "text = 'os._exit and sys.excepthook are only words in a string'",
        "# AssertionError = Exception  (a comment)\nassert 1 + 1 == 2, 'arithmetic'",
        "import sys\nprint('numpy' in sys.modules)",
    ],
)
def test_scan_code_does_not_flag_ordinary_code(source):
    assert scan_code(source) == [], f"ordinary code flagged: {source!r} -> {scan_code(source)}"


def test_scan_code_reads_cells_with_magics_and_falls_back_to_regexes():
    with_magics = "%matplotlib inline\n!ls data\nfor i in range(2):\n    %time double(i)\nimport os\nos._exit(0)"
    assert scan_code(with_magics) == ["kills or exits the kernel"], (
        f"magic and shell lines are set aside and the rest read as Python: {scan_code(with_magics)}"
    )
    unparsable = "files = !ls\nos._exit(0)"  # an assigned shell command is not Python
    assert scan_code(unparsable) == ["kills or exits the kernel"], (
        f"a cell that does not parse is searched with the regexes: {scan_code(unparsable)}"
    )


def test_scan_code_reports_each_finding_once_in_a_fixed_order():
    source = "import os\nos._exit(1)\nos.kill(1, 9)\nAssertionError = Exception\nimport builtins"
    assert scan_code(source) == ["modifies builtins", "redefines AssertionError", "kills or exits the kernel"], (
        f"one sentence per kind, in the order of TAMPER_PATTERNS: {scan_code(source)}"
    )
