"""Which samples each process reads: sharding by rank and by DataLoader worker.

In data-parallel training every process (a *rank*) runs the same loop on its own part of
the data. Two levels split the data:

* **ranks** (``world_size`` of them, one per GPU or per process), and inside each rank
* **DataLoader workers** (``num_workers`` of them), which each run a copy of the dataset.

A map-style dataset is split by its *sampler*: :class:`~torch.utils.data.DistributedSampler`
hands each rank its own indices, and the DataLoader hands those indices to its workers, so
nothing here is needed for it. An :class:`~torch.utils.data.IterableDataset` has no sampler:
each copy of it (one per worker, in every rank) must pick its own share, or every copy
yields the whole stream and the model sees each sample ``world_size × num_workers`` times.

Every item here is a pair ``(sample_id, worker_id)``, so a test or a plot can check which
process saw which sample. The rank and the world size are passed in explicitly rather than
read from :mod:`torch.distributed` inside the dataset, because a DataLoader worker started
with *spawn* (macOS, Windows) has no process group of its own. All classes live in an
importable module so that spawned workers can import them by name.
"""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

import torch
from torch.utils.data import Dataset, IterableDataset, Sampler, get_worker_info

__all__ = [
    "SHARDINGS",
    "ShardFn",
    "IdDataset",
    "IdStream",
    "FunctionSampler",
    "worker_place",
    "no_shard",
    "shard_by_rank",
    "shard_by_rank_and_worker",
    "padded_indices",
    "load_function",
    "is_correct",
    "exact_accuracy",
]

# shard_fn(ids, rank, world_size, worker_id, num_workers) -> the ids this copy yields
ShardFn = Callable[[Sequence[int], int, int, int, int], Sequence[int]]


def worker_place() -> tuple[int, int]:
    """``(worker_id, num_workers)`` of the calling DataLoader worker; ``(0, 1)`` outside one."""
    info = get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


def no_shard(ids: Sequence[int], rank: int, world_size: int, worker_id: int,
             num_workers: int) -> list[int]:
    """Every copy yields every id: the duplicated-data bug, kept to be seen."""
    return list(ids)


def shard_by_rank(ids: Sequence[int], rank: int, world_size: int, worker_id: int,
                  num_workers: int) -> list[int]:
    """Split by rank only: ranks are disjoint, but each worker of a rank repeats its share."""
    return list(ids[rank::world_size])


def shard_by_rank_and_worker(ids: Sequence[int], rank: int, world_size: int, worker_id: int,
                             num_workers: int) -> list[int]:
    """Split by rank and worker: every id goes to exactly one worker of exactly one rank.

    The ``world_size × num_workers`` copies are numbered ``rank * num_workers + worker_id``
    and take ids round-robin, so shard sizes differ by at most one id.
    """
    copies = world_size * num_workers
    return list(ids[rank * num_workers + worker_id::copies])


SHARDINGS: dict[str, ShardFn] = {
    "none": no_shard,
    "rank": shard_by_rank,
    "rank-and-worker": shard_by_rank_and_worker,
}


def load_function(dotted: str) -> Callable:
    """The function named ``"package.module:function"``, imported.

    Raises:
        ValueError: ``dotted`` has no ``:``, or the module has no such attribute.
        ModuleNotFoundError: the module cannot be imported (is its folder on ``sys.path``?).
    """
    module_name, sep, attr = dotted.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"expected 'module:function', got {dotted!r}")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"module {module_name!r} ({module.__file__}) has no {attr!r}") from None


class IdDataset(Dataset):
    """Map-style: item ``i`` is ``(i, worker_id)``, after waiting ``item_s`` seconds.

    Args:
        n_items: number of samples; ids are ``0 .. n_items - 1``.
        item_s: seconds each item waits (stands for reading it), for throughput figures.
    """

    def __init__(self, n_items: int, item_s: float = 0.0):
        self.n_items = n_items
        self.item_s = item_s

    def __len__(self) -> int:
        return self.n_items

    def __getitem__(self, index: int) -> tuple[int, int]:
        if not 0 <= index < self.n_items:
            raise IndexError(f"index {index} out of range for {self.n_items} items")
        if self.item_s:
            time.sleep(self.item_s)
        return int(index), worker_place()[0]


