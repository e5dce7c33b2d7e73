"""The course's LFW dataset: a PyTorch ``Dataset``, the data it reads, and a command line.

Every notebook of *Feeding the GPU* reads faces through this module. It lives in an
importable file, not in a notebook cell, because DataLoader workers started with
*spawn* (the default on macOS and Windows) import the Dataset's class by name: a class
defined in a notebook cannot be found there.

The folder layout is the one of Labeled Faces in the Wild (LFW)::

    root/
    ├── Aaron_Peirsol/
    │   ├── Aaron_Peirsol_0001.jpg
    │   └── Aaron_Peirsol_0002.jpg
    └── Zico/
        └── Zico_0001.jpg

Two trees in that layout can be prepared under the data home (see :func:`get_data_home`):

* ``lfw-synthetic``: generated offline from a seed (``make data``), with the real
  LFW's numbers of people and images per person;
* ``lfw-real``: the real archive (:data:`LFW_FUNNELED`), downloaded and verified with
  pooch, then extracted (``make data LFW=real``).

Run ``python lfw_dataset.py -h`` for the command line.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import statistics
import sys
import tarfile
import time
import zlib
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from PIL import Image, UnidentifiedImageError
from torch.utils.data import DataLoader, Dataset

from feedgpu.base.cli import OneLineParser, UsageError, run_command
from feedgpu.base.files import replacing_folder

logger = logging.getLogger(__name__)

#: File name endings read as images (compared in lower case). Anything else is ignored.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp")

#: The names of the trees under the data home, by kind.
TREE_NAMES = {"synthetic": "lfw-synthetic", "real": "lfw-real"}

#: How to make each tree, quoted in error messages.
MAKE_COMMANDS = {"synthetic": "make data", "real": "make data LFW=real"}

#: The folder (beside this module) for generated outputs such as the batch grid.
BUILD_DIR_NAME = "build"

#: The file name of the grid written by ``-visualize_batch`` when no ``-output`` is given.
DEFAULT_GRID_NAME = "lfw_batch.png"

DATA_HOME_ENV = "FEEDGPU_DATA"
LFW_ROOT_ENV = "FEEDGPU_LFW"


class CorruptImageError(OSError):
    """An image file exists but cannot be decoded (truncated, corrupt, or not an image)."""


# --------------------------------------------------------------------------- where data lives


def get_data_home(data_home: str | os.PathLike | None = None) -> Path:
    """Return the folder that holds the course's data sets.

    Args:
        data_home: an explicit folder; wins over everything else.

    Returns:
        ``data_home`` if given, else ``$FEEDGPU_DATA`` if set, else the ``data/`` folder
        next to this module (the repository's ``data/``). The folder is not created.
    """
    if data_home is not None:
        return Path(data_home).expanduser()
    env = os.environ.get(DATA_HOME_ENV)
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parent / "data"


def get_build_dir() -> Path:
    """Return the folder for generated outputs: ``build/`` beside this module.

    It is ignored by git and emptied by ``make clean``; it is not created here.
    """
    return Path(__file__).resolve().parent / BUILD_DIR_NAME


def default_root(kind: str | None = None, data_home: str | os.PathLike | None = None) -> Path:
    """Return the LFW tree the course reads when no folder is named.

    Args:
        kind: ``"synthetic"`` or ``"real"``. When ``None``: ``$FEEDGPU_LFW`` if set (a
            folder), else the real tree if it has been prepared, else the synthetic one.
        data_home: see :func:`get_data_home`.

    Raises:
        ValueError: for an unknown ``kind``.
    """
    home = get_data_home(data_home)
    if kind is None:
        env = os.environ.get(LFW_ROOT_ENV)
        if env:
            return Path(env).expanduser()
        real = home / TREE_NAMES["real"]
        kind = "real" if real.is_dir() else "synthetic"
    if kind not in TREE_NAMES:
        raise ValueError(f"unknown LFW kind {kind!r}; expected one of {sorted(TREE_NAMES)}")
    return home / TREE_NAMES[kind]


# --------------------------------------------------------------------------- scanning a tree


def is_image_file(path: str | os.PathLike) -> bool:
    """True if the file name ends with one of :data:`IMG_EXTENSIONS` (any case)."""
    return str(path).lower().endswith(IMG_EXTENSIONS)


def _check_root(root: Path) -> None:
    if not root.exists():
        raise FileNotFoundError(
            f"LFW folder not found: {root}. Make the offline data with `{MAKE_COMMANDS['synthetic']}` "
            f"(or the real LFW with `{MAKE_COMMANDS['real']}`), or pass the folder that holds "
            "one sub-folder per person."
        )
    if not root.is_dir():
        raise NotADirectoryError(f"LFW root is a file, not a folder: {root}")


def find_classes(root: str | os.PathLike) -> tuple[list[str], dict[str, int]]:
    """Find the people (classes) in an LFW-layout folder.

    Args:
        root: the folder with one sub-folder per person.

    Returns:
        ``(classes, class_to_idx)``: the sub-folder names sorted in code-point order (the
        same on every machine) and the map from name to label ``0 .. len(classes) - 1``.
        Hidden folders (starting with ``.``) are skipped.

    Raises:
        FileNotFoundError: ``root`` does not exist (the message says how to make the data).
        NotADirectoryError: ``root`` is a file.
    """
    root = Path(root)
    _check_root(root)
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    return classes, {name: i for i, name in enumerate(classes)}


def make_samples(
    root: str | os.PathLike, class_to_idx: dict[str, int], min_images_per_person: int = 1
) -> list[tuple[str, int]]:
    """List the images of an LFW-layout folder with their labels.

    Args:
        root: the folder with one sub-folder per person.
        class_to_idx: label of each person (from :func:`find_classes`).
        min_images_per_person: keep only people with at least this many images.

    Returns:
        ``[(path, label), ...]`` sorted by person, then by file name. Files that are not
        images (by their ending) and hidden files are ignored.
    """
    root = Path(root)
    samples = []
    for name in sorted(class_to_idx):
        folder = root / name
        files = sorted(
            e.name
            for e in os.scandir(folder)
            if e.is_file() and is_image_file(e.name) and not e.name.startswith(".")
        )
        if len(files) >= min_images_per_person:
            samples.extend((str(folder / f), class_to_idx[name]) for f in files)
    return samples


def load_image(path: str | os.PathLike) -> Image.Image:
    """Open an image file and return it decoded, in RGB.

    Grayscale, palette, RGBA and CMYK images are all converted, so every face has three
    channels.

    Raises:
        CorruptImageError: the file is truncated, corrupt or not an image; the message
            names the file. (An ``OSError``, so it also crosses DataLoader workers intact.)
        FileNotFoundError: the file does not exist.
    """
    try:
        with Image.open(path) as img:
            img.load()  # decode now, inside the try, so a truncated file fails here
            return img.convert("RGB")
    except FileNotFoundError:
        raise
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        raise CorruptImageError(
            f"cannot decode image {path}: {err}. The file is corrupt or truncated; "
            "delete it, or re-make the data (`make clean-data data`)."
        ) from err


# --------------------------------------------------------------------------- the Dataset


class LFWDataset(Dataset):
    """Faces in an LFW-layout folder, as ``(image, label)`` pairs.

    It mirrors torchvision's ``ImageFolder`` (same ``classes``, ``class_to_idx``,
    ``samples`` and ``targets``), with one person per class.

    Args:
        root: the folder with one sub-folder per person; ``None`` means
            :func:`default_root` (the course's prepared tree).
        transform: applied to the PIL image, e.g. ``transforms.ToTensor()``.
        target_transform: applied to the integer label.
        min_images_per_person: keep only people with at least this many images. The
            labels still come from the sorted list of *kept* people, ``0 .. n - 1``.

    Attributes:
        root (Path): the folder read.
        classes (list[str]): the kept people's names, sorted.
        class_to_idx (dict[str, int]): name -> label.
        samples (list[tuple[str, int]]): ``(path, label)`` of every image, in order.
        targets (list[int]): the labels of ``samples``.

    Raises:
        FileNotFoundError: ``root`` is missing (the message says how to make the data).
        ValueError: ``root`` holds no images (after ``min_images_per_person``).
    """

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        transform: Callable[[Image.Image], Any] | None = None,
        target_transform: Callable[[int], Any] | None = None,
        min_images_per_person: int = 1,
    ) -> None:
        self.root = Path(root) if root is not None else default_root()
        self.transform = transform
        self.target_transform = target_transform
        if min_images_per_person < 1:
            raise ValueError(f"min_images_per_person must be >= 1, got {min_images_per_person}")
        all_classes, all_idx = find_classes(self.root)
        kept = make_samples(self.root, all_idx, min_images_per_person)
        kept_names = sorted({all_classes[label] for _, label in kept})
        self.classes = kept_names
        self.class_to_idx = {name: i for i, name in enumerate(kept_names)}
        if not kept:
            raise ValueError(
                f"no images found in {self.root} (looked for {', '.join(IMG_EXTENSIONS)} inside "
                f"one sub-folder per person, min_images_per_person={min_images_per_person}). "
                f"Make the data with `{MAKE_COMMANDS['synthetic']}`."
            )
        # relabel from the full list to the kept list (identity when nothing is dropped)
        relabel = {all_idx[name]: i for i, name in enumerate(kept_names)}
        self.samples = [(path, relabel[label]) for path, label in kept]
        self.targets = [label for _, label in self.samples]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        """Return ``(transform(image), target_transform(label))`` of sample ``index``.

        Without a transform the image is a PIL RGB image; the label is an ``int``.

        Raises:
            CorruptImageError: the image cannot be decoded (the message names the file).
        """
        path, label = self.samples[index]
        image = load_image(path)
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            label = self.target_transform(label)
        return image, label

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(root={str(self.root)!r}, people={len(self.classes)}, "
            f"images={len(self)}, transform={self.transform!r})"
        )


def default_transform():
    """The course's reference transform: PIL image -> float tensor ``3 x 250 x 250`` in [0, 1]."""
    from torchvision import transforms

    return transforms.ToTensor()


# --------------------------------------------------------------------------- making the data


def _is_complete(tree: Path) -> bool:
    return (tree / ".complete").is_file()


def _mark_complete(tree: Path) -> None:
    """Mark a tree whole: the last file written before it is swapped into place."""
    (tree / ".complete").write_text("ok\n")


def _write_person_job(args: tuple[str, str, int, int, int]) -> int:
    from feedgpu.data import faces

    folder, name, identity_seed, n_images, seed = args
    faces.write_person(Path(folder), name, identity_seed, n_images, seed=seed)
    return n_images


def generate_synthetic_lfw(
    root: str | os.PathLike | None = None,
    *,
    seed: int = 0,
    max_people: int | None = None,
    processes: int | None = None,
    progress: bool = True,
    force: bool = False,
) -> Path:
    """Write the offline, synthetic LFW tree (atomically) and return its folder.

    The tree has the real LFW's 5,749 people and 13,233 images with the same long tail of
    images per person; the faces are painted by :mod:`feedgpu.data.faces` from ``seed``, so
    the same seed gives the same bytes on every machine.

    The images are written to a temporary folder beside ``root`` that is renamed into
    place only when complete: an interrupted run leaves no half-written tree.

    Args:
        root: where to write; default ``<data home>/lfw-synthetic``.
        seed: the seed of names and faces.
        max_people: write only the first people of the list (for quick tests).
        processes: worker processes (default: all cores).
        progress: show a tqdm progress bar.
        force: re-make the tree even if a complete one is there.

    Returns:
        The tree's folder.
    """
    from tqdm.auto import tqdm

    from feedgpu.data import lfw_stats

    dest = Path(root) if root is not None else default_root("synthetic")
    if _is_complete(dest) and not force:
        logger.info("synthetic LFW already complete at %s", dest)
        return dest
    names = lfw_stats.person_names(seed=seed)
    counts = lfw_stats.lfw_image_counts()
    people = list(zip(names, counts))[:max_people]
    processes = processes or os.cpu_count() or 1
    start = time.perf_counter()
    with replacing_folder(dest) as tmp:  # whole or not at all: a stopped run leaves the old tree
        # identity seeds differ between dataset seeds, so another seed paints other people
        jobs = [(str(tmp), name, i + seed * 100_000, n, seed) for i, (name, n) in enumerate(people)]
        with tqdm(total=sum(n for _, n in people), unit="img", desc="synthetic LFW",
                  disable=not progress) as bar:
            if processes == 1:
                for job in jobs:
                    bar.update(_write_person_job(job))
            else:
                with ProcessPoolExecutor(processes) as pool:
                    for n in pool.map(_write_person_job, jobs, chunksize=32):
                        bar.update(n)
        _mark_complete(tmp)
    logger.info("wrote %d people to %s in %.1f s", len(people), dest, time.perf_counter() - start)
    return dest


@dataclass(frozen=True)
class RemoteArchive:
    """A remote archive, declared once: where it lives, its checksum, and what it holds.

    Attributes:
        filename: the name the archive is stored under once downloaded.
        url: the address it is downloaded from.
        sha256: the SHA-256 of the archive, as 64 hexadecimal digits.
        tree: the folder inside the archive that holds one sub-folder per person.
    """

    filename: str
    url: str
    sha256: str
    tree: str


#: The real LFW, funneled (aligned) version: about 230 MB, extracted to ``lfw_funneled/``.
#: The address and checksum are those scikit-learn's LFW fetcher uses (the original is at
#: http://vis-www.cs.umass.edu/lfw/lfw-funneled.tgz).
LFW_FUNNELED = RemoteArchive(
    filename="lfw-funneled.tgz",
    url="https://ndownloader.figshare.com/files/5976015",
    sha256="b47c8422c8cded889dc5a13418c4bc2abbda121092b3533a83306f90d900100a",
    tree="lfw_funneled",
)

#: The folder under the data home that keeps verified downloads, so a re-made tree does not
#: download again. Its name starts with ``.lfw-``, so ``make clean-data`` removes it.
DOWNLOADS_DIR_NAME = ".lfw-downloads"


class DownloadError(OSError):
    """A remote archive could not be fetched, verified or extracted; nothing was kept."""


def download_archive(
    archive: RemoteArchive,
    folder: str | os.PathLike,
    *,
    progress: bool = True,
    n_retries: int = 3,
    timeout_s: float = 60.0,
) -> Path:
    """Download ``archive`` into ``folder`` (with pooch) and return the verified file.

    The file is streamed to a temporary file in ``folder``, its SHA-256 is checked, and
    only then is it renamed to ``folder / archive.filename``. A file already there whose
    checksum matches is reused without any download; one that does not match is
    downloaded again.

    Args:
        archive: what to fetch (e.g. :data:`LFW_FUNNELED`).
        folder: where the verified archive is kept (created if missing).
        progress: show a tqdm progress bar of the bytes received.
        n_retries: further attempts after a failed download or a checksum mismatch.
        timeout_s: give up on a connection that sends nothing for this long.

    Returns:
        The path of the verified archive.

    Raises:
        DownloadError: the download failed or its checksum did not match; no file, not
            even a partial one, is left in ``folder``. The message says what to do.
    """
    import pooch
    import requests

    folder = Path(folder)
    fetcher = pooch.create(
        path=folder,
        base_url="",
        registry={archive.filename: f"sha256:{archive.sha256}"},
        urls={archive.filename: archive.url},
        retry_if_failed=n_retries,
    )
    downloader = pooch.HTTPDownloader(progressbar=progress, timeout=timeout_s)
    again = f"run `{MAKE_COMMANDS['real']}` again, or use the offline data (`{MAKE_COMMANDS['synthetic']}`)"
    try:
        return Path(fetcher.fetch(archive.filename, downloader=downloader))
    except ValueError as err:
        if "hash" not in str(err).lower():  # pooch's other ValueErrors: a bad address
            raise DownloadError(
                f"cannot download {archive.filename} from {archive.url}: {err}. The address must "
                "be an http:// or https:// URL (see lfw_dataset.LFW_FUNNELED)."
            ) from err
        raise DownloadError(
            f"the download of {archive.filename} from {archive.url} does not match its "
            f"SHA-256 checksum (expected {archive.sha256}); the file was deleted. The "
            f"transfer was corrupted or the mirror changed: {again}. ({err})"
        ) from err
    except (requests.exceptions.RequestException, OSError) as err:
        raise DownloadError(
            f"could not download {archive.filename} from {archive.url}: {err}. Check the "
            f"internet connection (behind a proxy, set HTTPS_PROXY), then {again}; "
            "nothing half-downloaded was kept."
        ) from err
    finally:
        _remove_if_empty(folder)


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()  # only succeeds when empty: a failed first download leaves no folder
    except OSError:
        pass


def extract_tree(
    archive_path: str | os.PathLike, tree: str, into: str | os.PathLike, *, progress: bool = True
) -> Path:
    """Extract a tar archive into ``into`` and return its folder ``tree`` (LFW layout).

    Members that would land outside ``into`` (absolute paths, ``..``, links out) are
    refused by the standard library's ``"data"`` extraction filter.

    Raises:
        DownloadError: the archive is unreadable, or has no folder ``tree``.
    """
    from tqdm.auto import tqdm

    into = Path(into)
    try:
        with tarfile.open(archive_path, "r:*") as tar, \
                tqdm(unit="file", desc=f"extracting {Path(archive_path).name}", disable=not progress) as bar:
            for member in tar:  # one member at a time: no second pass over a 230 MB archive
                tar.extract(member, into, filter="data")
                bar.update(1)
    except (tarfile.TarError, EOFError, zlib.error) as err:
        raise DownloadError(
            f"cannot extract {archive_path}: {err}. Delete it and run `{MAKE_COMMANDS['real']}` again."
        ) from err
    folder = into / tree
    if not folder.is_dir():
        found = sorted(p.name for p in into.iterdir())
        raise DownloadError(
            f"the archive {archive_path} has no folder {tree!r} (it holds {found}); it is not "
            f"the expected LFW archive. Delete it and run `{MAKE_COMMANDS['real']}` again."
        )
    return folder


def fetch_real_lfw(
    root: str | os.PathLike | None = None,
    *,
    archive: RemoteArchive = LFW_FUNNELED,
    download_dir: str | os.PathLike | None = None,
    force: bool = False,
    progress: bool = True,
    n_retries: int = 3,
) -> Path:
    """Download the real LFW, verify it, extract it, and return the JPEG tree (atomically).

    The archive is fetched with :func:`download_archive` (pooch: a temporary file, the
    SHA-256 checked, then renamed into place; a verified archive is reused). It is
    extracted into a hidden temporary folder beside ``root``, and the person folders are
    renamed into place, with the ``.complete`` marker, only when everything succeeded: a
    checksum mismatch, an interrupted download or a broken archive leaves no tree and no
    temporary file (an earlier complete tree is kept).

    Args:
        root: where the tree goes; default ``<data home>/lfw-real``. It ends up in LFW
            layout, ``root/<Person>/<Person>_0001.jpg``.
        archive: what to download; the default :data:`LFW_FUNNELED` is the real LFW. Pass
            another :class:`RemoteArchive` for a mirror (its own address and checksum).
        download_dir: where the verified archive is kept; default
            ``<root's folder>/.lfw-downloads``.
        force: re-make the tree even if a complete one is there (the archive is reused if
            its checksum matches).
        progress: show progress bars (download and extraction).
        n_retries: further download attempts after a failure.

    Returns:
        The tree's folder (one sub-folder per person).

    Raises:
        DownloadError: the download failed, its checksum did not match, or the archive is
            not in the expected layout (an ``OSError``; the message says what to do).
    """
    dest = Path(root) if root is not None else default_root("real")
    if _is_complete(dest) and not force:
        logger.info("real LFW already complete at %s", dest)
        return dest
    downloads = Path(download_dir) if download_dir is not None else dest.parent / DOWNLOADS_DIR_NAME
    archive_path = download_archive(archive, downloads, progress=progress, n_retries=n_retries)
    with replacing_folder(dest) as new:  # whole or not at all
        tree = extract_tree(archive_path, archive.tree, new, progress=progress)
        for entry in list(tree.iterdir()):  # the archive's tree becomes the folder itself
            entry.rename(new / entry.name)
        tree.rmdir()
        _mark_complete(new)
    logger.info("real LFW extracted to %s (archive kept at %s)", dest, archive_path)
    return dest


def prepare(kind: str = "synthetic", **kwargs: Any) -> Path:
    """Make the tree of ``kind`` (``"synthetic"`` or ``"real"``) if it is missing; return it."""
    if kind == "synthetic":
        return generate_synthetic_lfw(**kwargs)
    if kind == "real":
        return fetch_real_lfw(**kwargs)
    raise ValueError(f"unknown LFW kind {kind!r}; expected one of {sorted(TREE_NAMES)}")


# --------------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    """The command line. Its flags are those of the DTU MLOps course's LFW exercise."""
    p = OneLineParser(
        prog="lfw_dataset.py",
        description="Load LFW faces with a DataLoader: show a batch, or time the loader.",
    )
    p.add_argument("-path_to_folder", "--path-to-folder", default=None,
                   help="folder in LFW layout (default: the course's prepared data)")
    p.add_argument("-batch_size", "--batch-size", type=int, default=512)
    p.add_argument("-num_workers", "--num-workers", type=int, default=0)
    p.add_argument("-visualize_batch", "--visualize-batch", action="store_true",
                   help="show one batch as a grid (written to a PNG when there is no display)")
    p.add_argument("-get_timing", "--get-timing", action="store_true",
                   help="time the loader: mean and standard deviation over 5 repeats")
    p.add_argument("-batches_to_check", "--batches-to-check", type=int, default=100,
                   help="batches per timing repeat")
    p.add_argument("-repeats", "--repeats", type=int, default=5, help="timing repeats")
    p.add_argument("-output", "--output", default=None,
                   help="write the -visualize_batch grid to this PNG (default: "
                        f"{BUILD_DIR_NAME}/{DEFAULT_GRID_NAME} when there is no display)")
    p.add_argument("-prepare", "--prepare", choices=sorted(TREE_NAMES),
                   help="make the data of this kind if missing, then exit")
    return p


def _has_display() -> bool:
    import matplotlib

    backend = matplotlib.get_backend().lower()
    if backend in {"agg", "pdf", "svg", "ps", "cairo", "template"} or "inline" in backend:
        return False
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def show_batch(
    images: torch.Tensor, labels: torch.Tensor, classes: list[str], output: str | os.PathLike | None = None
) -> Path | None:
    """Draw a batch as a grid with the people's names; save it to ``output`` or show it.

    With ``output`` (or without a display) the figure is drawn off-screen and written as a
    PNG, without touching matplotlib's global backend (so a notebook keeps its inline plots).
    Without ``output`` the PNG goes to ``build/lfw_batch.png`` (see :func:`get_build_dir`),
    never into the working folder; its folder is created if missing.

    Returns:
        The PNG's path when one was written, else ``None`` (shown on screen).
    """
    from matplotlib.figure import Figure
    from torchvision.utils import make_grid

    n = min(len(images), 16)
    grid = make_grid(images[:n], nrow=int(math.ceil(math.sqrt(n))), padding=4)
    names = ", ".join(classes[int(label)].replace("_", " ") for label in labels[:n])
    if output is None and _has_display():
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 8))
    else:
        fig = Figure(figsize=(8, 8))
        ax = fig.add_subplot()
    ax.imshow(grid.permute(1, 2, 0).numpy())
    ax.set_axis_off()
    ax.set_title(f"{n} faces: {names}", fontsize=7, wrap=True)
    if output is None and _has_display():
        plt.show()
        return None
    out = Path(output) if output is not None else get_build_dir() / DEFAULT_GRID_NAME
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100, bbox_inches="tight")
    return out


