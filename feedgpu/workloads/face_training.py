"""A face classifier's training loop, slow on purpose, and the pieces to make it fast.

The loop trains :class:`TinyFaceClassifier` on the people with many images (the seven of
scikit-learn's ``fetch_lfw_people(min_faces_per_person=70)`` in the real LFW) on an
:class:`~feedgpu.models.accelerator.AsyncAccelerator`. Its items cost what a real pipeline's
do: a wait for storage (:data:`WAIT_S` per item), the decode of a real JPEG, a crop to
the face's landmarks, a resize and a random flip; each process also "opens the index"
once (:data:`OPEN_S`, like a database or a shard list) before its first item.

:func:`slow_loader` and :func:`slow_train_epoch` carry **seven planted bottlenecks**
(:data:`BOTTLENECKS`), some of which only show once another is fixed, as in real code:

1. ``main-process``: no workers: the loop waits for every item;
2. ``too-few-workers``: items that wait need more workers than cores;
3. ``python-annotations``: a list of dicts of Python floats, read by every worker
   (copy-on-write pages under *fork*);
4. ``float64-numpy``: batches of normalised float64 numpy arrays, pickled from the
   workers (8 times the bytes of ``uint8``), instead of ``uint8`` tensors in shared memory;
5. ``workers-every-epoch``: workers made again every epoch (and the index opened again);
6. ``same-augmentation``: one numpy generator made in ``__init__``: every worker flips
   the same way (each has a copy), and again every epoch;
7. ``sync-every-step``: ``loss.item()`` after every step: the host waits for the device.

Everything a worker needs lives here (spawn workers import it). The course's own fixes
(``packed_annotations``, ``model_input``, ``shuffled_order``, ``workers_to_keep_up``,
``fixed_loader``, ``fixed_train_epoch``) exist for ``make bench`` and for the grader,
which hides them while it tests a student's answers.
"""

from __future__ import annotations

import math
import os
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Sampler

import lfw_dataset

from ..models.accelerator import AsyncAccelerator, fingerprint
from ..base.checks import check_choice, check_int, check_seconds

__all__ = [
    "STEP_S", "BATCH_SIZE", "IMAGE_SIZE", "WAIT_S", "ITEM_CPU_S", "OPEN_S", "MIN_IMAGES", "SEED",
    "LOG_EVERY", "MEAN", "STD", "N_LANDMARKS", "BOTTLENECKS",
    "face_records", "split_records", "landmark_box", "read_face", "flip_for",
    "FaceItems", "collate_numpy", "EpochBatches", "TinyFaceClassifier",
    "slow_loader", "slow_train_epoch", "run_epochs", "FirstBatches", "Keeping", "expected_fingerprints", "evaluate",
    "packed_annotations", "model_input", "shuffled_order", "workers_to_keep_up", "fixed_loader",
    "fixed_train_epoch",
]

#: The simulated accelerator's step, in seconds.
STEP_S = 0.030
#: Samples per batch (every batch but the last of an epoch).
BATCH_SIZE = 16
#: Side of the square input, in pixels.
IMAGE_SIZE = 64
#: Each item's wait for storage, in seconds (a sleep: no core is used).
WAIT_S = 0.006
#: About what an item's decode, crop, resize and flip cost on one core (measured on the
#: course's 2-core machine; :func:`workers_to_keep_up` adds a margin).
ITEM_CPU_S = 0.001
#: What each process pays once before its first item ("opening the index").
OPEN_S = 0.3
#: Keep people with at least this many images.
MIN_IMAGES = 70
#: The seed of the split, the shuffle and the augmentation.
SEED = 0
#: The course's loops log the loss every this many steps.
LOG_EVERY = 10
#: Per-channel mean and standard deviation of the inputs (ImageNet's, as most models use).
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
#: Landmarks per face (the 68 points of the iBUG 300-W scheme).
N_LANDMARKS = 68

#: The planted bottlenecks, by id, in the order the notebook fixes them.
BOTTLENECKS: dict[str, str] = {
    "main-process": "no workers: the loop waits for every item (num_workers=0)",
    "too-few-workers": "fewer workers than the waiting items need to keep up with the step",
    "python-annotations": "annotations as a list of dicts of Python floats, read in every worker",
    "float64-numpy": "batches of float64 numpy arrays pickled from the workers",
    "workers-every-epoch": "workers made again every epoch (persistent_workers=False)",
    "same-augmentation": "one numpy generator made in __init__, copied into every worker",
    "sync-every-step": "loss.item() after every step: the host waits for the device",
}


