"""Workloads of known cost, and everything a DataLoader worker must import.

Autograded cells and tests never compare a raw time with a fixed number: they load items
whose cost we chose and check ratios against that cost. Workers started with *spawn*
(macOS, Windows) import their dataset by name, so every class a worker needs lives here:

* :mod:`~feedgpu.workloads.cost`: items that wait, compute, or both; thread pools in workers;
  the one filler of every item's payload (:func:`make_array`: item ``i`` holds ``i % 256``);
* :mod:`~feedgpu.workloads.arrays`: numpy items of a chosen shape and dtype (the sleeping
  :class:`SleepArrayDataset`, a :class:`SleepDataset`), and their collates;
* :mod:`~feedgpu.workloads.lfw`: the faces with a tensor decode path, and random augmentation;
* :mod:`~feedgpu.workflows.bench.planted`: loaders with one planted cause each (and a healthy one),
  for :func:`feedgpu.diagnose` and its tests.
"""

from .arrays import (
                   SleepArrayDataset,
                   collate_list,
                   collate_tensor,
                   make_array,
                   make_records,
)
from .cost import (
                   MatmulDataset,
                   MixedDataset,
                   SleepDataset,
                   SlowStartDataset,
                   SpinDataset,
                   ThreadReportDataset,
                   blas_threads,
                   limit_worker_threads,
                   spin_cpu,
)

__all__ = [
    "MatmulDataset", "MixedDataset", "SleepArrayDataset", "SleepDataset", "SlowStartDataset",
    "SpinDataset", "ThreadReportDataset", "blas_threads", "collate_list", "collate_tensor",
    "limit_worker_threads", "make_array", "make_records", "spin_cpu",
]
