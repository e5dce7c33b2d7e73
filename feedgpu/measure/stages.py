"""Where the time of one image goes: read, decode, augment, to_tensor, collate.

:func:`time_stages` splits the cost of one image into its stages and times each::

    read       the file's bytes from disk (or the page cache)
    decode     JPEG bytes -> pixels: a PIL image, or a uint8 tensor (torchvision.io)
    augment    the random transforms (flip, affine, colour jitter, crop, ...)
    to_tensor  pixels -> the float tensor a model takes
    collate    stacking the images of a batch into one tensor (per image: / batch size)

:func:`stage_table` puts several pipelines side by side (and
:func:`feedgpu.plots.plot_stages` draws them); :func:`decode_rate` and :func:`time_each`
time whole decoders and pipelines.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import default_collate

from ..base.checks import check_choice, check_int
from ..workloads.lfw import DECODERS, read_bytes

__all__ = [
    "STAGES",
    "time_stages",
    "decode_rate",
    "time_each",
    "stage_table",
]


logger = logging.getLogger(__name__)


#: The stages of loading one image, in the order they run.
STAGES: tuple[str, ...] = ("read", "decode", "augment", "to_tensor", "collate")


def _decoder(name: str) -> Callable[[bytes], Any]:
    return DECODERS[check_choice("decoder", name, sorted(DECODERS))]


def _identity(x: Any) -> Any:
    return x


class _Threads:
    """Run a block with ``torch.set_num_threads(n)``, then restore the previous count."""

    def __init__(self, n: int | None) -> None:
        self.n = None if n is None else check_int("threads", n, minimum=1)
        self.before = torch.get_num_threads()

    def __enter__(self) -> None:
        if self.n is not None:
            torch.set_num_threads(self.n)

    def __exit__(self, *exc: Any) -> None:
        torch.set_num_threads(self.before)


def _one_pass(
    paths: Sequence[str],
    decode: Callable[[bytes], Any],
    augment: Callable[[Any], Any],
    to_tensor: Callable[[Any], Any],
    batch_size: int,
) -> dict[str, float]:
    """Total seconds per stage over ``paths`` (one pass)."""
    clock = time.perf_counter
    totals = dict.fromkeys(STAGES, 0.0)
    batch: list[Any] = []
    for k, path in enumerate(paths):
        t0 = clock()
        data = read_bytes(path)
        t1 = clock()
        pixels = decode(data)
        t2 = clock()
        pixels = augment(pixels)
        t3 = clock()
        tensor = to_tensor(pixels)
        t4 = clock()
        totals["read"] += t1 - t0
        totals["decode"] += t2 - t1
        totals["augment"] += t3 - t2
        totals["to_tensor"] += t4 - t3
        batch.append(tensor)
        if len(batch) == batch_size or k == len(paths) - 1:
            t5 = clock()
            default_collate(batch)
            totals["collate"] += clock() - t5
            batch = []
    return totals


def time_stages(
    paths: Sequence[str | Path],
    augment: Callable[[Any], Any] | None = None,
    to_tensor: Callable[[Any], Any] | None = None,
    *,
    decoder: str = "pil",
    batch_size: int = 32,
    repeats: int = 3,
    threads: int | None = 1,
) -> dict[str, float]:
    """Time each stage of loading ``paths``: seconds per image for every stage.

    For every image, in the order of :data:`STAGES`: read the bytes, decode them with
    ``decoder``, apply ``augment``, apply ``to_tensor``; every ``batch_size`` images, the
    tensors are collated (stacked) as a DataLoader would. Each stage is clocked with
    :func:`time.perf_counter` and summed; the sums are divided by the number of images.
    The whole pass runs ``repeats`` times after one untimed warm-up pass (which also
    brings the files into the page cache), and each stage reports its median over repeats.

    Args:
        paths: image files to load.
        augment: the random transforms, applied to what the decoder returns (a PIL image
            for ``"pil"``, a ``uint8`` tensor for ``"tensor"``); None for none.
        to_tensor: turns the augmented image into the final tensor, e.g.
            ``transforms.ToTensor()`` or ``v2.ToDtype(torch.float32, scale=True)``; None
            for none (then the decoder's output must already be a tensor to collate).
        decoder: ``"pil"`` (:func:`decode_pil`) or ``"tensor"`` (:func:`decode_tensor`).
        batch_size: images per collated batch.
        repeats: timed passes.
        threads: torch threads during the timing. The default, 1, is what a DataLoader
            worker uses, so the figures are those of one worker. None keeps the current
            setting. The previous setting is restored afterwards.

    Returns:
        ``{stage: seconds per image}`` for the stages of :data:`STAGES`, in that order.

    Raises:
        ValueError: no paths, an unknown decoder, or ``batch_size``, ``repeats`` or
            ``threads`` below 1.
    """
    paths = [str(p) for p in paths]
    if not paths:
        raise ValueError("paths is empty; give at least one image file")
    batch_size = check_int("batch_size", batch_size, minimum=1)
    repeats = check_int("repeats", repeats, minimum=1)
    decode = _decoder(decoder)
    augment = augment or _identity
    to_tensor = to_tensor or _identity
    with _Threads(threads):
        _one_pass(paths, decode, augment, to_tensor, batch_size)  # warm-up
        passes = [_one_pass(paths, decode, augment, to_tensor, batch_size) for _ in range(repeats)]
    n = len(paths)
    result = {stage: statistics.median(p[stage] for p in passes) / n for stage in STAGES}
    logger.debug("time_stages(%d images, decoder=%s): %s", n, decoder, result)
    return result


def decode_rate(
    paths: Sequence[str | Path], decoder: str = "pil", *, repeats: int = 3, threads: int | None = 1
) -> float:
    """Images per second that ``decoder`` decodes from bytes already in memory.

    The files are read once, untimed; then every image is decoded ``repeats + 1`` times
    (the first pass is a warm-up) and the fastest timed pass counts, so a busy moment on
    the machine does not count against the decoder.

    Args:
        paths: image files.
        decoder: ``"pil"`` or ``"tensor"`` (see :data:`DECODERS`).
        repeats: timed passes.
        threads: torch threads during the timing (1, as in a worker; None keeps them).

    Returns:
        Decoded images per second, on one core.

    Raises:
        ValueError: no paths, an unknown decoder, or ``repeats`` or ``threads`` below 1.
    """
    repeats = check_int("repeats", repeats, minimum=1)
    decode = _decoder(decoder)
    datas = [read_bytes(p) for p in paths]
    if not datas:
        raise ValueError("paths is empty; give at least one image file")
    with _Threads(threads):
        best = _fastest_pass(lambda: [decode(data) for data in datas], repeats)
    return len(datas) / best


def _fastest_pass(run: Callable[[], Any], repeats: int) -> float:
    """Seconds of the fastest of ``repeats`` timed calls of ``run``, after one untimed call."""
    run()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def time_each(
    transforms: Mapping[str, Callable[[Any], Any]],
    images: Sequence[Any],
    *,
    repeats: int = 3,
    threads: int | None = 1,
) -> dict[str, float]:
    """Seconds per image of each transform alone, on images already decoded.

    Every transform runs over all ``images`` once untimed, then ``repeats`` timed passes;
    the fastest pass counts.

    Args:
        transforms: name -> transform (e.g. ``{"flip": transforms.RandomHorizontalFlip()}``).
        images: decoded images of the kind the transforms take (PIL images or tensors).
        repeats: timed passes per transform.
        threads: torch threads during the timing (1, as in a worker; None keeps them).

    Returns:
        ``{name: seconds per image}`` in the order of ``transforms``.

    Raises:
        ValueError: no images, or ``repeats`` or ``threads`` below 1.
    """
    if not images:
        raise ValueError("images is empty; give at least one decoded image")
    repeats = check_int("repeats", repeats, minimum=1)
    out = {}
    with _Threads(threads):
        for name, transform in transforms.items():
            best = _fastest_pass(lambda t=transform: [t(image) for image in images], repeats)
            out[name] = best / len(images)
    return out


def stage_table(results: Mapping[str, Mapping[str, float]]) -> Any:
    """Per-stage times of several pipelines as a table in milliseconds per image.

    Args:
        results: pipeline name -> what :func:`time_stages` returned (seconds per image).

    Returns:
        A pandas DataFrame, one row per pipeline (in the order given), one column per
        stage in ms per image, then ``total`` (ms per image) and ``images_per_s``
        (``1000 / total``: what one core sustains).
    """
    import pandas as pd

    rows = []
    for name, times in results.items():
        row = {stage: times.get(stage, 0.0) * 1e3 for stage in STAGES}
        total = sum(row.values())
        row["total"] = total
        row["images_per_s"] = 1e3 / total if total > 0 else math.inf
        rows.append(row)
    return pd.DataFrame(rows, index=list(results)).rename_axis("pipeline")