# --------------------------------------------------------------------------- the data


def _landmarks(name: str) -> list[tuple[float, float]]:
    """68 points around the face of image ``name``, seeded by its name (multiples of 0.25,
    exact in float32): a jaw, brows, eyes, nose and mouth on an ellipse near the centre."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    cx, cy = 125 + rng.uniform(-6, 6), 128 + rng.uniform(-6, 6)
    rx, ry = rng.uniform(48, 58), rng.uniform(60, 70)
    angle = np.linspace(0.0, 2 * np.pi, N_LANDMARKS, endpoint=False)
    radius = np.where(np.arange(N_LANDMARKS) < 17, 1.0, rng.uniform(0.2, 0.8, N_LANDMARKS))
    x = cx + rx * radius * np.cos(angle) + rng.normal(0, 1.5, N_LANDMARKS)
    y = cy + ry * radius * np.sin(angle) + rng.normal(0, 1.5, N_LANDMARKS)
    pts = np.round(np.clip(np.stack([x, y], 1), 0, 249) * 4) / 4
    return [(float(px), float(py)) for px, py in pts]


def face_records(root: str | os.PathLike | None = None, min_images: int = MIN_IMAGES) -> list[dict[str, Any]]:
    """The annotations of every image of the people with at least ``min_images`` images.

    Returns:
        a list of dicts ``{"path": str, "person": str, "label": int, "landmarks":
        [(x, y), ...]}`` (68 float pairs, in pixels of the 250 x 250 image), sorted by
        person then file; labels are ``0 .. k - 1`` over the people kept, in name order.

    Raises:
        FileNotFoundError: no LFW tree at ``root`` (the message says how to make one).
        ValueError: nobody has ``min_images`` images.
    """
    root = lfw_dataset.default_root() if root is None else root
    min_images = check_int("min_images", min_images, minimum=1)
    _, class_to_idx = lfw_dataset.find_classes(root)
    samples = lfw_dataset.make_samples(root, class_to_idx, min_images_per_person=min_images)
    if not samples:
        raise ValueError(f"nobody in {root} has {min_images} or more images: lower min_images")
    kept = sorted({label for _, label in samples})
    relabel = {old: new for new, old in enumerate(kept)}
    names = {i: n for n, i in class_to_idx.items()}
    return [{"path": path, "person": names[label], "label": relabel[label],
             "landmarks": _landmarks(os.path.basename(path))} for path, label in samples]


def split_records(records: Sequence[Mapping[str, Any]], test_size: float = 0.25,
                  seed: int = SEED) -> tuple[list, list]:
    """``(train, validation)``: a split stratified by label with scikit-learn's
    ``train_test_split``, so each person keeps the same share of images on both sides and
    no image is on both."""
    from sklearn.model_selection import train_test_split

    labels = [r["label"] for r in records]
    train, val = train_test_split(list(records), test_size=test_size, stratify=labels, random_state=seed)
    return train, val


def landmark_box(landmarks: Any) -> tuple[int, int, int, int]:
    """The square crop ``(left, top, right, bottom)`` around ``landmarks`` (an ``N x 2``
    array or a list of pairs), with a 10% margin, inside the 250 x 250 image."""
    pts = np.asarray(landmarks, dtype=np.float64)
    (x0, y0), (x1, y1) = pts.min(0), pts.max(0)
    side = 1.1 * max(x1 - x0, y1 - y0)
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    left = int(np.clip(math.floor(cx - side / 2), 0, 250 - side))
    top = int(np.clip(math.floor(cy - side / 2), 0, 250 - side))
    return left, top, left + int(side), top + int(side)


def read_face(path: str, box: tuple[int, int, int, int], flip: bool) -> torch.Tensor:
    """Decode ``path``, crop ``box``, resize to :data:`IMAGE_SIZE` and flip it left-right
    if ``flip``: a ``uint8`` tensor ``3 x IMAGE_SIZE x IMAGE_SIZE``."""
    with Image.open(path) as img:
        face = img.convert("RGB").crop(box).resize((IMAGE_SIZE, IMAGE_SIZE), Image.BILINEAR)
    if flip:
        face = face.transpose(Image.FLIP_LEFT_RIGHT)
    return torch.from_numpy(np.asarray(face).copy()).permute(2, 0, 1).contiguous()


def flip_for(aug_seed: int) -> bool:
    """The flip of a sample whose augmentation seed is ``aug_seed`` (a fair coin; any integer,
    negative ones too, as numpy's ``int64`` range has them)."""
    return bool(np.random.default_rng(int(aug_seed) & (2**64 - 1)).random() < 0.5)


def _normalised_float64(image: torch.Tensor) -> np.ndarray:
    mean = np.asarray(MEAN).reshape(3, 1, 1)
    std = np.asarray(STD).reshape(3, 1, 1)
    return (image.numpy() / 255.0 - mean) / std


class FaceItems(Dataset):
    """The faces of ``annotations``: item ``key`` is ``(image, label, index)``.

    Args:
        annotations: a list of :func:`face_records` dicts, or the same packed as numpy
            arrays: a dict ``{"path": str array (n,), "label": int array (n,),
            "landmarks": float array (n, 68, 2)}`` (no Python object per image).
        output: ``"float64"``: ``image`` is the normalised float64 numpy array (what
            :func:`slow_loader` hands over); ``"uint8"``: a ``uint8`` tensor, to be
            normalised where the model runs.
        wait_s: each item's wait for storage; open_s: each process's one-off start.
        seed: the seed of the generator made here, used for keys that are a bare index.

    A key is an index (the flip drawn from the generator made in ``__init__``: every
    worker has a copy of it) or a pair ``(index, aug_seed)`` (the flip of
    :func:`flip_for`, the same wherever the item is read).

    Raises:
        ValueError: an unknown ``output``, or packed arrays of different lengths.
    """

    def __init__(self, annotations: Any, *, output: str = "float64", wait_s: float = WAIT_S,
                 open_s: float = OPEN_S, seed: int = SEED) -> None:
        self.output = check_choice("output", output, ("float64", "uint8"))
        self.wait_s = check_seconds("wait_s", wait_s)
        self.open_s = check_seconds("open_s", open_s)
        if isinstance(annotations, Mapping):
            lengths = {key: len(annotations[key]) for key in ("path", "label", "landmarks")}
            if len(set(lengths.values())) != 1:
                raise ValueError(f"packed annotations must have one entry per image, got lengths {lengths}")
        self.annotations = annotations
        self.rng = np.random.default_rng(seed)  # copied into every worker: the same flips everywhere
        self._opened_in: int | None = None

    def __len__(self) -> int:
        if isinstance(self.annotations, Mapping):
            return len(self.annotations["label"])
        return len(self.annotations)

    def annotation(self, index: int) -> tuple[str, int, tuple[int, int, int, int]]:
        """``(path, label, box)`` of image ``index``."""
        if isinstance(self.annotations, Mapping):
            a = self.annotations
            return str(a["path"][index]), int(a["label"][index]), landmark_box(a["landmarks"][index])
        record = self.annotations[index]
        return record["path"], record["label"], landmark_box(record["landmarks"])

    def __getitem__(self, key: Any) -> tuple[Any, int, int]:
        if self._opened_in != os.getpid():  # once per process: a new worker pays it again
            time.sleep(self.open_s)
            self._opened_in = os.getpid()
        if isinstance(key, (tuple, list)):
            index, flip = int(key[0]), flip_for(key[1])
        else:
            index, flip = int(key), bool(self.rng.random() < 0.5)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} faces")
        time.sleep(self.wait_s)
        path, label, box = self.annotation(index)
        image = read_face(path, box, flip)
        return (_normalised_float64(image) if self.output == "float64" else image), label, index

    def __repr__(self) -> str:
        kind = "packed arrays" if isinstance(self.annotations, Mapping) else "a list of dicts"
        return f"FaceItems({len(self)} faces from {kind}, output={self.output!r}, wait_s={self.wait_s})"


