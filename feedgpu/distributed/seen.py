"""Which samples each rank saw: written by every rank, read back as one table.

Every rank of :mod:`feedgpu.distributed.epoch_script` writes one file in the run's folder::

    out/
        rank-0.json     {"rank": 0, "world_size": 2, "epochs": [{"epoch": 0,
        rank-1.json       "ids": [...], "workers": [...], "steps": 3, "load_s": ...}, ...],
                          "metrics": {...}, "started_at": ..., "imported_at": ...,
                          "ready_at": ..., "finished_at": ..., ...}

With ``--evaluate`` a record also holds ``"scored"``: the ``[sample_id, correct]`` pairs
that rank scored, padded duplicates included.

The times are ``time.time()`` stamps: when the process started, when it had imported
torch and the script, when it had joined the process group, and when it finished.

:func:`read_seen` turns the files into one row per sample seen, for plots and checks.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from ..base.files import write_json_atomically

__all__ = ["rank_path", "write_rank", "read_ranks", "read_seen"]

COLUMNS = ["rank", "epoch", "position", "sample_id", "worker"]


def rank_path(outdir: str | os.PathLike, rank: int) -> Path:
    """Where ``rank`` writes its record in ``outdir``."""
    return Path(outdir) / f"rank-{rank}.json"


def write_rank(outdir: str | os.PathLike, record: dict) -> Path:
    """Write one rank's record (a dict with at least ``"rank"``); return its path."""
    path = rank_path(outdir, record["rank"])
    write_json_atomically(path, record)
    return path


def read_ranks(outdir: str | os.PathLike) -> list[dict]:
    """Every rank's record in ``outdir``, sorted by rank.

    Raises:
        FileNotFoundError: ``outdir`` holds no ``rank-*.json`` (did the run start? see its logs).
    """
    paths = sorted(Path(outdir).glob("rank-*.json"))
    if not paths:
        raise FileNotFoundError(f"no rank-*.json in {outdir}: no rank finished an epoch")
    return sorted((json.loads(p.read_text()) for p in paths), key=lambda r: r["rank"])


def read_seen(outdir: str | os.PathLike) -> pd.DataFrame:
    """One row per sample seen: ``rank, epoch, position, sample_id, worker``.

    ``position`` counts from 0 within the rank's epoch, in the order its loader gave the
    samples; ``worker`` is the DataLoader worker that loaded it (0 without workers).
    Rows are sorted by rank, epoch and position.
    """
    rows = [(r["rank"], e["epoch"], pos, sample_id, worker)
            for r in read_ranks(outdir) for e in r["epochs"]
            for pos, (sample_id, worker) in enumerate(zip(e["ids"], e["workers"]))]
    return (pd.DataFrame(rows, columns=COLUMNS).astype("int64")
            .sort_values(["rank", "epoch", "position"], ignore_index=True))
