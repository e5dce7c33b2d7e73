"""Notebook 01's autograded tests catch the mistakes students really make.

For each mistake, a *mutant*: the solution cell of one function replaced by a buggy
version written below. Everything runs in ONE kernel: the set-up cells (imports,
configuration, test helpers) and the solution cells run once, and every test cell passes
on the solution; then, for each mutant, its buggy cell is run in place of the solution
cell, the test cells written for that mistake are run (at least one must fail), the
solution cell is run again, and the same test cells must pass again: so a mistake is
caught by the tests, not by something an earlier mutant left behind. The untouched
release fails every test cell: tests/test_answers_graded_alone.py checks that, for every
notebook.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

import nbformat
import pytest

from grading_fixtures import SOLUTIONS, OneKernel, error_of, grade_id, graded_test_ids, is_answer, is_setup

pytestmark = pytest.mark.notebook

NOTEBOOK = SOLUTIONS / "01_dataset" / "01_dataset.ipynb"
CELL_TIMEOUT_S = 120


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
    "images opened lazily in __init__ and kept (one file handle each)": (
        "faces_dataset",
        dataset_with(init_extra="self.images = [Image.open(path) for path, _ in self.samples]", getitem='''
            image = self.images[index].convert("RGB")
            if self.transform is not None:
                image = self.transform(image)
            return image, self.samples[index][1]
        '''),
        {"test_dataset_pickles"},
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


@dataclass
class Outcomes:
    """What happened in the one kernel."""

    setup_errors: dict[str, str] = field(default_factory=dict)  # set-up or solution cell -> error
    correct_failed: dict[str, str] = field(default_factory=dict)  # test -> error, on the solution
    mutant_errors: dict[str, str] = field(default_factory=dict)  # mutant -> error of its own cell
    caught: dict[str, dict[str, str]] = field(default_factory=dict)  # mutant -> failed test -> error
    not_restored: dict[str, dict[str, str]] = field(default_factory=dict)  # mutant -> test failing after


@pytest.fixture(scope="module")
def mistakes() -> Outcomes:
    """Set up once, then swap each mutant in, run its tests, and put the solution back."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    by_id = {grade_id(c): c for c in nb.cells if grade_id(c)}
    found = Outcomes()
    with OneKernel(NOTEBOOK.parent, timeout=CELL_TIMEOUT_S) as kernel:
        for c in nb.cells:
            if is_setup(c) or is_answer(c):
                err = error_of(kernel.run(c.source))
                if err:
                    found.setup_errors[grade_id(c)] = err
        if found.setup_errors:
            return found
        for gid in graded_test_ids(nb):
            err = error_of(kernel.run(by_id[gid].source))
            if err:
                found.correct_failed[gid] = err
        for name, (cell_id, source, designed) in MUTANTS.items():
            err = error_of(kernel.run(source))
            if err:
                found.mutant_errors[name] = err
            found.caught[name] = {}
            for gid in sorted(designed & set(by_id)):
                err = error_of(kernel.run(by_id[gid].source))
                if err:
                    found.caught[name][gid] = err
            kernel.run_ok(by_id[cell_id].source, f"the solution of {cell_id} (put back)")
            after = {gid: error_of(kernel.run(by_id[gid].source)) for gid in sorted(designed & set(by_id))}
            found.not_restored[name] = {gid: err for gid, err in after.items() if err}
    for name, errors in found.caught.items():  # shown with `pytest -s`: which tests caught what
        print(f"{name:<52} caught by {', '.join(sorted(errors)) or '-'}")
    return found


def test_mutants_target_existing_test_cells():
    ids = set(graded_test_ids(nbformat.read(NOTEBOOK, as_version=4)))
    for name, (_, _, designed) in MUTANTS.items():
        assert designed <= ids, f"mutant {name!r} names test cells that do not exist: {sorted(designed - ids)}"


def test_correct_solution_passes_every_test(mistakes):
    assert not mistakes.setup_errors, f"set-up or solution cells raised {mistakes.setup_errors}"
    assert not mistakes.correct_failed, f"the solution notebook fails these tests: {mistakes.correct_failed}"


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_mistake_is_caught(mistakes, mutant):
    cell_id, _, designed = MUTANTS[mutant]
    assert not mistakes.setup_errors, f"set-up or solution cells raised {mistakes.setup_errors}"
    assert mutant not in mistakes.mutant_errors, \
        f"mutant {mutant!r} does not even define its code: {mistakes.mutant_errors.get(mutant)}"
    caught = mistakes.caught[mutant]
    assert caught, (f"mistake {mutant!r} (in {cell_id}) passes the tests meant to catch it, "
                    f"{sorted(designed)}")
    assert not mistakes.not_restored[mutant], (
        f"after mutant {mutant!r} the solution of {cell_id} was put back, yet these tests still fail "
        f"(so the catch may not be the mutant's): {mistakes.not_restored[mutant]}")
