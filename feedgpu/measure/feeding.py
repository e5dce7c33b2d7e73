"""Probes of the costs that :mod:`feedgpu.models.feeding` turns into a busy share.

* :func:`measure_stages`: the faces' pipelines stage by stage, one item on one thread
  (read, decode, crop and flip, float and normalise, and the batch's bytes to hand over);
* :func:`measure_item_ratio`: the recommended item's cost over the plain one's, in rounds
  that interleave the two, with the rounds' range;
* :func:`measure_slowdown`: how much slower an item gets when ``w`` processes make items
  at once on this machine;
* :func:`measure_stall_free_step`: the step on one batch held in memory, the loop's bound;
* :func:`measure_loader_costs`: the loading side of a loop's costs (items, collate and
  hand-over, pinning, slowdown);
* :func:`measure_feed_costs`: every cost of one loader and step on a live machine (the
  recorder's probes on a GPU, before it runs the loop).
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..base.checks import check_int
from ..base.processes import usable_cores
from ..models.feeding import FeedCosts
from .transfer import shared_memory_handover_s

__all__ = ["StageCosts", "measure_stages", "ItemRatio", "measure_item_ratio", "measure_slowdown",
           "measure_stall_free_step", "measure_loader_costs", "measure_feed_costs"]


def _one_thread(run: Callable[[], Any]) -> Any:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run()
    finally:
        torch.set_num_threads(threads)


def _fresh_indices(n: int, seed: int = 0):
    """Indices of ``n`` items in a fixed shuffled order, none twice until all are used."""
    import random

    order = list(range(n))
    random.Random(seed).shuffle(order)
    while True:
        yield from order


def _per_item(dataset: Any, indices: Sequence[int]) -> float:
    began = time.perf_counter()
    for i in indices:
        dataset[i]
    return (time.perf_counter() - began) / len(indices)


@dataclass(frozen=True)
class StageCosts:
    """Seconds per item of each stage of the two faces pipelines, on one thread (the fastest of
    ``rounds``), and the bytes of an item each hands over."""

    plain: dict[str, float]
    recommended: dict[str, float]
    plain_item_bytes: int
    recommended_item_bytes: int

    def rows(self) -> list[tuple[str, float, float]]:
        """(stage, plain seconds, recommended seconds), with a total."""
        names = list(dict.fromkeys([*self.plain, *self.recommended]))
        rows = [(n, self.plain.get(n, 0.0), self.recommended.get(n, 0.0)) for n in names]
        return rows + [("item, in all", sum(self.plain.values()), sum(self.recommended.values()))]


def measure_stages(root: Any = None, items: int = 32, rounds: int = 3, seed: int = 0) -> StageCosts:
    """Time the faces' pipelines stage by stage (:mod:`feedgpu.workloads.faces_on_gpu`), one
    thread, the same ``items`` files for both, each stage's fastest of ``rounds`` passes.

    Stages: ``read`` (the file's bytes), ``decode`` (PIL then RGB; ``decode_jpeg``), ``crop,
    resize, flip`` (the same random parameters for both, drawn once per item), ``to float,
    normalise`` (the plain pipeline's ``ToTensor`` and ``Normalize``; on the GPU for the
    recommended one, so not here).
    """
    import io

    from PIL import Image
    from torchvision.io import ImageReadMode, decode_jpeg
    from torchvision.transforms import functional as F
    from torchvision.transforms import v2
    from torchvision.transforms.v2 import functional as F2

    from ..workloads import faces_on_gpu as faces

    dataset = faces.plain_dataset(root)
    paths = [dataset.samples[(seed + 7919 * k) % len(dataset.samples)][0] for k in range(check_int("items", items, 1))]
    raw = [open(p, "rb").read() for p in paths]  # noqa: SIM115 - read once, closed by the garbage collector
    generator = torch.Generator().manual_seed(seed)
    crop = v2.RandomResizedCrop(faces.CROP)
    torch.manual_seed(seed)
    params = [crop.make_params([torch.empty(3, 250, 250)]) for _ in paths]
    flips = torch.rand(len(paths), generator=generator) < 0.5

    def plain_decode():
        return [Image.open(io.BytesIO(b)).convert("RGB") for b in raw]

    def rec_decode():
        return [decode_jpeg(torch.frombuffer(bytearray(b), dtype=torch.uint8), mode=ImageReadMode.RGB) for b in raw]

    pil, tensors = plain_decode(), rec_decode()

    def box(p: dict) -> tuple[int, int, int, int]:
        return p["top"], p["left"], p["height"], p["width"]

    def plain_crop():
        out = []
        for img, p, f in zip(pil, params, flips):
            img = F.resized_crop(img, *box(p), [faces.CROP, faces.CROP])
            out.append(F.hflip(img) if f else img)
        return out

    def rec_crop():
        out = []
        for t, p, f in zip(tensors, params, flips):
            t = F2.resized_crop(t, *box(p), [faces.CROP, faces.CROP], antialias=True)
            out.append(F2.horizontal_flip(t) if f else t)
        return out

    cropped = plain_crop()

    def plain_float():
        return [F.normalize(F.to_tensor(img), faces.MEAN, faces.STD) for img in cropped]

    def read():
        return [open(p, "rb").read() for p in paths]  # noqa: SIM115

    def fastest(run: Callable[[], Any]) -> float:
        best = float("inf")
        for _ in range(check_int("rounds", rounds, 1)):
            began = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - began)
        return best / len(paths)

    def run() -> StageCosts:
        read_s = fastest(read)
        plain = {"read": read_s, "decode": fastest(plain_decode), "crop, resize, flip": fastest(plain_crop),
                 "to float, normalise": fastest(plain_float)}
        rec = {"read": read_s, "decode": fastest(rec_decode), "crop, resize, flip": fastest(rec_crop),
               "to float, normalise": 0.0}
        return StageCosts(plain, rec, 3 * faces.CROP * faces.CROP * 4, 3 * faces.CROP * faces.CROP)

    return _one_thread(run)


@dataclass(frozen=True)
class ItemRatio:
    """The recommended item's cost over the plain item's: the median of the rounds, and their range."""

    ratio: float
    low: float
    high: float
    plain_s: float
    recommended_s: float
    rounds: int


def measure_item_ratio(root: Any = None, items: int = 32, rounds: int = 5, seed: int = 0) -> ItemRatio:
    """``dataset[i]`` of :func:`~feedgpu.workloads.faces_on_gpu.recommended_dataset` over that of
    :func:`~feedgpu.workloads.faces_on_gpu.plain_dataset` (the whole item: read, decode,
    transform), one thread, in ``rounds`` rounds that alternate which goes first, so that a
    slow spell of the machine hits both. Every item timed is one not read before (as in a
    loader's epoch: a file read again comes from caches a loader's next item does not find).
    """
    from ..workloads import faces_on_gpu as faces

    plain, rec = faces.plain_dataset(root), faces.recommended_dataset(root)
    items = check_int("items", items, 1)
    fresh = _fresh_indices(len(plain), seed)

    def run() -> ItemRatio:
        _per_item(plain, [next(fresh) for _ in range(4)]), _per_item(rec, [next(fresh) for _ in range(4)])  # imports
        ratios, plain_s, rec_s = [], [], []
        for r in range(check_int("rounds", rounds, 1)):
            torch.manual_seed(seed + r)
            pair = ((plain, plain_s), (rec, rec_s)) if r % 2 == 0 else ((rec, rec_s), (plain, plain_s))
            for dataset, out in pair:
                out.append(_per_item(dataset, [next(fresh) for _ in range(items)]))
            ratios.append(rec_s[-1] / plain_s[-1])
        return ItemRatio(statistics.median(ratios), min(ratios), max(ratios), statistics.median(plain_s),
                         statistics.median(rec_s), len(ratios))

    return _one_thread(run)


def _timed_items(dataset: Any, indices: Sequence[int], start: Any, out: Any) -> None:
    torch.set_num_threads(1)
    start.wait()
    out.put(_per_item(dataset, indices))


def measure_slowdown(dataset: Any, counts: Sequence[int], items: int = 16, seed: int = 0) -> dict[int, float]:
    """Each item's cost when ``w`` processes make items at once, over its cost in one process
    alone, for each ``w`` in ``counts`` (forked processes, one thread each, as DataLoader
    workers; they start together at a barrier, each makes ``items`` items). What a worker
    count costs every worker on this machine: shared caches, memory bandwidth, a clock that
    drops under load, two hardware threads per core, more processes than cores. Every
    process reads items no other has read (a fixed shuffled order)."""
    context = multiprocessing.get_context("fork")
    fresh = _fresh_indices(len(dataset), seed)
    counts = sorted({check_int("count", w, 1) for w in counts} | {1})
    per_item: dict[int, float] = {}
    for w in counts:
        start, out = context.Barrier(w), context.Queue()
        procs = [context.Process(target=_timed_items, daemon=True,
                                 args=(dataset, [next(fresh) for _ in range(items)], start, out))
                 for p in range(w)]
        for proc in procs:
            proc.start()
        try:
            per_item[w] = statistics.median(out.get(timeout=600) for _ in procs)
        finally:
            for proc in procs:
                proc.join(timeout=10)
                if proc.is_alive():
                    proc.kill()
    return {w: per_item[w] / per_item[1] for w in counts if w > 1}


def measure_stall_free_step(step: Callable[[Any], Any], batch: Any, synchronize: Callable[[], None],
                            steps: int) -> tuple[float, float]:
    """Seconds per step on one batch held in memory (the loop's bound, nothing to wait for):
    5 untimed steps, then ``steps`` steps synchronised once, then ``steps`` synchronised after each."""
    for _ in range(5):
        step(batch)
    synchronize()
    began = time.perf_counter()
    for _ in range(steps):
        step(batch)
    synchronize()
    free = (time.perf_counter() - began) / steps
    began = time.perf_counter()
    for _ in range(steps):
        step(batch)
        synchronize()
    return free, (time.perf_counter() - began) / steps


def measure_loader_costs(dataset: Any, batch_size: int, *, counts: Sequence[int], pin: bool,
                         items: int = 32) -> FeedCosts:
    """The loading side of :class:`~feedgpu.models.feeding.FeedCosts` on this machine, before a
    loop runs (``step_s`` 0: the step is the caller's to measure): one item on one thread,
    collating a batch and writing it into shared memory
    (:func:`feedgpu.measure.transfer.shared_memory_handover_s`: the worker's side), pinning it
    on one thread where ``pin``, the main thread's side of the hand-over, and the slowdown at
    ``counts`` workers (:func:`measure_slowdown`). Every item timed is one not read before."""
    from torch.utils.data import default_collate

    fresh = _fresh_indices(len(dataset))

    def host() -> tuple[float, float, float, torch.Tensor]:
        item_s = _per_item(dataset, [next(fresh) for _ in range(items)])
        samples = [dataset[next(fresh)] for _ in range(batch_size)]
        began = time.perf_counter()
        collated = default_collate(samples)
        collate_s = time.perf_counter() - began
        images = collated[0] if isinstance(collated, (list, tuple)) else collated
        pin_s = 0.0
        if pin:
            images.pin_memory()  # the first pinning of a size allocates; the loop's reuse the cache
            began = time.perf_counter()
            images.pin_memory()
            pin_s = time.perf_counter() - began
        return item_s, collate_s, pin_s, images

    item_s, collate_s, pin_s, images = _one_thread(host)
    handover = shared_memory_handover_s(tuple(images.shape), images.dtype)
    return FeedCosts(step_s=0.0, item_s=item_s, batch_size=batch_size,
                     batch_bytes=images.numel() * images.element_size(), collate_s=collate_s + handover.send_s,
                     pin_s=pin_s, main_s=handover.receive_s, cores=usable_cores(),
                     slowdown=measure_slowdown(dataset, [w for w in counts if w > 1]),
                     notes=("measured on this machine before the loop ran",))


def measure_feed_costs(loader: Any, step: Callable[[Any], Any], synchronize: Callable[[], None], *,
                       counts: Sequence[int], steps: int = 30, items: int = 32) -> FeedCosts:
    """A loader's (give it ``num_workers=0``: its first batch is taken here) and step's
    :class:`~feedgpu.models.feeding.FeedCosts` on this machine, before its loop runs: the
    stall-free step (``steps`` steps on one batch as the loader hands it over, synchronised
    once), the main thread's launch of one step (after a synchronize: the host's part), and
    the loading side (:func:`measure_loader_costs`, pinning where the loader pins)."""
    batch = next(iter(loader))  # as handed over: pinned if the loader pins
    step_s, _ = measure_stall_free_step(step, batch, synchronize, steps)
    launches = []
    for _ in range(5):
        synchronize()
        began = time.perf_counter()
        step(batch)
        launches.append(time.perf_counter() - began)
    synchronize()
    loading = measure_loader_costs(loader.dataset, loader.batch_size, counts=counts, pin=bool(loader.pin_memory),
                                   items=items)
    return replace(loading, step_s=step_s, main_s=loading.main_s + statistics.median(launches))