def time_loader_cli(loader: Iterable[Any], batches: int, repeats: int = 5, warmup: int = 1) -> list[float]:
    """Seconds to pull ``batches`` batches from ``loader``, once per repeat, after a warm-up.

    Each repeat starts a fresh pass (new iterator, so workers start again, as in a new
    epoch); ``warmup`` batches of each pass are pulled before the clock starts.

    Returns:
        One time per repeat, in seconds (``-get_timing`` prints their mean and standard
        deviation). A loader with fewer than ``warmup + batches`` batches is timed over
        the batches it has.
    """
    times = []
    for _ in range(repeats):
        it = iter(loader)
        for _ in range(warmup):
            next(it, None)
        start = time.perf_counter()
        for i, _ in enumerate(it):
            if i + 1 >= batches:
                break
        times.append(time.perf_counter() - start)
        del it
    return times


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status (2 and one line for a usage error, 130 on Ctrl-C)."""
    return run_command("", _main, argv)


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.prepare:
        try:
            print(prepare(args.prepare))
        except DownloadError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        return 0
    try:
        dataset = LFWDataset(args.path_to_folder, transform=default_transform())
    except (FileNotFoundError, NotADirectoryError, ValueError) as err:
        raise UsageError(str(err)) from None
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                        num_workers=args.num_workers, generator=torch.Generator().manual_seed(0))
    print(f"{dataset!r}; batch_size={args.batch_size}, num_workers={args.num_workers}")
    if args.visualize_batch:
        images, labels = next(iter(loader))
        out = show_batch(images, labels, dataset.classes, output=args.output)
        print(f"batch of {len(images)} images, shape {tuple(images.shape)}"
              + (f"; grid written to {out}" if out else ""))
    if args.get_timing:
        times = time_loader_cli(loader, args.batches_to_check, repeats=args.repeats)
        mean = statistics.fmean(times)
        std = statistics.stdev(times) if len(times) > 1 else 0.0
        print(f"Timing: {mean:.4f} ± {std:.4f} s for {args.batches_to_check} batches "
              f"({len(times)} repeats, after a warm-up)")
    if not (args.visualize_batch or args.get_timing):
        images, labels = next(iter(loader))
        print(f"first batch: images {tuple(images.shape)} {images.dtype}, labels {tuple(labels.shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
