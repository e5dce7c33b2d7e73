"""Pictures of what each rank saw, from :func:`~feedgpu.distributed.seen.read_seen`'s table."""

from __future__ import annotations

import collections

import matplotlib.pyplot as plt
import pandas as pd

__all__ = ["plot_seen", "plot_copies"]

RANK_COLOURS = ["tab:blue", "tab:orange", "tab:green", "tab:purple"]


def plot_seen(df: pd.DataFrame, ax: plt.Axes, title: str = "") -> plt.Axes:
    """One row per (epoch, rank), one box per sample in the order the rank saw it.

    Each box shows the sample id, in the rank's colour; an id seen more than once in its
    epoch (a padded duplicate) has a red frame. Epochs read top to bottom.
    """
    rows = list(df.groupby(["epoch", "rank"]).groups)
    width = int(df.position.max()) + 1 if len(df) else 1
    for y, (epoch, rank) in enumerate(rows):
        part = df[(df.epoch == epoch) & (df["rank"] == rank)]
        counts = collections.Counter(df[df.epoch == epoch].sample_id)
        for pos, sample_id in zip(part.position, part.sample_id):
            twice = counts[sample_id] > 1
            ax.add_patch(plt.Rectangle((pos + 0.05, y + 0.1), 0.9, 0.8,
                                       facecolor=RANK_COLOURS[rank % len(RANK_COLOURS)], alpha=0.35,
                                       edgecolor="red" if twice else "none", linewidth=2))
            ax.text(pos + 0.5, y + 0.5, str(sample_id), ha="center", va="center", fontsize=8)
    ax.set_xlim(0, width)
    ax.set_ylim(len(rows), 0)
    ax.set_yticks([y + 0.5 for y in range(len(rows))],
                  [f"epoch {e}, rank {r}" for e, r in rows], fontsize=8)
    ax.set_xlabel("position in the rank's epoch")
    ax.set_title(title, fontsize=9)
    return ax


def plot_copies(df: pd.DataFrame, n_items: int, ax: plt.Axes, title: str = "") -> plt.Axes:
    """How many times each id was loaded, stacked by who loaded it (rank, worker)."""
    loaders = sorted(set(zip(df["rank"], df.worker)))
    bottom = [0] * n_items
    for rank, worker in loaders:
        mine = collections.Counter(df[(df["rank"] == rank) & (df.worker == worker)].sample_id)
        heights = [mine.get(i, 0) for i in range(n_items)]
        ax.bar(range(n_items), heights, bottom=bottom, label=f"rank {rank}, worker {worker}",
               color=RANK_COLOURS[rank % len(RANK_COLOURS)], alpha=0.45 + 0.4 * (worker % 2),
               edgecolor="white")
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.axhline(1, color="black", linestyle=":", linewidth=1)
    ax.set_xticks(range(n_items))
    ax.set(xlabel="sample id", ylabel="times loaded", title=title)
    ax.title.set_fontsize(9)
    return ax
