"""Notebook 01's autograded tests catch the mistakes students really make.

For each mistake we build a *mutant* of the solution notebook: the solution cell of one
function is replaced by a buggy version written below. A mutant runs only what grading
needs (the import, configuration and test-helper cells, the solution cells and the test
cells; not the demos), in a fresh kernel of its own. We then check that at least one of the
test cells written for that mistake fails, that the correct solution passes every test
cell, and that the untouched release (solution bodies replaced by
``raise NotImplementedError()``, as nbgrader does) fails every test cell.

The kernels run two at a time: starting one and importing torch costs a few seconds, and
most of that is CPU work of a single process.
"""

from __future__ import annotations

import asyncio
import copy
import os
import re
import textwrap
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "solutions" / "01_dataset" / "01_dataset.ipynb"
SETUP_CELLS = ("imports", "config", "test_helpers")
CELL_TIMEOUT_S = 120
PARALLEL_KERNELS = max(1, min(2, os.cpu_count() or 1))


# --------------------------------------------------------------------------- the mutants


def _src(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


FIND_PEOPLE = '''
def find_people(root):
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"no such folder: {{root}}")
    {body}
    return classes, class_to_idx
'''


def find_people_with(body: str) -> str:
    return _src(FIND_PEOPLE).format(body=textwrap.indent(_src(body), " " * 4).lstrip())


LIST_IMAGES = '''
def list_images(root, class_to_idx):
    samples = []
    for person in sorted(class_to_idx):
        folder = os.path.join(root, person)
        for name in {listing}:
            if {keep}:
                samples.append((os.path.join(folder, name), class_to_idx[person]))
    return samples
'''

GOOD_LISTING = "sorted(os.listdir(folder))"
GOOD_KEEP = 'not name.startswith(".") and name.lower().endswith(IMG_EXTENSIONS)'


def list_images_with(listing: str = GOOD_LISTING, keep: str = GOOD_KEEP) -> str:
    return _src(LIST_IMAGES).format(listing=listing, keep=keep)


DATASET = '''
class FacesDataset(Dataset):
    def __init__(self, root, transform=None):
        self.root = root
        self.transform = transform
        self.classes, self.class_to_idx = find_people(root)
        self.samples = list_images(root, self.class_to_idx)
        self.targets = [label for _, label in self.samples]
        {init_extra}

    def __len__(self):
        return {length}

    def __getitem__(self, index):
        {getitem}
'''

GOOD_GETITEM = '''
path, label = self.samples[index]
image = load_rgb(path)
if self.transform is not None:
    image = self.transform(image)
return image, label
'''


def dataset_with(init_extra: str = "pass", length: str = "len(self.samples)",
                 getitem: str = GOOD_GETITEM) -> str:
    def body(code: str) -> str:
        return textwrap.indent(_src(code), " " * 8).lstrip()

    return _src(DATASET).format(init_extra=body(init_extra), length=length, getitem=body(getitem))


# name -> (solution cell replaced, its buggy source, the test cells meant to catch it)
MUTANTS: dict[str, tuple[str, str, set[str]]] = {
    "labels in os.listdir order": (
        "find_people",
        find_people_with('''
            classes = [n for n in os.listdir(root) if (root / n).is_dir() and not n.startswith(".")]
            class_to_idx = {name: i for i, name in enumerate(classes)}
        '''),
        {"test_find_people_sorted"},
    ),
    "labels sorted ignoring case": (
        "find_people",
        find_people_with('''
            classes = sorted((n for n in os.listdir(root) if (root / n).is_dir() and not n.startswith(".")),
                             key=str.lower)
            class_to_idx = {name: i for i, name in enumerate(classes)}
        '''),
        {"test_find_people_sorted"},
    ),
    "labels in set order (unstable between runs)": (
        "find_people",
        find_people_with('''
            classes = list({n for n in os.listdir(root) if (root / n).is_dir() and not n.startswith(".")})
            class_to_idx = {name: i for i, name in enumerate(classes)}
        '''),
        {"test_find_people_sorted"},
    ),
    "labels start at 1": (
        "find_people",
        find_people_with('''
            classes = sorted(n for n in os.listdir(root) if (root / n).is_dir() and not n.startswith("."))
            class_to_idx = {name: i for i, name in enumerate(classes, start=1)}
        '''),
        {"test_find_people_labels_from_zero"},
    ),
    "files and hidden folders taken for people": (
        "find_people",
        find_people_with('''
            classes = sorted(os.listdir(root))
            class_to_idx = {name: i for i, name in enumerate(classes)}
        '''),
        {"test_find_people_ignores_files_and_hidden"},
    ),
    "every file counted as an image": (
        "list_images", list_images_with(keep="True"),
        {"test_list_images_count", "test_dataset_len"},
    ),
    "image endings compared case-sensitively": (
        "list_images",
        list_images_with(keep='not name.startswith(".") and name.endswith(IMG_EXTENSIONS)'),
        {"test_list_images_count"},
    ),
    "files in os.listdir order": (
        "list_images", list_images_with(listing="os.listdir(folder)"),
        {"test_list_images_sorted_with_labels"},
    ),
    "image not converted to RGB": (
        "load_rgb",
        _src('''
            def load_rgb(path):
                with Image.open(path) as image:
                    image.load()
                    return image.copy()
        '''),
        {"test_load_rgb_grayscale", "test_load_rgb_rgba"},
    ),
    "length counts people": (
        "faces_dataset", dataset_with(length="len(self.classes)"),
        {"test_dataset_len"},
    ),
    "__getitem__ opens the file without RGB conversion": (
        "faces_dataset",
        dataset_with(getitem='''
            path, label = self.samples[index]
            image = Image.open(path)
            if self.transform is not None:
                image = self.transform(image)
            return image, label
        '''),
        {"test_dataset_items", "test_dataset_to_tensor", "test_dataset_applies_transform"},
    ),
    "transform not applied": (
        "faces_dataset",
        dataset_with(getitem='''
            path, label = self.samples[index]
            return load_rgb(path), label
        '''),
        {"test_dataset_applies_transform", "test_dataset_to_tensor"},
    ),
    "tensor in height x width x channels order": (
        "faces_dataset",
        dataset_with(getitem='''
            path, label = self.samples[index]
            image = load_rgb(path)
            if self.transform is not None:
                image = self.transform(image)
                if isinstance(image, torch.Tensor):
                    image = image.permute(1, 2, 0)  # "channels last, like numpy"
            return image, label
        '''),
        {"test_dataset_to_tensor"},
    ),
    "label off by one in __getitem__": (
        "faces_dataset",
        dataset_with(getitem='''
            path, label = self.samples[index]
            image = load_rgb(path)
            if self.transform is not None:
                image = self.transform(image)
            return image, label + 1
        '''),
        {"test_dataset_items"},
    ),
    "open file handles kept as attributes": (
        "faces_dataset",
        dataset_with(
            init_extra='self.files = [open(path, "rb") for path, _ in self.samples]',
            getitem='''
                file = self.files[index]
                file.seek(0)
                image = Image.open(file).convert("RGB")
                if self.transform is not None:
                    image = self.transform(image)
                return image, self.samples[index][1]
            ''',
        ),
        {"test_dataset_pickles"},
    ),
    "a generator kept as an attribute": (
        "faces_dataset",
        dataset_with(
            init_extra="self.upcoming = (sample for sample in self.samples)",
            getitem='''
                path, label = next(self.upcoming)
                image = load_rgb(path)
                if self.transform is not None:
                    image = self.transform(image)
                return image, label
            ''',
        ),
        {"test_dataset_pickles", "test_dataset_with_workers"},
    ),
}


# --------------------------------------------------------------------------- running them


def _nbgrader(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def _is_solution(cell) -> bool:
    return cell.cell_type == "code" and bool(_nbgrader(cell).get("solution"))


def _is_test(cell) -> bool:
    return cell.cell_type == "code" and bool(_nbgrader(cell).get("grade"))


def _grading_notebook(replace: dict[str, str] | None = None):
    """The solution notebook cut down to what grading runs, with some solution cells replaced."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    replace = dict(replace or {})
    cells = []
    for cell in nb.cells:
        grade_id = _nbgrader(cell).get("grade_id")
        if cell.cell_type != "code":
            continue
        if grade_id in SETUP_CELLS or _is_test(cell) or _is_solution(cell):
            cell = copy.deepcopy(cell)
            if grade_id in replace:
                cell.source = replace.pop(grade_id)
            cells.append(cell)
    assert not replace, f"no solution cells with grade_ids {sorted(replace)} in {NOTEBOOK}"
    nb.cells = cells
    return nb


def _release_source(source: str) -> str:
    """What nbgrader leaves of a solution cell: each solution region becomes a stub."""
    pattern = re.compile(r"^([ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION[ \t]*$", re.S | re.M)
    stubbed, n = pattern.subn(lambda m: f"{m.group(1)}# YOUR CODE HERE\n{m.group(1)}raise NotImplementedError()", source)
    assert n, f"no solution region in:\n{source}"
    return stubbed


def _release_notebook():
    nb = _grading_notebook()
    for cell in nb.cells:
        if _is_solution(cell):
            cell.source = _release_source(cell.source)
    return nb


def _errors(nb) -> dict[str, str]:
    """grade_id (or cell index) -> 'Error: message' for every cell that raised."""
    found = {}
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                found[_nbgrader(cell).get("grade_id", str(i))] = f"{out.ename}: {out.evalue}"[:200]
    return found


async def _execute_all(notebooks: dict[str, object]) -> dict[str, dict[str, str]]:
    gate = asyncio.Semaphore(PARALLEL_KERNELS)

    async def one(name, nb):
        async with gate:
            client = NotebookClient(
                nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", allow_errors=True,
                shutdown_kernel="immediate",
                resources={"metadata": {"path": str(NOTEBOOK.parent)}},
            )
            await client.async_execute()
        return name, _errors(nb)

    pairs = await asyncio.gather(*(one(name, nb) for name, nb in notebooks.items()))
    return dict(pairs)


@pytest.fixture(scope="module")
def outcomes() -> dict[str, dict[str, str]]:
    """Run the correct notebook, the release and every mutant; errors of each, by cell."""
    notebooks = {"correct": _grading_notebook(), "release": _release_notebook()}
    for name, (cell_id, source, _) in MUTANTS.items():
        notebooks[name] = _grading_notebook({cell_id: source})
    results = asyncio.run(_execute_all(notebooks))
    for name, errors in results.items():  # shown with `pytest -s`: which tests caught what
        print(f"{name:<52} fails {len(errors):>2}: {', '.join(sorted(errors)) or '-'}")
    return results


def _test_ids() -> list[str]:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    return [_nbgrader(c)["grade_id"] for c in nb.cells if _is_test(c)]


def test_mutants_target_existing_test_cells():
    ids = set(_test_ids())
    for name, (_, _, designed) in MUTANTS.items():
        assert designed <= ids, f"mutant {name!r} names test cells that do not exist: {sorted(designed - ids)}"


def test_correct_solution_passes_every_test(outcomes):
    errors = outcomes["correct"]
    assert not errors, f"the solution notebook fails these cells: {errors}"


def test_release_fails_every_test(outcomes):
    errors = outcomes["release"]
    setup_errors = {k: v for k, v in errors.items() if k in SETUP_CELLS}
    assert not setup_errors, f"the release's setup cells fail: {setup_errors}"
    passing = [grade_id for grade_id in _test_ids() if grade_id not in errors]
    assert not passing, f"these tests pass on the untouched release (no student code): {passing}"


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_mistake_is_caught(outcomes, mutant):
    cell_id, _, designed = MUTANTS[mutant]
    errors = outcomes[mutant]
    tests = set(_test_ids())
    broken_setup = {k: v for k, v in errors.items() if k not in tests}
    assert not broken_setup, f"mutant {mutant!r} does not even define its code: {broken_setup}"
    caught = designed & set(errors)
    assert caught, (
        f"mistake {mutant!r} (in {cell_id}) passes the tests meant to catch it, {sorted(designed)}; "
        f"tests that failed: {sorted(errors)}"
    )