def collate_numpy(batch: Sequence[tuple[np.ndarray, int, int]]) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
    """Stack the images into one numpy array (pickled whole from a worker), labels and ids
    into tensors."""
    images, labels, ids = zip(*batch)
    return np.stack(images), torch.tensor(labels), torch.tensor(ids)


class EpochBatches(Sampler):
    """A batch sampler that asks ``order(n, seed, epoch)`` for each epoch's ``(ids,
    aug_seeds)`` and yields batches of ``(index, aug_seed)`` keys for :class:`FaceItems`.

    The first iteration is epoch 0, each next one the next epoch (:meth:`set_epoch` jumps).
    It runs in the main process only, so ``order`` may be defined anywhere (a notebook).

    Raises (when iterated):
        ValueError: ``order`` returned something other than a permutation of
            ``range(n)`` and one seed per id.
    """

    def __init__(self, n: int, batch_size: int, order: Callable[[int, int, int], tuple[Any, Any]],
                 seed: int = SEED) -> None:
        self.n = check_int("n", n, minimum=1)
        self.batch_size = check_int("batch_size", batch_size, minimum=1)
        self.order = order
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = check_int("epoch", epoch)

    def __len__(self) -> int:
        return math.ceil(self.n / self.batch_size)

    def __iter__(self):
        # A generator on purpose: the DataLoader calls iter() on its batch sampler twice on a
        # first pass with workers, and only the pass that is iterated may count as an epoch.
        ids, seeds = self.order(self.n, self.seed, self.epoch)
        self.epoch += 1
        ids, seeds = np.asarray(ids), np.asarray(seeds)
        if ids.shape != (self.n,) or seeds.shape != (self.n,):
            raise ValueError(f"order(n={self.n}, ...) must return n ids and n seeds; got shapes {ids.shape} "
                             f"and {seeds.shape}")
        if not np.array_equal(np.sort(ids), np.arange(self.n)):
            missing = self.n - len(np.intersect1d(ids, np.arange(self.n)))
            raise ValueError(f"order(n={self.n}, ...) must return a permutation of range(n): {missing} of the "
                             "ids are missing (or repeated, or out of range)")
        keys = [(int(i), int(s)) for i, s in zip(ids, seeds)]
        for start in range(0, self.n, self.batch_size):
            yield keys[start:start + self.batch_size]


