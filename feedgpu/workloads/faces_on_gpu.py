"""The faces on a real GPU: the loop as people first write it, the loop the course recommends, and the step.

Both loaders read the same folder of faces (``ImageFolder``: one class per person) and hand
the same step a batch of 64 random crops of 160 x 160, flipped at random. They differ in
where each piece of work is done and in how many bytes cross each boundary:

=====================  ===============================  ====================================
stage                  :func:`plain_loader`              :func:`recommended_loader`
=====================  ===============================  ====================================
decode                 PIL, then RGB (a copy)           ``torchvision.io.decode_jpeg``
crop, resize, flip     on a PIL image                   on the ``uint8`` tensor (``v2``)
to float, normalise    in the worker, every pixel       on the GPU (:func:`model_input`)
batch handed over      float32: 19.7 MB                 uint8: 4.9 MB (a quarter)
pinned, copied         19.7 MB                          4.9 MB
workers                the user's                       persistent; as many as the step
                                                        needs, never all the cores
=====================  ===============================  ====================================

The float work the plain loader does per value in a worker (``ToTensor`` divides, and
``Normalize`` subtracts and divides: 76,800 values a face, 160 x 160 pixels of 3 channels)
costs a GPU tens of microseconds a batch; the bytes it adds are paid four times over:
written into shared memory by the worker, pinned by the main process's pin thread, copied
over PCIe, and mapped and freed by the main process.

torchvision 0.29 (the course's pin) marks its image decoders deprecated in favour of
TorchCodec (``torchvision/io/image.py`` warns with a ``DeprecationWarning``); they still
decode, and :func:`read_jpeg` is the one place to change when they go.

:class:`ResNetStep` is the course's step for both (resnet18, bf16 autocast, channels_last,
SGD), the one ``readings/*/gpu_case.py`` recorded; ``input="uint8"`` makes the float on the
device first. It runs on a CPU too (small batches in the tests).

Everything a worker needs lives here (spawn workers import it). :func:`make_loader` and
:func:`train_step` are the recommended pair in the ``MODULE:ATTRIBUTE`` form that
``feedgpu-diagnose`` and ``feedgpu-record`` take.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from ..base.checks import check_choice, check_int
from ..base.processes import usable_cores

__all__ = [
    "BATCH_SIZE",
    "CROP",
    "MEAN",
    "STD",
    "NUM_CLASSES",
    "faces_root",
    "read_jpeg",
    "plain_transform",
    "recommended_transform",
    "plain_dataset",
    "recommended_dataset",
    "plain_loader",
    "recommended_loader",
    "workers_for",
    "model_input",
    "ResNetStep",
    "make_loader",
    "train_step",
]

#: The recorded loop's batch size, crop side, and the mean and spread it normalises with.
BATCH_SIZE = 64
CROP = 160
MEAN = (0.5, 0.5, 0.5)
STD = (0.25, 0.25, 0.25)

#: The classifier's outputs (``gpu_case.py``'s: more than the people, as a real head would have).
NUM_CLASSES = 6000


def faces_root(root: str | os.PathLike | None = None) -> Path:
    """The faces' folder: ``root``, else ``$FACES``, else the course's synthetic tree (``make data``)."""
    if root is not None:
        return Path(root)
    if os.environ.get("FACES"):
        return Path(os.environ["FACES"])
    import lfw_dataset

    return lfw_dataset.default_root("synthetic")


def read_jpeg(path: str) -> torch.Tensor:
    """A JPEG file as a ``uint8`` tensor ``3 x H x W`` (``torchvision.io``: no PIL image, no RGB copy)."""
    from torchvision.io import ImageReadMode, decode_jpeg, read_file

    return decode_jpeg(read_file(path), mode=ImageReadMode.RGB)


def plain_transform():
    """The plain loop's transform: crop and flip a PIL image, then float and normalise it in the worker."""
    from torchvision import transforms

    return transforms.Compose([transforms.RandomResizedCrop(CROP), transforms.RandomHorizontalFlip(),
                               transforms.ToTensor(), transforms.Normalize(MEAN, STD)])


def recommended_transform():
    """The recommended transform: the same crop and flip, on the ``uint8`` tensor; no float here."""
    from torchvision.transforms import v2

    return v2.Compose([v2.RandomResizedCrop(CROP, antialias=True), v2.RandomHorizontalFlip()])


def plain_dataset(root: str | os.PathLike | None = None):
    """``ImageFolder`` of the faces, decoded by PIL, float32 items (the recorded ``gpu_case.py``)."""
    from torchvision.datasets import ImageFolder

    return ImageFolder(str(faces_root(root)), transform=plain_transform())


def recommended_dataset(root: str | os.PathLike | None = None):
    """``ImageFolder`` of the faces, decoded by ``decode_jpeg``, ``uint8`` items ``3 x 160 x 160``."""
    from torchvision.datasets import ImageFolder

    return ImageFolder(str(faces_root(root)), transform=recommended_transform(), loader=read_jpeg)


def plain_loader(root: str | os.PathLike | None = None, num_workers: int = 0,
                 batch_size: int = BATCH_SIZE) -> DataLoader:
    """The loop as it was recorded (``readings/*/gpu_case.py``): float32 batches, pinned, the user's workers."""
    num_workers = check_int("num_workers", num_workers)
    return DataLoader(plain_dataset(root), batch_size=check_int("batch_size", batch_size, minimum=1), shuffle=True,
                      num_workers=num_workers, pin_memory=torch.cuda.is_available(), drop_last=True)


