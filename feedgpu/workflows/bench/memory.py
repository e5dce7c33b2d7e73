"""Memory in workers (notebook 06): what each DataLoader worker holds of a dataset, alone,
per layout and start method.

One epoch with 2 workers reads COCO-like annotation records (make_annotations) held in
three layouts: a list of Python dicts; every record pickled into one ``uint8`` buffer
plus ``int64`` offsets (the fix detectron2 uses), as numpy arrays; and the same buffer
as torch tensors.

The figure is counted page by page, not taken as a difference of two totals: after a
worker has read its share of the epoch, it lists the pages its dataset lives on
(:func:`feedgpu.measure.memory.object_regions`) and reads in ``/proc/self/pagemap``
which of them it maps alone (:func:`feedgpu.measure.memory.page_use`): its own copy,
shared with no other process. A count of pages, so never below zero, and no baseline to
subtract (a difference of two workers' USS, the former figure, moved by tens of MB with
what the machine's other processes did and went below zero). A forked worker's page
list is made in the main process before the workers start (the addresses are the same
in the child, and walking the objects in the child would itself copy them); a spawned
or forkserver worker walks its own copy.

* ``fork``: a worker starts sharing every page; what it holds alone is what it copied on
  write. The list's workers copy the pages of the records they read (reference counts
  are writes); the buffer's do not: the budget is buffer at most 10% of list.
* ``spawn`` and ``forkserver``: the dataset is pickled into every worker. The list and
  the numpy buffer arrive as bytes and are unpickled into a copy of the worker's own;
  the tensors arrive as handles to shared memory (torch's reductions for
  multiprocessing), which the worker maps with the main process: nothing alone.

Also here: the probe's cost to a loader's throughput (budget: under 5%).
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import warnings
from typing import Any, NamedTuple

from torch.utils.data import Dataset

from . import Figure, figure

RECORDS = 80_000   # about 120 MB of Python objects
WORKERS = 2
BATCH_SIZE = 1_000
CONTEXTS = ("fork", "spawn", "forkserver")
MB = 2**20


class PageReport(NamedTuple):
    """What one worker holds of its dataset, in bytes (see feedgpu.measure.memory.PageUse)."""

    worker: int
    total: int
    present: int
    alone: int


class PageCounted(Dataset):
    """``dataset``, plus ``workers`` items at the end: each is a :class:`PageReport` of the
    worker that builds it, on the pages of ``dataset`` in that worker.

    Args:
        dataset: the dataset the loader reads.
        workers: the loader's number of workers (one report each).
    """

    def __init__(self, dataset: Any, workers: int) -> None:
        from feedgpu.measure.memory import object_regions

        self.dataset, self.workers = dataset, workers
        # this process's pages of the dataset, which are a forked worker's too: listed here,
        # because walking the objects in a forked worker would copy the pages it walks
        self.regions = object_regions(dataset)

    def __getstate__(self) -> dict[str, Any]:
        # pickled into a spawned or forkserver worker: its copy of the dataset lies elsewhere
        return {**self.__dict__, "regions": None}

    def __len__(self) -> int:
        return len(self.dataset) + self.workers

    def __getitem__(self, index: int) -> Any:
        if index < len(self.dataset):
            return self.dataset[index]
        from torch.utils.data import get_worker_info

        from feedgpu.measure.memory import object_regions, page_use

        regions = self.regions if self.regions is not None else object_regions(self.dataset)
        info = get_worker_info()
        return PageReport(-1 if info is None else info.id, *page_use(regions))


def collate_reports(batch: list[Any]) -> Any:
    """A batch of records: their count (``collate_touch``); a batch of one report: the report."""
    from feedgpu.workloads.records import collate_touch

    if len(batch) == 1 and isinstance(batch[0], PageReport):
        return batch[0]
    return collate_touch(batch)


def held_alone(dataset: Any, context: str) -> list[PageReport]:
    """One epoch of ``dataset`` with WORKERS workers started by ``context``; each worker's
    report on its dataset's pages, made after it has read its share of the epoch.

    The batches go to the workers in turn (the DataLoader hands batch ``j`` to worker
    ``j % WORKERS`` while all are alive), and each worker handles its batches in order,
    so the last WORKERS batches, one report each, reach every worker after its records.

    Raises:
        RuntimeError: a worker did not report (the hand-out was not in turn).
    """
    from torch.utils.data import DataLoader

    counted = PageCounted(dataset, WORKERS)
    n = len(dataset)
    batches = [list(range(start, min(start + BATCH_SIZE, n))) for start in range(0, n, BATCH_SIZE)]
    batches += [[n + w] for w in range(WORKERS)]
    gc.collect()
    gc.freeze()  # the collector's own writes would copy pages too
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            loader = DataLoader(counted, batch_sampler=batches, num_workers=WORKERS,
                                collate_fn=collate_reports, multiprocessing_context=context)
            reports = [batch for batch in loader if isinstance(batch, PageReport)]
    finally:
        gc.unfreeze()
    if sorted(r.worker for r in reports) != list(range(WORKERS)):
        raise RuntimeError(f"expected one report from each of {WORKERS} workers, got {reports}")
    return reports


def layouts(records: list[Any]) -> dict[str, Any]:
    """The records as a list, as one numpy buffer with offsets, and as the same in tensors."""
    import torch

    from feedgpu.workloads.records import RecordListDataset, SerializedRecordDataset, serialize_records

    buffer, offsets = serialize_records(records)  # pickled once; the tensors hold a copy of their own
    return {"list": RecordListDataset(records),
            "buffer": SerializedRecordDataset(buffer, offsets),
            "tensors": SerializedRecordDataset(torch.from_numpy(buffer.copy()), torch.from_numpy(offsets.copy()))}


def bench_memory() -> list[Figure]:
    """What a worker holds of the dataset alone, per layout and start method; the probe's overhead."""
    from feedgpu.measure.memory import object_regions, page_use, probe_overhead
    from feedgpu.workloads.annotations import make_annotations

    found = layouts(make_annotations(RECORDS, seed=0))
    mp.get_context("forkserver").set_forkserver_preload(["torch", "feedgpu.workloads.records"])
    out: list[Figure] = [figure(f"memory {name}: the dataset's pages", page_use(object_regions(dataset)).total / MB,
                                "MB", f"{RECORDS:,} records, in the main process")
                         for name, dataset in found.items()]
    for context in CONTEXTS:
        alone = {}
        for name, dataset in found.items():
            reports = held_alone(dataset, context)
            alone[name] = sum(r.alone for r in reports) / MB
            present = sum(r.present for r in reports) / MB
            out.append(figure(f"memory {context} {name}: held alone by the workers", alone[name], "MB",
                              f"summed over {WORKERS} workers after their share of one epoch; "
                              f"{present:.0f} MB of the dataset's pages in them"))
        if context == "fork":  # the copy-on-write fix's budget
            out.append(figure("memory fork: buffer / list, held alone", alone["buffer"] / max(alone["list"], 1.0),
                              "x", "copied on write; budget <= 0.10"))
        out.append(figure(f"memory {context}: tensors / buffer, held alone",
                          alone["tensors"] / max(alone["buffer"], 1.0), "x",
                          "shared memory: nothing to copy" if context != "fork" else "neither is copied"))
    overhead = probe_overhead()
    out.append(figure("memory probe overhead on loader time", overhead["overhead"] * 100, "%",
                      f"median of {len(overhead['ratios'])} paired epochs, CPU-bound workers; budget < 5%; "
                      f"noise (quartiles) {overhead['quartiles'][0] - 1:+.1%} to {overhead['quartiles'][1] - 1:+.1%}"))
    return out


__all__ = ["PageReport", "PageCounted", "collate_reports", "held_alone", "layouts", "bench_memory"]
