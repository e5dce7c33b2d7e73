"""Notebook 01 (the dataset class): wrong answers and delegations (see ``__init__.py``).

Part D's tests stand the course's Parts A to C in for the student's (``REFERENCE_PARTS``),
so a wrong ``FacesDataset`` that calls ``find_people``, ``list_images`` or ``load_rgb`` gets
the right ones: its mistakes are in the class itself.

Each wrong answer names every test of its answer that it fails, with one exception:
``test_dataset_with_workers`` only where the items come out wrong. Where the error is raised
inside a DataLoader worker (a PIL image that cannot be collated, a generator that runs out),
the main process re-raises it from a frame that holds the exception itself, so the loader's
iterator lives on in a reference cycle; whenever the garbage collector frees it, its
shutdown waits ``MP_STATUS_CHECK_INTERVAL`` (5 s) for each of the 2 workers, which never get
the signal to stop. That would add 10 s to the run for a test that proves nothing more.
"""

import textwrap

from wrong_answers import wrong

DELEGATIONS = {
    "find_people": """
        import lfw_dataset


        def find_people(root):
            return lfw_dataset.find_classes(root)
    """,
    "list_images": """
        import lfw_dataset


        def list_images(root, class_to_idx, _samples=lfw_dataset.make_samples):
            return _samples(root, class_to_idx)
    """,
    "load_rgb": "from lfw_dataset import load_image as load_rgb",
    "faces_dataset": """
        import lfw_dataset


        class FacesDataset(lfw_dataset.LFWDataset):
            pass
    """,
    "show_batch": """
        from feedgpu.plots import show_faces


        def show_batch(dataset):
            loader = DataLoader(dataset, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(SEED))
            images, labels = next(iter(loader))
            show_faces(images, labels)
            return make_grid(images, nrow=8), labels
    """,
}