class TinyFaceClassifier(torch.nn.Module):
    """Average-pool the face to 8 x 8, then one linear layer: small enough to train on a CPU
    thread within a simulated step."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.pool = torch.nn.AdaptiveAvgPool2d(8)
        self.linear = torch.nn.Linear(3 * 8 * 8, check_int("classes", classes, minimum=2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.pool(x).flatten(1))


# --------------------------------------------------------------------------- the slow loop


def slow_loader(records: Sequence[Mapping[str, Any]], seed: int = SEED) -> DataLoader:
    """The loader as it was written first: every bottleneck of :data:`BOTTLENECKS` but the last
    (which is in :func:`slow_train_epoch`)."""
    dataset = FaceItems(list(records), output="float64", seed=seed)
    return DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, num_workers=0, collate_fn=collate_numpy,
                      generator=torch.Generator().manual_seed(seed))


def slow_train_epoch(loader: Any, device: AsyncAccelerator, log_every: int = LOG_EVERY) -> list[float]:
    """One epoch as it was written first: converts each float64 batch, steps, and reads the
    loss after every step (logging only every ``log_every``)."""
    logged = []
    for step, (images, labels, ids) in enumerate(loader):
        x = torch.as_tensor(images).float()
        loss = device.step(x, labels, ids).item()  # waits for the device, every step
        if step % log_every == 0:
            logged.append(loss)
    return logged


# --------------------------------------------------------------------------- running and checking


def run_epochs(loader: Any, train_epoch: Callable[..., Any], device: AsyncAccelerator, epochs: int = 1,
               **kwargs: Any) -> list[dict[str, Any]]:
    """Run ``train_epoch(device.feed(loader), device, **kwargs)`` ``epochs`` times; after
    each, wait for the device and measure the epoch.

    Returns:
        one dict per epoch: ``wall_s``, ``steps``, ``syncs`` (asked by the loop, the final
        wait excluded), ``busy_share``, ``waiting_share``, ``other_share``, ``logged``
        (what the loop returned) and ``breakdown`` (:class:`~feedgpu.models.accelerator.Breakdown`).
    """
    rows = []
    for _ in range(check_int("epochs", epochs, minimum=1)):
        start, steps, syncs = time.perf_counter(), device.steps, device.syncs
        logged = train_epoch(device.feed(loader), device, **kwargs)
        syncs = device.syncs - syncs
        device.synchronize()
        end = time.perf_counter()
        breakdown = device.breakdown(start, end)
        rows.append({"wall_s": end - start, "steps": device.steps - steps, "syncs": syncs, **{
            k: v for k, v in breakdown.summary().items() if k.endswith("share")},
            "logged": logged, "breakdown": breakdown})
    return rows


class FirstBatches:
    """The first ``n`` batches of every pass over ``loader`` (a loader's epoch, cut short
    for a quick measurement). Iterating it stops the pass after ``n`` batches."""

    def __init__(self, loader: Any, n: int) -> None:
        self.loader = loader
        self.n = check_int("n", n, minimum=1)

    def __iter__(self):
        iterator = iter(self.loader)
        for _ in range(self.n):
            try:
                yield next(iterator)
            except StopIteration:
                return

    def __len__(self) -> int:
        return min(self.n, len(self.loader))


class Keeping:
    """``loader``, keeping the batches of its last pass in :attr:`batches` as they go by, so
    that the same batches can feed a stall-free run afterwards (from memory)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.batches: list[Any] = []

    def __iter__(self):
        self.batches = []
        for batch in self.loader:
            self.batches.append(batch)
            yield batch

    def __len__(self) -> int:
        return len(self.loader)