def workers_for(cores: int | None = None) -> int:
    """The recommended loader's default workers: every usable core but two, one for the main
    thread (it receives, launches the step and waits on the GPU) and one for its pin thread;
    at least 1. Fewer are enough where the items are cheap: :mod:`feedgpu.models.feeding` says
    how many the step needs."""
    cores = usable_cores() if cores is None else check_int("cores", cores, minimum=1)
    return max(1, cores - 2)


def recommended_loader(root: str | os.PathLike | None = None, num_workers: int | None = None,
                       batch_size: int = BATCH_SIZE, prefetch_factor: int = 4) -> DataLoader:
    """The course's recommended loader for the faces: ``uint8`` batches, decoded by ``decode_jpeg``,
    cropped on the tensor, pinned, with persistent workers (:func:`workers_for` by default).

    ``prefetch_factor`` 4 (2 is PyTorch's default): each worker keeps four batches asked for,
    so a batch that takes longer than the others (a larger file, a busy core) is absorbed by
    the queue instead of stalling the step. Feed its batches through :func:`model_input` (or
    use :class:`ResNetStep` with ``input="uint8"``).
    """
    workers = workers_for() if num_workers is None else check_int("num_workers", num_workers)
    extra: dict[str, Any] = {}
    if workers > 0:
        extra = {"persistent_workers": True, "prefetch_factor": check_int("prefetch_factor", prefetch_factor, minimum=1)}
    return DataLoader(recommended_dataset(root), batch_size=check_int("batch_size", batch_size, minimum=1),
                      shuffle=True, num_workers=workers, pin_memory=torch.cuda.is_available(), drop_last=True,
                      **extra)


def model_input(images: torch.Tensor, device: str | torch.device, dtype: torch.dtype = torch.float32,
                mean: Sequence[float] = MEAN, std: Sequence[float] = STD) -> torch.Tensor:
    """A ``uint8`` batch ``N x 3 x H x W`` as the model's input on ``device``: copied as bytes
    (``non_blocking``: from pinned memory the host does not wait), then, on the device,
    channels_last, ``dtype`` and normalised: ``(x / 255 - mean) / std``, what ``ToTensor`` and
    ``Normalize`` did in the worker. The batch is left unchanged."""
    if images.dtype != torch.uint8 or images.dim() != 4 or images.shape[1] != len(mean):
        raise ValueError(f"expected a uint8 batch N x {len(mean)} x H x W, got {images.dtype} {tuple(images.shape)}")
    x = images.to(device, non_blocking=True).to(memory_format=torch.channels_last)
    shift, scale = _normalising_constants(x.device, mean, std)
    return ((x.float() - shift) / scale).to(dtype)


#: (device, mean, std) -> (shift, scale) on that device, made once: a tensor built from
#: Python numbers with ``device="cuda"`` is a copy from pageable memory, which makes the host
#: wait for the GPU to finish what was queued before it (the last step). Made per batch, it
#: would add that wait to every step.
_CONSTANTS: dict[tuple[str, tuple[float, ...], tuple[float, ...]], tuple[torch.Tensor, torch.Tensor]] = {}


def _normalising_constants(device: torch.device, mean: Sequence[float],
                           std: Sequence[float]) -> tuple[torch.Tensor, torch.Tensor]:
    key = (str(device), tuple(float(m) for m in mean), tuple(float(s) for s in std))
    if key not in _CONSTANTS:
        _CONSTANTS[key] = (torch.tensor([255.0 * m for m in key[1]], device=device).view(1, -1, 1, 1),
                           torch.tensor([255.0 * s for s in key[2]], device=device).view(1, -1, 1, 1))
    return _CONSTANTS[key]


class ResNetStep:
    """The course's training step on faces: resnet18 (``NUM_CLASSES`` outputs), channels_last,
    bf16 autocast, SGD with momentum; built on first use, on ``device``.

    Args:
        device: ``"cuda"`` (default where there is one) or ``"cpu"``.
        input: ``"float"`` for the plain loader's normalised batches, ``"uint8"`` for the
            recommended loader's (made float on the device by :func:`model_input`).
        num_classes: the classifier's outputs.

    Calling it with a batch ``(images, labels)`` queues one step and returns the loss (a
    tensor on the device: reading it, ``.item()``, waits for the step). It builds nothing on
    the device from Python numbers per batch: :func:`model_input`'s constants are made once
    per device, by the first batch, whose copy of them waits for the GPU once.
    """

    def __init__(self, device: str | None = None, input: str = "uint8", num_classes: int = NUM_CLASSES) -> None:
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.input = check_choice("input", input, ("float", "uint8"))
        self.num_classes = check_int("num_classes", num_classes, minimum=1)
        self.model: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None

    def _build(self) -> None:
        import torchvision

        self.model = torchvision.models.resnet18(num_classes=self.num_classes).to(self.device)
        self.model = self.model.to(memory_format=torch.channels_last)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)

    def __call__(self, batch: Sequence[torch.Tensor]) -> torch.Tensor:
        if self.model is None:
            self._build()
        images, labels = batch[0], batch[1]
        if self.input == "uint8":
            x = model_input(images, self.device)
        else:
            x = images.to(self.device, non_blocking=True).to(memory_format=torch.channels_last)
        y = labels.to(self.device, non_blocking=True)
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(self.model(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={str(self.device)!r}, input={self.input!r})"


def make_loader() -> DataLoader:
    """The recommended loader on the course's faces (``feedgpu-diagnose``/``feedgpu-record`` form)."""
    return recommended_loader()


_STEP: ResNetStep | None = None


def train_step(batch: Sequence[torch.Tensor]) -> torch.Tensor:
    """One step of the course's resnet18 on a recommended (``uint8``) batch (the ``MODULE:STEP`` form)."""
    global _STEP
    if _STEP is None:
        _STEP = ResNetStep(input="uint8")
    return _STEP(batch)