class IdStream(IterableDataset):
    """Iterable: yields ``(sample_id, worker_id)`` for the ids ``shard_fn`` gives this copy.

    Each DataLoader worker of each rank runs its own copy of ``__iter__``; the copy asks
    :func:`worker_place` which worker it is and ``shard_fn`` which ids are its own.

    Args:
        n_items: the stream is ids ``0 .. n_items - 1``, in order.
        rank, world_size: this process's place among the ranks.
        shard_fn: a :data:`ShardFn`; :func:`shard_by_rank_and_worker` is the correct one.
        item_s: seconds each item waits.
    """

    def __init__(self, n_items: int, rank: int, world_size: int,
                 shard_fn: ShardFn = shard_by_rank_and_worker, item_s: float = 0.0):
        self.n_items = n_items
        self.rank = rank
        self.world_size = world_size
        self.shard_fn = shard_fn
        self.item_s = item_s

    def __iter__(self) -> Iterator[tuple[int, int]]:
        worker_id, num_workers = worker_place()
        ids = range(self.n_items)
        for sample_id in self.shard_fn(ids, self.rank, self.world_size, worker_id, num_workers):
            if self.item_s:
                time.sleep(self.item_s)
            yield int(sample_id), worker_id


def padded_indices(n_items: int, rank: int, world_size: int, *, epoch: int = 0, seed: int = 0,
                   shuffle: bool = True, drop_last: bool = False) -> list[int]:
    """The indices :class:`~torch.utils.data.DistributedSampler` gives ``rank``, written out.

    One permutation (seeded by ``seed + epoch``, the same on every rank) is padded with its
    own first indices up to a multiple of ``world_size`` (or cut down to one, with
    ``drop_last``), then dealt round-robin. A reference for tests and for a student's own
    sampler function.
    """
    if shuffle:
        g = torch.Generator()
        g.manual_seed(seed + epoch)
        order = torch.randperm(n_items, generator=g).tolist()
    else:
        order = list(range(n_items))
    if drop_last:
        total = (n_items // world_size) * world_size
        order = order[:total]
    else:
        total = math.ceil(n_items / world_size) * world_size
        while len(order) < total:  # n_items may be smaller than the padding needed
            order += order[: total - len(order)]
    return order[rank:total:world_size]


class FunctionSampler(Sampler[int]):
    """A distributed sampler whose indices come from a function (for example a student's).

    ``indices_fn(n_items, rank, world_size, epoch=, seed=, shuffle=, drop_last=)`` returns
    the list of indices for ``rank``, with the signature of :func:`padded_indices`.
    ``set_epoch`` works as on :class:`~torch.utils.data.DistributedSampler`.
    """

    def __init__(self, indices_fn: Callable[..., Sequence[int]], n_items: int, rank: int,
                 world_size: int, *, seed: int = 0, shuffle: bool = True, drop_last: bool = False):
        self.indices_fn = indices_fn
        self.n_items, self.rank, self.world_size = n_items, rank, world_size
        self.seed, self.shuffle, self.drop_last = seed, shuffle, drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _indices(self) -> list[int]:
        return [int(i) for i in self.indices_fn(
            self.n_items, self.rank, self.world_size, epoch=self.epoch, seed=self.seed,
            shuffle=self.shuffle, drop_last=self.drop_last)]

    def __iter__(self) -> Iterator[int]:
        return iter(self._indices())

    def __len__(self) -> int:
        return len(self._indices())


def is_correct(sample_id: int) -> bool:
    """The course's fixed "model": it gets every third sample wrong (ids 0, 3, 6, ...).

    A fixed rule instead of a trained model, so the true accuracy of any set of ids is known.
    """
    return sample_id % 3 != 0


def exact_accuracy(pairs: Iterable[tuple[int, bool]]) -> tuple[float, int]:
    """Accuracy over distinct samples: ``(accuracy, number of distinct ids)``.

    ``pairs`` are ``(sample_id, correct)`` gathered from every rank. A sample that
    :class:`~torch.utils.data.DistributedSampler` padded in twice counts once, so the result
    is the same on any number of ranks.

    Raises:
        ValueError: one id has two different outcomes (the ranks did not evaluate the same model).
    """
    outcome: dict[int, bool] = {}
    for sample_id, correct in pairs:
        if outcome.setdefault(int(sample_id), bool(correct)) != bool(correct):
            raise ValueError(f"sample {sample_id} was scored both correct and wrong")
    if not outcome:
        return float("nan"), 0
    return sum(outcome.values()) / len(outcome), len(outcome)