def expected_fingerprints(records: Sequence[Mapping[str, Any]], ids: Sequence[int],
                          flips: Sequence[bool]) -> np.ndarray:
    """The :func:`~feedgpu.models.accelerator.fingerprint` of its normalised float32 input that
    sample ``ids[k]``, flipped if ``flips[k]``, should reach the accelerator with."""
    out = np.empty(len(ids))
    for k, (i, flip) in enumerate(zip(ids, flips)):
        r = records[int(i)]
        image = read_face(r["path"], landmark_box(r["landmarks"]), bool(flip))
        out[k] = float(fingerprint(model_input(image[None]))[0])
    return out


def evaluate(model: torch.nn.Module, records: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """``(true labels, predicted labels)`` of ``model`` on ``records`` (no flip)."""
    model.eval()
    images = torch.stack([read_face(r["path"], landmark_box(r["landmarks"]), False) for r in records])
    with torch.no_grad():
        predicted = model(model_input(images)).argmax(1).numpy()
    model.train()
    return np.array([r["label"] for r in records]), predicted


# --------------------------------------------------------------------------- the course's fixes


def packed_annotations(records: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """The annotations as three numpy arrays (paths, labels, landmarks): no Python object
    per image for a worker to copy."""
    return {"path": np.array([r["path"] for r in records], dtype=str),
            "label": np.array([r["label"] for r in records], dtype=np.int64),
            "landmarks": np.array([r["landmarks"] for r in records], dtype=np.float32)}


def model_input(images: torch.Tensor) -> torch.Tensor:
    """A ``uint8`` batch ``N x 3 x H x W`` as the model's normalised ``float32`` input."""
    mean = torch.tensor(MEAN, dtype=torch.float32).view(1, 3, 1, 1)
    std = torch.tensor(STD, dtype=torch.float32).view(1, 3, 1, 1)
    return (images.float() / 255.0 - mean) / std


def shuffled_order(n: int, seed: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """Epoch ``epoch``'s order of ``range(n)`` and an augmentation seed per sample, both
    drawn from ``(seed, epoch)``: reproducible, new every epoch, wherever items are read."""
    rng = np.random.default_rng([seed, epoch])
    return rng.permutation(n), rng.integers(0, 2**63 - 1, size=n)


def workers_to_keep_up(item_s: float, batch_size: int, step_s: float, margin: float = 1.25) -> int:
    """The fewest workers that make a batch (``batch_size`` items of ``item_s`` each, one
    worker per batch) within one step, with ``margin`` to spare: ``ceil(margin *
    batch_size * item_s / step_s)``, at least 1."""
    return max(1, math.ceil(margin * batch_size * item_s / step_s))


def fixed_loader(records: Sequence[Mapping[str, Any]], seed: int = SEED) -> DataLoader:
    """:func:`slow_loader` with the loader's six bottlenecks fixed."""
    dataset = FaceItems(packed_annotations(records), output="uint8", seed=seed)
    workers = workers_to_keep_up(WAIT_S + ITEM_CPU_S, BATCH_SIZE, STEP_S)
    return DataLoader(dataset, batch_sampler=EpochBatches(len(dataset), BATCH_SIZE, shuffled_order, seed),
                      num_workers=workers, persistent_workers=True)


def fixed_train_epoch(loader: Any, device: AsyncAccelerator, log_every: int = LOG_EVERY) -> list[float]:
    """:func:`slow_train_epoch` without the wait after every step: it keeps the pending
    losses and reads them at the end of the epoch."""
    pending = []
    for step, (images, labels, ids) in enumerate(loader):
        loss = device.step(model_input(images), labels, ids)
        if step % log_every == 0:
            pending.append(loss)
    return [loss.item() for loss in pending]
