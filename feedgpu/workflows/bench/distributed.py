"""Beyond one process (notebook 08): what a real ``torchrun`` launch costs, and what each rank loads.

Two launches of the course's epoch script (:mod:`feedgpu.distributed.epoch_script`):
one process, then two (``--standalone``, gloo). Items wait a known time each (a sleep,
no CPU), so the loader's rate is set by the waiting and the figures compare like with
like: each rank of two should load as fast as one process alone, and the two together
twice as fast.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from . import Figure, figure

ITEM_S = 0.01   # seconds each item waits
N_ITEMS = 240   # in all; each of 2 ranks loads half
EPOCHS = 2      # the first epoch's rate is the one reported; the second checks it


def _launch(nproc: int, out: Path) -> tuple[float, list[float]]:
    """(seconds until every rank was in the process group, items/s of each rank in epoch 1)."""
    from feedgpu.distributed.launch import run_torchrun
    from feedgpu.distributed.seen import read_ranks

    result = run_torchrun(args=["--out", str(out), "--n-items", str(N_ITEMS), "--epochs", str(EPOCHS),
                                "--batch-size", "8", "--item-s", str(ITEM_S)],
                          nproc_per_node=nproc, timeout_s=180).check()
    ranks = read_ranks(out)
    ready_s = max(r["ready_at"] for r in ranks) - result.started_at
    rates = [len(r["epochs"][0]["ids"]) / r["epochs"][0]["load_s"] for r in ranks]
    return ready_s, rates


def bench_distributed() -> list[Figure]:
    """torchrun start-up with 1 and 2 processes; loader items/s per rank against one process."""
    with tempfile.TemporaryDirectory(prefix="feedgpu-bench-torchrun-") as tmp:
        ready_1, (alone,) = _launch(1, Path(tmp) / "one")
        ready_2, per_rank = _launch(2, Path(tmp) / "two")
    note = f"{N_ITEMS} items of {ITEM_S * 1e3:.0f} ms, 0 workers"
    return [figure("torchrun start-up, 1 process", ready_1, "s", "launch to every rank in the process group"),
            figure("torchrun start-up, 2 processes", ready_2, "s", "launch to every rank in the process group"),
            figure("items/s, one process", alone, "items/s", note),
            *[figure(f"items/s, rank {rank} of 2", rate, "items/s", note) for rank, rate in enumerate(per_rank)],
            figure("slowest rank of 2 / one process", min(per_rank) / alone, "x", "ideal 1.0: ranks load in parallel"),
            figure("2 ranks together / one process", sum(per_rank) / alone, "x", "ideal 2.0")]
