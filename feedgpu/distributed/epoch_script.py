"""What every rank runs: a few epochs over samples of known id, recording which it saw.

Started by ``torchrun``, once per process::

    torchrun --standalone --nproc-per-node=2 -m feedgpu.distributed.epoch_script --out runs/a

``torchrun`` sets ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` in each
process's environment; :func:`init_distributed` reads them (the ``env://`` method). The same
command with ``--nnodes=2`` and a rendezvous address spans two machines: nothing in this
file knows how many machines there are (see :func:`feedgpu.distributed.launch.torchrun_command`).

Each rank writes ``<out>/rank-<rank>.json`` (see :mod:`feedgpu.distributed.seen`) after
every epoch: the ids it saw in order, which DataLoader worker loaded each, and timings.
The options show one behaviour each:

* ``--dataset map`` (default): a :class:`~torch.utils.data.DistributedSampler`, with
  ``--shuffle``, ``--seed``, ``--drop-last`` and ``--set-epoch`` (or ``--no-set-epoch``);
* ``--dataset iterable --shard none|rank|rank-and-worker``: an
  :class:`~torch.utils.data.IterableDataset` that splits its stream, or fails to;
* ``--sync ddp``: a collective (a DistributedDataParallel step) on every batch, so ranks
  with different numbers of batches wait for each other; ``--uneven-fix join|truncate``
  repairs that, ``none`` leaves the hang (ended by ``--timeout-s``);
* ``--evaluate``: accuracy of a fixed "model" over the padded shards, counted naively and
  exactly;
* ``--worker-start-method``: how the DataLoader workers start (by default as in any new
  process on this machine, whatever the process that started torchrun chose);
* ``--crash-rank R``: rank ``R`` raises, to see how a failure is reported;
* ``--shard-fn`` / ``--indices-fn``: use a function of your own, ``"module:function"``.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import time
from datetime import timedelta
from pathlib import Path

import psutil
import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, Sampler

from feedgpu.distributed import seen, shards

logger = logging.getLogger(__name__)

IMPORTED_AT = time.time()  # torch and this script imported: often most of the start-up


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command-line options (``--help`` lists them)."""
    p = argparse.ArgumentParser(prog="python -m feedgpu.distributed.epoch_script",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for rank-<rank>.json")
    p.add_argument("--n-items", type=int, default=10, help="samples, with ids 0 .. n-1")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader workers per rank")
    p.add_argument("--worker-start-method", choices=multiprocessing.get_all_start_methods(),
                   help="how the DataLoader workers start (default: as any new process here, "
                        "fork on Linux before Python 3.14, spawn on macOS and Windows)")
    p.add_argument("--item-s", type=float, default=0.0, help="seconds each item waits")
    p.add_argument("--dataset", choices=["map", "iterable"], default="map")
    p.add_argument("--shuffle", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--drop-last", action="store_true")
    p.add_argument("--set-epoch", action=argparse.BooleanOptionalAction, default=True,
                   help="call sampler.set_epoch(epoch) before each epoch")
    p.add_argument("--shard", choices=sorted(shards.SHARDINGS), default="rank-and-worker",
                   help="how the iterable dataset splits its stream")
    p.add_argument("--shard-fn", help="module:function used instead of --shard")
    p.add_argument("--indices-fn", help="module:function used instead of DistributedSampler")
    p.add_argument("--sync", choices=["none", "ddp"], default="none",
                   help="ddp: a DistributedDataParallel step (a collective) on every batch")
    p.add_argument("--uneven-fix", choices=["none", "join", "truncate"], default="none")
    p.add_argument("--evaluate", action="store_true",
                   help="after the epochs, score the fixed model over DistributedSampler shards")
    p.add_argument("--crash-rank", type=int, help="this rank raises before its first epoch")
    p.add_argument("--timeout-s", type=float, default=60.0,
                   help="how long a collective waits for the other ranks before failing")
    return p.parse_args(argv)


def init_distributed(timeout_s: float) -> tuple[int, int]:
    """Join the process group (gloo, ``env://``); return ``(rank, world_size)``.

    gloo runs on CPUs, so the same script works on a laptop; on GPUs use ``"nccl"``. The
    timeout bounds every collective: a rank left waiting for a peer that never comes
    raises after ``timeout_s`` instead of hanging for ever.
    """
    dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s))
    return dist.get_rank(), dist.get_world_size()


def make_sampler(args: argparse.Namespace, rank: int, world_size: int) -> Sampler:
    """A DistributedSampler over ``n_items`` (or a FunctionSampler with ``--indices-fn``)."""
    if args.indices_fn:
        return shards.FunctionSampler(shards.load_function(args.indices_fn), args.n_items,
                                      rank, world_size, seed=args.seed, shuffle=args.shuffle,
                                      drop_last=args.drop_last)
    return DistributedSampler(shards.IdDataset(args.n_items), num_replicas=world_size,
                              rank=rank, shuffle=args.shuffle, seed=args.seed,
                              drop_last=args.drop_last)


def make_loader(args: argparse.Namespace, rank: int, world_size: int
                ) -> tuple[DataLoader, Sampler | None]:
    """The rank's DataLoader, and its sampler (None for the iterable dataset)."""
    if args.dataset == "iterable":
        shard_fn = (shards.load_function(args.shard_fn) if args.shard_fn
                    else shards.SHARDINGS[args.shard])
        data = shards.IdStream(args.n_items, rank, world_size, shard_fn, item_s=args.item_s)
        return DataLoader(data, batch_size=args.batch_size, num_workers=args.num_workers,
                          multiprocessing_context=_context(args)), None
    sampler = make_sampler(args, rank, world_size)
    loader = DataLoader(shards.IdDataset(args.n_items, item_s=args.item_s), sampler=sampler,
                        batch_size=args.batch_size, num_workers=args.num_workers,
                        multiprocessing_context=_context(args))
    return loader, sampler