def _src(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def _indent(code: str, spaces: int) -> str:
    return textwrap.indent(_src(code), " " * spaces).lstrip()


def _function(signature: str, *parts: str) -> str:
    """``def signature:`` with the body ``parts`` (each a block of code; empty ones left out)."""
    return "\n".join([f"def {signature}:", *(textwrap.indent(_src(part), " " * 4) for part in parts if part)])


_EXISTS = 'if not root.exists():\n    raise FileNotFoundError(f"no such folder: {root}")'


def _find_people(body: str, check: str = _EXISTS) -> str:
    """``find_people`` with the scan and numbering ``body``, after the existence ``check``."""
    return _function("find_people(root)", "root = Path(root)", check, body, "return classes, class_to_idx")


_LIST_IMAGES = '''
def list_images(root, class_to_idx):
    samples = []
    for person in sorted(class_to_idx):
        folder = os.path.join(root, person)
        for name in {listing}:
            if {keep}:
                samples.append(({path}, class_to_idx[person]))
    return samples
'''

_GOOD_KEEP = 'not name.startswith(".") and name.lower().endswith(IMG_EXTENSIONS)'


def _list_images(listing: str = "sorted(os.listdir(folder))", keep: str = _GOOD_KEEP,
                 path: str = "os.path.join(folder, name)") -> str:
    return _src(_LIST_IMAGES).format(listing=listing, keep=keep, path=path)


_DATASET = '''
class FacesDataset(Dataset):
    def __init__(self, root, transform=None):
        {init}

    def __len__(self):
        return {length}

    def __getitem__(self, index):
        {getitem}
'''

_GOOD_INIT = '''
self.root = root
self.transform = transform
self.classes, self.class_to_idx = find_people(root)
self.samples = list_images(root, self.class_to_idx)
self.targets = [label for _, label in self.samples]
'''

_GOOD_GETITEM = '''
path, label = self.samples[index]
image = load_rgb(path)
if self.transform is not None:
    image = self.transform(image)
return image, label
'''


def _dataset(extra_init: str = "", init: str = _GOOD_INIT, length: str = "len(self.samples)",
             getitem: str = _GOOD_GETITEM) -> str:
    """``FacesDataset`` with the given parts; ``extra_init`` runs at the end of ``__init__``."""
    return _src(_DATASET).format(init=_indent(_src(init) + "\n" + _src(extra_init), 8), length=length,
                                 getitem=_indent(getitem, 8))


_SCAN = 'n for n in os.listdir(root) if (root / n).is_dir() and not n.startswith(".")'

_SHOW_BATCH = """
def show_batch(dataset):
    images, labels = next(iter({loader}))
    grid = make_grid(images, nrow=8)
    {draw}
    return {result}, labels
"""


def _show_batch(loader: str, draw: str = "plt.figure().gca().imshow(grid.permute(1, 2, 0).numpy())",
                result: str = "grid") -> str:
    return _SHOW_BATCH.format(loader=loader, draw=draw or "pass", result=result)


WRONG_ANSWERS = [
    # ---------------------------------------------------------------- Part A: find_people
    wrong("find_people", "people in os.listdir order", _find_people(f"""
            classes = [{_SCAN}]
            class_to_idx = {{name: i for i, name in enumerate(classes)}}
          """), "test_find_people_sorted"),
    wrong("find_people", "people sorted ignoring case", _find_people(f"""
            classes = sorted(({_SCAN}), key=str.lower)
            class_to_idx = {{name: i for i, name in enumerate(classes)}}
          """), "test_find_people_sorted"),
    wrong("find_people", "people in set order (unstable between runs)", _find_people(f"""
            classes = list({{{_SCAN}}})
            class_to_idx = {{name: i for i, name in enumerate(classes)}}
          """), "test_find_people_sorted"),
    wrong("find_people", "labels from 1", _find_people(f"""
            classes = sorted({_SCAN})
            class_to_idx = {{name: i for i, name in enumerate(classes, start=1)}}
          """), "test_find_people_labels_from_zero"),
    wrong("find_people", "files taken for people", _find_people("""
            classes = sorted(n for n in os.listdir(root) if not n.startswith("."))
            class_to_idx = {name: i for i, name in enumerate(classes)}
          """), "test_find_people_sorted", "test_find_people_ignores_files_and_hidden"),
    wrong("find_people", "hidden folders kept", _find_people("""
            classes = sorted(n for n in os.listdir(root) if (root / n).is_dir())
            class_to_idx = {name: i for i, name in enumerate(classes)}
          """), "test_find_people_sorted", "test_find_people_ignores_files_and_hidden"),
    wrong("find_people", "a glob scan: [] for a missing folder, no error", _find_people("""
            classes = sorted(p.name for p in root.glob("*") if p.is_dir() and not p.name.startswith("."))
            class_to_idx = {name: i for i, name in enumerate(classes)}
          """, check=""), "test_find_people_missing_root"),
    # ---------------------------------------------------------------- Part B: list_images
    wrong("list_images", "every file counted as an image", _list_images(keep="True"),
          "test_list_images_count", "test_list_images_sorted_with_labels"),
    wrong("list_images", "image endings compared case-sensitively",
          _list_images(keep='not name.startswith(".") and name.endswith(IMG_EXTENSIONS)'),
          "test_list_images_count", "test_list_images_sorted_with_labels"),
    wrong("list_images", "hidden macOS ._ files counted",
          _list_images(keep="name.lower().endswith(IMG_EXTENSIONS)"),
          "test_list_images_count", "test_list_images_sorted_with_labels"),
    wrong("list_images", "files in os.listdir order", _list_images(listing="os.listdir(folder)"),
          "test_list_images_sorted_with_labels"),
    wrong("list_images", "paths as pathlib.Path, not str", _list_images(path="Path(folder) / name"),
          "test_list_images_sorted_with_labels"),
    # ---------------------------------------------------------------- Part C: load_rgb
    wrong("load_rgb", "image not converted to RGB", """
        def load_rgb(path):
            with Image.open(path) as image:
                image.load()
                return image.copy()
    """, "test_load_rgb_grayscale", "test_load_rgb_rgba"),
    wrong("load_rgb", "a numpy array returned, not a PIL image", """
        def load_rgb(path):
            with Image.open(path) as image:
                return np.asarray(image.convert("RGB"))
    """, "test_load_rgb_grayscale", "test_load_rgb_rgba"),
    # ---------------------------------------------------------------- Part D: FacesDataset
    wrong("faces_dataset", "len counts people", _dataset(length="len(self.classes)"), "test_dataset_len"),
    wrong("faces_dataset", "label off by one", _dataset(getitem="""
            path, label = self.samples[index]
            image = load_rgb(path)
            if self.transform is not None:
                image = self.transform(image)
            return image, label + 1
          """), "test_dataset_items", "test_dataset_applies_transform", "test_dataset_matches_imagefolder"),
    wrong("faces_dataset", "label returned as a tensor", _dataset(getitem="""
            path, label = self.samples[index]
            image = load_rgb(path)
            if self.transform is not None:
                image = self.transform(image)
            return image, torch.tensor(label)
          """), "test_dataset_items"),
    wrong("faces_dataset", "__getitem__ opens the file without RGB conversion", _dataset(getitem="""
            path, label = self.samples[index]
            image = Image.open(path)
            if self.transform is not None:
                image = self.transform(image)
            return image, label
          """), "test_dataset_items", "test_dataset_applies_transform", "test_dataset_to_tensor"),
    wrong("faces_dataset", "transform not applied", _dataset(getitem="""
            path, label = self.samples[index]
            return load_rgb(path), label
          """), "test_dataset_applies_transform", "test_dataset_to_tensor", "test_dataset_matches_imagefolder"),
    wrong("faces_dataset", "tensor in height x width x channels order", _dataset(getitem="""
            path, label = self.samples[index]
            image = load_rgb(path)
            if self.transform is not None:
                image = self.transform(image)
                if isinstance(image, torch.Tensor):
                    image = image.permute(1, 2, 0)  # "channels last, like numpy"
            return image, label
          """), "test_dataset_to_tensor", "test_dataset_matches_imagefolder"),
    wrong("faces_dataset", "images and labels kept as images/labels, not samples/targets", _dataset(init="""
            self.root = root
            self.transform = transform
            self.classes, self.class_to_idx = find_people(root)
            self.images = list_images(root, self.class_to_idx)
            self.labels = [label for _, label in self.images]
          """, length="len(self.images)", getitem="""
            path, label = self.images[index]
            image = load_rgb(path)
            if self.transform is not None:
                image = self.transform(image)
            return image, label
          """), "test_dataset_attributes", "test_dataset_matches_imagefolder"),
    wrong("faces_dataset", "its own scan of the people, in os.listdir order", _dataset(init="""
            self.root = root
            self.transform = transform
            self.classes = [n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n)) and not n.startswith(".")]
            self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
            self.samples = list_images(root, self.class_to_idx)
            self.targets = [label for _, label in self.samples]
          """), "test_dataset_attributes", "test_dataset_matches_imagefolder"),
    wrong("faces_dataset", "open file handles kept as attributes", _dataset(
        extra_init='self.files = [open(path, "rb") for path, _ in self.samples]', getitem="""
            file = self.files[index]
            file.seek(0)
            image = Image.open(file).convert("RGB")
            if self.transform is not None:
                image = self.transform(image)
            return image, self.samples[index][1]
          """), "test_dataset_pickles"),
    wrong("faces_dataset", "a lambda kept as an attribute", _dataset(
        extra_init="self.load = lambda path: load_rgb(path)", getitem="""
            path, label = self.samples[index]
            image = self.load(path)
            if self.transform is not None:
                image = self.transform(image)
            return image, label
          """), "test_dataset_pickles"),
    wrong("faces_dataset", "images opened lazily in __init__ and kept (a file handle each)", _dataset(
        extra_init="self.images = [Image.open(path) for path, _ in self.samples]", getitem="""
            image = self.images[index].convert("RGB")
            if self.transform is not None:
                image = self.transform(image)
            return image, self.samples[index][1]
          """), "test_dataset_pickles"),
    wrong("faces_dataset", "a generator kept as an attribute", _dataset(
        extra_init="self.upcoming = (sample for sample in self.samples)", getitem="""
            path, label = next(self.upcoming)
            image = load_rgb(path)
            if self.transform is not None:
                image = self.transform(image)
            return image, label
          """), "test_dataset_items", "test_dataset_applies_transform", "test_dataset_to_tensor",
          "test_dataset_pickles"),
    # The generator fails test_dataset_with_workers through a StopIteration raised in the
    # workers (see above); the same mistake, state that advances with each call instead of
    # the index, kept as a counter, fails it with wrong items, at once.
    wrong("faces_dataset", "items read in turn with a counter, ignoring the index", _dataset(
        extra_init="self.position = 0", getitem="""
            path, label = self.samples[self.position % len(self.samples)]
            self.position += 1
            image = load_rgb(path)
            if self.transform is not None:
                image = self.transform(image)
            return image, label
          """), "test_dataset_items", "test_dataset_applies_transform", "test_dataset_to_tensor",
          "test_dataset_with_workers"),
    # ---------------------------------------------------------------- Part F: show_batch
    wrong("show_batch", "shuffled by an unseeded generator", _show_batch(
        "DataLoader(dataset, batch_size=16, shuffle=True)"), "test_show_batch"),
    wrong("show_batch", "not shuffled", _show_batch(
        "DataLoader(dataset, batch_size=16, generator=torch.Generator().manual_seed(SEED))"), "test_show_batch"),
    wrong("show_batch", "the default batch size (1)", _show_batch(
        "DataLoader(dataset, shuffle=True, generator=torch.Generator().manual_seed(SEED))"), "test_show_batch"),
    wrong("show_batch", "returns the grid but draws nothing", _show_batch(
        "DataLoader(dataset, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(SEED))", draw=""),
        "test_show_batch"),
    wrong("show_batch", "draws one channel of the grid", _show_batch(
        "DataLoader(dataset, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(SEED))",
        draw="plt.figure().gca().imshow(grid[0].numpy())"), "test_show_batch"),
    wrong("show_batch", "returns the batch's images, not the grid", _show_batch(
        "DataLoader(dataset, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(SEED))",
        result="images"), "test_show_batch"),
]
