"""Memory in workers (notebook 06): copy-on-write growth of a list against one buffer, per start method.

One epoch with 2 workers reads COCO-like annotation records (make_annotations), held
either as a list of Python dicts or serialised into one ``uint8`` buffer plus ``int64``
offsets (the fix detectron2 uses). The memory probe samples every worker's USS.

* ``growth``: the workers' USS growth during the epoch, summed, less that of the workers
  of an almost empty dataset (their own start-up: under *spawn*, importing torch). Under *fork* the list's
  workers copy every page they read (reference counts are writes), the buffer's do not:
  the budget is buffer at most 10% of list.
  Under *spawn* and *forkserver* the copy arrives while a worker starts, so whether it
  shows as growth depends on when the probe first saw the worker: no ratio is made of it.
* ``resident``: each worker's USS at its peak, above that of a worker of an almost empty
  dataset, averaged. Under *spawn* and *forkserver* the dataset is pickled into every
  worker, so both layouts are copied at start (nothing grows): the buffer's copy is
  compact, the list's is its objects again.

Also here: the probe's cost to a loader's throughput (budget: under 5%).
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import pickle
import warnings
from typing import Any

import numpy as np

from . import Figure, figure

RECORDS = 80_000   # about 120 MB of Python objects
WORKERS = 2
BATCH_SIZE = 1_000
CONTEXTS = ("fork", "spawn", "forkserver")


def _as_buffer(records: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Every record pickled, one after another, into one uint8 array; and the n + 1 offsets."""
    blobs = [pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL) for r in records]
    offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in blobs], out=offsets[1:])
    return np.frombuffer(b"".join(blobs), dtype=np.uint8), offsets


def _epoch(dataset: Any, context: str) -> Any:
    """The probe's table of one epoch of ``dataset`` with WORKERS workers started by ``context``."""
    from torch.utils.data import DataLoader

    from feedgpu.measure.memory import MemoryProbe
    from feedgpu.workloads.records import collate_touch

    gc.collect()
    gc.freeze()  # the collector's own writes would copy pages too
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            loader = DataLoader(dataset, batch_size=BATCH_SIZE, num_workers=WORKERS,
                                collate_fn=collate_touch, multiprocessing_context=context)
            with MemoryProbe(interval_s=0.05, max_overhead=0.2) as probe:
                for _ in probe.watch(loader):
                    pass
    finally:
        gc.unfreeze()
    return probe.table()


def _workers(table: Any) -> Any:
    from feedgpu.measure.memory import summarize

    return summarize(table, "uss").query("role == 'worker'")


def bench_memory() -> list[Figure]:
    """Worker USS, list vs one buffer, under fork, spawn and forkserver; the probe's overhead."""
    from feedgpu.measure.memory import probe_overhead
    from feedgpu.workloads.annotations import make_annotations
    from feedgpu.workloads.records import RecordListDataset, SerializedRecordDataset

    records = make_annotations(RECORDS, seed=0)
    layouts = {"list": RecordListDataset(records), "buffer": SerializedRecordDataset(*_as_buffer(records))}
    empty = RecordListDataset(make_annotations(WORKERS * BATCH_SIZE, seed=1))
    mp.get_context("forkserver").set_forkserver_preload(["torch", "feedgpu.workloads.records"])
    out: list[Figure] = []
    for context in CONTEXTS:
        baseline = _workers(_epoch(empty, context))
        growth, resident = {}, {}
        for name, dataset in layouts.items():
            workers = _workers(_epoch(dataset, context))
            growth[name] = float(workers["growth_mb"].sum() - baseline["growth_mb"].sum())
            resident[name] = float(workers["peak_mb"].mean() - baseline["peak_mb"].mean())
            out += [figure(f"memory {context} {name}: workers' USS growth", growth[name], "MB",
                           f"summed over {WORKERS} workers, one epoch of {RECORDS:,} records, less an empty dataset's"),
                    figure(f"memory {context} {name}: USS per worker", resident[name], "MB",
                           "peak, above a worker of an almost empty dataset")]
        if context == "fork":  # elsewhere both are copied while a worker starts: growth is when the probe looked
            out.append(figure("memory fork: buffer / list, USS growth", growth["buffer"] / max(growth["list"], 1.0),
                              "x", "budget <= 0.10"))
        out.append(figure(f"memory {context}: buffer / list, USS per worker",
                          resident["buffer"] / max(resident["list"], 1.0), "x",
                          "shared, not copied" if context == "fork" else "each worker unpickles its own copy"))
    overhead = probe_overhead()
    out.append(figure("memory probe overhead on loader time", overhead["overhead"] * 100, "%",
                      f"median of {len(overhead['ratios'])} paired epochs, CPU-bound workers; budget < 5%; "
                      f"noise (quartiles) {overhead['quartiles'][0] - 1:+.1%} to {overhead['quartiles'][1] - 1:+.1%}"))
    return out