def _context(args: argparse.Namespace) -> str | None:
    """The DataLoader's ``multiprocessing_context``: None (its default) without workers."""
    return args.worker_start_method if args.num_workers else None


def make_model() -> DistributedDataParallel:
    """A one-weight model in DDP: its backward averages gradients across ranks (a collective)."""
    torch.manual_seed(0)  # the same start on every rank (DDP also broadcasts rank 0's)
    return DistributedDataParallel(torch.nn.Linear(1, 1))


def train_step(model: DistributedDataParallel, ids: torch.Tensor) -> None:
    """One forward and backward pass; the backward waits for every rank's gradients."""
    x = ids.float().unsqueeze(1) / 100.0
    model(x).pow(2).mean().backward()
    model.zero_grad(set_to_none=True)


def still_loading(have_batch: bool) -> bool:
    """Whether *every* rank still has a batch: the truncation fix, one small collective a step."""
    flag = torch.tensor([int(have_batch)])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def run_epoch(loader: DataLoader, model: DistributedDataParallel | None, fix: str
              ) -> tuple[list[int], list[int], int]:
    """Load one epoch (training on each batch if ``model``); return ids, worker ids and steps."""
    ids: list[int] = []
    workers: list[int] = []
    steps = 0
    batches = iter(loader)
    while True:
        batch = next(batches, None)
        if model is not None and fix == "truncate" and not still_loading(batch is not None):
            break
        if batch is None:
            break
        sample_ids, worker_ids = batch
        if model is not None:
            train_step(model, sample_ids)
        ids += sample_ids.tolist()
        workers += worker_ids.tolist()
        steps += 1
    return ids, workers, steps


def scored_pairs(args: argparse.Namespace, rank: int, world_size: int) -> list[tuple[int, bool]]:
    """``(sample_id, correct)`` for this rank's evaluation shard (DistributedSampler, no shuffle)."""
    sampler = DistributedSampler(shards.IdDataset(args.n_items), num_replicas=world_size,
                                 rank=rank, shuffle=False, drop_last=args.drop_last)
    return [(i, shards.is_correct(i)) for i in sampler]


def evaluate(args: argparse.Namespace, rank: int, world_size: int) -> dict[str, float]:
    """Score :func:`~feedgpu.distributed.shards.is_correct` on this rank's shard, naively and exactly.

    Naive: every rank sums what it scored (padded duplicates included) and the sums are
    added across ranks. Exact: every rank's ``(id, correct)`` pairs are gathered and each
    id counts once, which gives the single-process answer on any number of ranks.
    """
    pairs = scored_pairs(args, rank, world_size)
    sums = torch.tensor([sum(c for _, c in pairs), len(pairs)], dtype=torch.float64)
    dist.all_reduce(sums)
    gathered: list[list[tuple[int, bool]]] = [[] for _ in range(world_size)]
    dist.all_gather_object(gathered, pairs)
    exact, distinct = shards.exact_accuracy(p for rank_pairs in gathered for p in rank_pairs)
    return {"naive_accuracy": float(sums[0] / sums[1]), "naive_count": int(sums[1]),
            "exact_accuracy": exact, "exact_count": distinct}


@record  # a failing rank's traceback goes to torchrun's error file and its failure summary
def main(argv: list[str] | None = None) -> None:
    """Run the epochs on this rank and write ``<out>/rank-<rank>.json`` after each."""
    args = parse_args(argv)
    rank, world_size = init_distributed(args.timeout_s)
    record_ = {"rank": rank, "world_size": world_size,
               "local_rank": int(os.environ.get("LOCAL_RANK", rank)), "pid": os.getpid(),
               "started_at": psutil.Process().create_time(), "imported_at": IMPORTED_AT,
               "ready_at": time.time(),
               "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
               "epochs": [], "metrics": {}}
    if args.crash_rank == rank:
        raise RuntimeError(f"planned failure on rank {rank} (--crash-rank {rank})")
    loader, sampler = make_loader(args, rank, world_size)
    model = make_model() if args.sync == "ddp" else None
    for epoch in range(args.epochs):
        if args.set_epoch and hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)  # without it every epoch repeats epoch 0's order
        start = time.perf_counter()
        if model is not None and args.uneven_fix == "join":
            with Join([model]):  # a rank that runs out shadows the others' collectives
                ids, workers, steps = run_epoch(loader, model, args.uneven_fix)
        else:
            ids, workers, steps = run_epoch(loader, model, args.uneven_fix)
        load_s = time.perf_counter() - start
        print(f"rank {rank}: epoch {epoch}: {len(ids)} samples in {steps} steps; "
              "waiting for the other ranks", flush=True)
        dist.barrier()  # the end of an epoch: every rank must get here
        record_["epochs"].append({"epoch": epoch, "ids": ids, "workers": workers,
                                  "steps": steps, "load_s": load_s})
        seen.write_rank(args.out, record_)
    if args.evaluate:
        record_["metrics"] = evaluate(args, rank, world_size)
        record_["scored"] = scored_pairs(args, rank, world_size)  # what this rank scored, padding included
    record_["finished_at"] = time.time()
    seen.write_rank(args.out, record_)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
