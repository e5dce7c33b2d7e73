"""Data loading on several processes and machines: sharding, torchrun, what each rank saw.

* :mod:`~feedgpu.distributed.shards`: datasets of known ids, sharding by rank and by
  DataLoader worker, DistributedSampler's indices written out, exact evaluation;
* :mod:`~feedgpu.distributed.epoch_script`: the script every rank runs under torchrun;
* :mod:`~feedgpu.distributed.launch`: run torchrun from Python with a time limit and
  nothing left behind; the command line for one machine or several;
* :mod:`~feedgpu.distributed.seen`: each rank's record, and :func:`read_seen` to read them
  back as one table;
* :mod:`~feedgpu.distributed.phases`: several runs of the epoch script in one launch (torch
  imported once per rank), with functions of your own imported by name in every rank.

The pictures of who saw what are with every other plot of the course, in
:mod:`feedgpu.plots` (:func:`~feedgpu.plots.plot_seen`, :func:`~feedgpu.plots.plot_copies`).

Everything a DataLoader worker imports lives in an importable module (workers started with
*spawn* import their dataset by name).
"""

from .launch import (
    LaunchError,
    LaunchResult,
    free_port,
    launch_time_limit_s,
    run_torchrun,
    torchrun_command,
    worker_start_method,
)
from .seen import read_ranks, read_seen
from .shards import (
    IdDataset,
    IdStream,
    exact_accuracy,
    padded_indices,
    shard_by_rank_and_worker,
)

__all__ = [
    "LaunchError",
    "LaunchResult",
    "free_port",
    "launch_time_limit_s",
    "worker_start_method",
    "run_torchrun",
    "torchrun_command",
    "read_ranks",
    "read_seen",
    "IdDataset",
    "IdStream",
    "exact_accuracy",
    "padded_indices",
    "shard_by_rank_and_worker",
]
