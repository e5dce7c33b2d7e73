"""feedgpu.workflows.grading.inspection: what happens to a submission before nbgrader grades it.

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

from feedgpu.workflows.grading.testing import REFERENCES
from feedgpu.workflows.grading.inspection import find_delegations, inspect_and_repair, scan_code
from grading_fixtures import (
    RELEASE,
    SOLUTIONS,
    course_notebooks,
    delegating_version,
    grade_id,
    is_answer,
    student_version,
)

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


#: The tiny assignment's answer and the course code that would do its job (the course's
#: table, feedgpu.workflows.grading.testing.REFERENCES, is used for the real notebooks).
REFS = {"double": ("feedgpu.models.pipeline:steady_state_time_per_batch", "lfw_dataset:LFWDataset")}


def _inspect(tmp_path: Path, submitted: nbformat.NotebookNode, references=None):
    release = tmp_path / "release.ipynb"
    mine = tmp_path / "submitted.ipynb"
    nbformat.write(_release(), release)
    nbformat.write(submitted, mine)
    extra = {} if references is None else {"references": references}
    return inspect_and_repair(mine, release, **extra), nbformat.read(mine, as_version=4)


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


def _layout(nb: nbformat.NotebookNode) -> list[str]:
    """The ids of the marked cells, and '-' for each ordinary cell, in order."""
    return [c.get("metadata", {}).get("nbgrader", {}).get("grade_id", "-") for c in nb.cells]


def test_deleted_test_cells_come_back_where_the_release_has_them(tmp_path):
    """nbgrader's own restoring stops with a KeyError when the cell before a deleted test is a
    locked helper (notebook 06's test_helpers_b): the inspection restores them itself."""
    nb = _answered()
    deleted = [c for c in nb.cells if grade_id(c) not in ("test_double", "test_double_type", "setup")]
    nb.cells = deleted
    nb.cells.insert(1, nbformat.v4.new_code_cell("x = 1  # an experiment of mine"))
    report, after = _inspect(tmp_path, nb)
    assert _layout(after) == ["header", "setup", "-", "double", "test_double", "test_double_type", "-"], (
        f"restored cells must sit where the release has them, around the student's own cells: {_layout(after)}")
    assert [c.source for c in after.cells if grade_id(c) in ("test_double", "test_double_type")] == [TEST_A, TEST_B]
    assert sorted(report.notes) == ["locked cell setup was missing: restored from the assignment",
                                    "test cell test_double was missing: restored from the assignment",
                                    "test cell test_double_type was missing: restored from the assignment"], report.notes
    assert report.changed


def test_a_test_cell_moved_above_its_answer_is_put_back_after_it(tmp_path):
    nb = _answered()
    test = _cell(nb, "test_double_type")
    nb.cells.remove(test)
    nb.cells.insert(0, test)  # first in the notebook: it would run before double exists
    report, after = _inspect(tmp_path, nb)
    assert _layout(after) == _layout(_release()), f"the moved test goes back to its place: {_layout(after)}"
    assert report.notes == ["test cell test_double_type was out of place: put back where the assignment has it"], (
        report.notes)


def test_reordered_answers_stay_where_the_student_put_them(tmp_path):
    """Only cells the student may not change are moved; answers and ordinary cells keep their order."""
    nb = _answered()
    nb.cells.append(nbformat.v4.new_code_cell("double(5)"))
    report, after = _inspect(tmp_path, nb)
    assert report.notes == [] and not report.changed, f"an honest notebook is left alone: {report.notes}"
    ordinary = after.cells.pop()
    after.cells.insert(2, ordinary)  # an ordinary cell moved up: nothing to repair
    report, again = _inspect(tmp_path, after)
    assert report.notes == [] and _layout(again) == _layout(after), report.notes


def test_a_missing_answer_cell_is_noted_not_restored(tmp_path):
    nb = _answered()
    nb.cells.remove(_cell(nb, "double"))
    report, after = _inspect(tmp_path, nb)
    assert "double" not in _layout(after), "there is nothing to restore a student's answer from"
    assert report.notes == ["answer cell double was missing: its tests ran without it"], report.notes


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


def test_an_answer_that_calls_the_course_reference_is_flagged_with_the_reason(tmp_path):
    nb = _answered()
    _cell(nb, "double").source = ("from feedgpu.models.pipeline import steady_state_time_per_batch as s\n\n"
                                  "def double(x):\n    return s(0, x, x)")
    report, _ = _inspect(tmp_path, nb, REFS)
    expected = ("double: uses the course's reference feedgpu.models.pipeline.steady_state_time_per_batch: "
                "an answer must be the student's own")
    assert report.flags == [expected], report.flags
    assert report.notes == [], "a flag changes nothing else"


def test_a_delegation_through_another_cell_is_flagged_where_the_answer_is(tmp_path):
    nb = _answered()
    nb.cells.insert(2, nbformat.v4.new_code_cell("import lfw_dataset\nhelper = lfw_dataset.LFWDataset"))
    _cell(nb, "double").source = "def double(x):\n    return helper(x)"
    report, _ = _inspect(tmp_path, nb, REFS)
    assert "double: uses the course's reference lfw_dataset.LFWDataset: an answer must be the student's own" \
        in report.flags, report.flags
    rebinding = _answered()
    rebinding.cells.append(nbformat.v4.new_code_cell("import feedgpu.models.pipeline as m\ndouble = m.steady_state_time_per_batch"))
    report, _ = _inspect(tmp_path, rebinding, REFS)
    expected = ("an added cell: uses the course's reference feedgpu.models.pipeline.steady_state_time_per_batch: "
                "an answer must be the student's own")
    assert report.flags == [expected], report.flags


def test_an_own_answer_and_an_experiment_with_a_reference_are_not_flagged(tmp_path):
    nb = _answered()
    nb.cells.append(nbformat.v4.new_code_cell(  # comparing with the course's model is no delegation
        "from feedgpu.models.pipeline import steady_state_time_per_batch\nprint(steady_state_time_per_batch(1, 0.1, 0.2))"))
    report, _ = _inspect(tmp_path, nb, REFS)
    assert report.flags == [], report.flags


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
        ("import sys\nsys.modules['feedgpu.workflows.grading.testing'] = fake", "tampers with the interpreter (trace, modules)"),
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
        ("from feedgpu.workflows.grading.testing import REFERENCES\nREFERENCES.clear()", "changes the course's test helpers (feedgpu.workflows.grading.testing)"),
        ("import feedgpu.workflows.grading.testing\nfeedgpu.testing.without_references = None",
         "changes the course's test helpers (feedgpu.workflows.grading.testing)"),
        ("from feedgpu import testing as t\nsetattr(t, 'hidden', print)", "changes the course's test helpers (feedgpu.workflows.grading.testing)"),
        ("import contextlib\nwithout_references = lambda *a: contextlib.nullcontext()",
         "changes the course's test helpers (feedgpu.workflows.grading.testing)"),
        ("def standing_in(namespace, **kw):\n    yield", "changes the course's test helpers (feedgpu.workflows.grading.testing)"),
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
        "from feedgpu.workflows.grading.testing import standing_in, without_references\nwith without_references('x'):\n    pass",
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


# --------------------------------------------------------------------------- find_delegations

MODEL = "feedgpu.models.pipeline:steady_state_time_per_batch"
IMPORTS = ("import lfw_dataset\nfrom feedgpu.models.pipeline import simulate, steady_state_time_per_batch\n"
           "from feedgpu.models.copies import LinearCost")


@pytest.mark.parametrize(
    ("source", "reference"),
    [
        ("time_per_batch = steady_state_time_per_batch", MODEL),  # the imports cell's name
        ("from feedgpu.models.pipeline import steady_state_time_per_batch as f", MODEL),
        ("import feedgpu.models.pipeline as m\ndef f(*a):\n    return m.steady_state_time_per_batch(*a)", MODEL),
        ("from feedgpu.workflows.grading.testing import steady_state_time_per_batch", MODEL),  # re-exported
        ("import importlib\nf = importlib.import_module('feedgpu.models.pipeline').steady_state_time_per_batch", MODEL),
        ("import feedgpu.models.pipeline\nf = getattr(feedgpu.models.pipeline, 'steady_state_time_per_batch')", MODEL),
        ("from feedgpu.models.pipeline import *\ndef f(*a):\n    return steady_state_time_per_batch(*a)", MODEL),
        ("def find_people(root):\n    return lfw_dataset.find_classes(root)", "lfw_dataset:find_classes"),
        ("class FacesDataset(lfw_dataset.LFWDataset):\n    pass", "lfw_dataset:LFWDataset"),
        ("def t(n, l, b):\n    return LinearCost(l, b).time_s(n)", "feedgpu.models.copies:LinearCost.time_s"),
        # a library's function that the exercise rebuilds, through the package that re-exports it
        ("from torch.utils.data import DistributedSampler\ndef s(ids, r, w):\n"
         "    return list(DistributedSampler(ids, num_replicas=w, rank=r))",
         "torch.utils.data.distributed:DistributedSampler"),
        ("import torchvision\nclass FacesDataset(torchvision.datasets.ImageFolder):\n    pass",
         "torchvision.datasets.folder:ImageFolder"),
        ("from torchvision.datasets.folder import find_classes as find_people",
         "torchvision.datasets.folder:find_classes"),
    ],
)
def test_find_delegations_finds_each_way_of_reaching_a_reference(source, reference):
    found = find_delegations(source, [reference], context=[IMPORTS])
    assert found == [reference.replace(":", ".")], f"{source!r}: {found}"


@pytest.mark.parametrize(
    "source",
    [
        "def time_per_batch(w, load_s, step_s):\n    return load_s + step_s if w == 0 else max(step_s, load_s / w)",
        "def f(root):\n    samples = lfw_dataset.find_classes_of_mine(root)\n    return samples",
        "text = 'steady_state_time_per_batch is only a word here'  # lfw_dataset.find_classes",
        "def find_classes(root):\n    return sorted(root)\nfind_classes('ab')",  # the student's own, same name
        "x = simulate(1, 0.1, 0.2).total_s",  # another function of the same module
        "def f(root):\n    return lfw_dataset.find_classes(root)",  # the course's, not the library's
        "import torch.utils.data as d\nx = d.DataLoader(range(3))",  # another class of the same package
    ],
)
def test_find_delegations_leaves_own_code_alone(source):
    references = [MODEL, "feedgpu.models.copies:LinearCost.time_s", "torchvision.datasets.folder:find_classes",
                  "torch.utils.data.distributed:DistributedSampler"]
    assert find_delegations(source, references, context=[IMPORTS]) == [], source


# --------------------------------------------------------------------------- the course's notebooks


@pytest.mark.parametrize("name", course_notebooks())
def test_the_course_delegations_are_flagged_and_its_solutions_are_not(tmp_path, name):
    """With the course's table of references: each answer of the delegating version of a
    notebook (tests/grading_fixtures.py) is flagged, once, with its reference; the solution
    is neither flagged nor noted."""
    solution = nbformat.read(SOLUTIONS / name / f"{name}.ipynb", 4)
    release = RELEASE / name / f"{name}.ipynb"
    released = nbformat.read(release, 4)
    mine = tmp_path / f"{name}.ipynb"
    nbformat.write(student_version(solution, released), mine)
    report = inspect_and_repair(mine, release)
    assert report.flags == [] and report.notes == [], f"{name}: the solution: {report.flags} {report.notes}"
    nbformat.write(delegating_version(solution, released), mine)
    flagged = [flag.split(":")[0] for flag in inspect_and_repair(mine, release).flags]
    delegated = [grade_id(c) for c in solution.cells if is_answer(c) and REFERENCES.get(grade_id(c))]
    assert flagged == delegated, f"{name}: flagged {flagged}, delegated {delegated}"
