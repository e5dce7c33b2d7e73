"""Measure a DataLoader over a grid of settings and plot the result.

Example::

    def make_loader(num_workers, batch_size):
        return DataLoader(SleepDataset(400, 0.005), batch_size=batch_size,
                          num_workers=num_workers)

    df = sweep(make_loader, {"num_workers": [0, 1, 2], "batch_size": [8, 32]},
               batches=10, step=0.02)
    plot_sweep(df, x="num_workers", hue="batch_size")
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .timing import LoaderTiming, shutdown_workers, time_loader

logger = logging.getLogger(__name__)

__all__ = ["grid_settings", "sweep", "plot_sweep", "RESULT_COLUMNS"]

#: Result columns of :func:`sweep`, after the parameter columns.
RESULT_COLUMNS: tuple[str, ...] = (
    "mean_s_per_batch",
    "std_s_per_batch",
    "startup_s",
    "items_per_s",
    "batches_per_s",
    "wait_fraction",
    "n_batches",
    "repeats",
)


def grid_settings(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, in a fixed order.

    The order is that of :func:`itertools.product` over the keys in the order given: the
    last key varies fastest. ``{"a": [1, 2], "b": ["x", "y"]}`` gives
    ``[{a: 1, b: x}, {a: 1, b: y}, {a: 2, b: x}, {a: 2, b: y}]``.

    Args:
        grid: parameter name -> list (or tuple, or range) of values to try.

    Returns:
        One dict of keyword arguments per combination.

    Raises:
        TypeError: if a value is not a list, tuple or range (a string would be split
            into characters).
        ValueError: if a value list is empty, or a parameter is named like a result
            column (see :data:`RESULT_COLUMNS`).
    """
    for name, values in grid.items():
        if not isinstance(values, (list, tuple, range)):
            raise TypeError(
                f"grid[{name!r}] must be a list of values, got {type(values).__name__}; "
                f"write {{{name!r}: [{values!r}]}} for a single value"
            )
        if len(values) == 0:
            raise ValueError(f"grid[{name!r}] is empty; give at least one value")
        if name in RESULT_COLUMNS:
            raise ValueError(f"grid parameter {name!r} clashes with a result column; rename it")
    names = list(grid)
    return [dict(zip(names, combo)) for combo in itertools.product(*grid.values())]


def _row(params: Mapping[str, Any], timing: LoaderTiming) -> dict[str, Any]:
    summary = timing.as_dict()
    row = dict(params)
    row.update({key: summary[key] for key in RESULT_COLUMNS})
    return row


def sweep(
    make_loader: Callable[..., Any],
    grid: Mapping[str, Sequence[Any]],
    *,
    progress: bool = True,
    **time_kwargs: Any,
) -> Any:
    """Time a loader for every combination of parameters in ``grid``.

    For each setting (see :func:`grid_settings` for the order), calls
    ``make_loader(**setting)``, measures it with :func:`~feedgpu.timing.time_loader`,
    then stops any persistent workers it kept, so settings do not compete for cores.

    Args:
        make_loader: builds a DataLoader from keyword arguments named as in ``grid``.
            It may use a parameter itself (e.g. a workload ``weight``) rather than pass
            it to the DataLoader.
        grid: parameter name -> list of values, e.g. ``{"num_workers": [0, 2, 4]}``.
        progress: show a tqdm progress bar (on stderr).
        **time_kwargs: passed to ``time_loader`` (``batches``, ``warmup``, ``repeats``,
            ``step``).

    Returns:
        A pandas DataFrame, one row per setting in grid order: one column per parameter,
        then ``mean_s_per_batch``, ``std_s_per_batch``, ``startup_s``, ``items_per_s``,
        ``batches_per_s``, ``wait_fraction``, ``n_batches`` and ``repeats``.

    Raises:
        TypeError, ValueError: for a malformed grid (see :func:`grid_settings`), or from
            ``time_loader`` for bad timing arguments or a loader that is too short.
    """
    import pandas as pd
    from tqdm import tqdm

    settings = grid_settings(grid)
    rows = []
    bar = tqdm(settings, desc="sweep", unit="setting", disable=not progress)
    try:
        for params in bar:
            bar.set_postfix(params)
            loader = make_loader(**params)
            try:
                timing = time_loader(loader, **time_kwargs)
            finally:
                shutdown_workers(loader)  # persistent workers would hold cores
            rows.append(_row(params, timing))
            logger.info("%s: %.5f s/batch", params, timing.mean_s_per_batch)
    finally:
        bar.close()
    return pd.DataFrame(rows, columns=[*grid, *RESULT_COLUMNS])


_NICE_LABELS = {
    "mean_s_per_batch": "time per batch",
    "startup_s": "start-up time",
    "items_per_s": "items per second",
    "batches_per_s": "batches per second",
    "wait_fraction": "fraction of time waiting for data",
}


def _std_column(df: Any, y: str) -> str | None:
    """The column holding the spread of ``y``: mean_X -> std_X, when present."""
    if y.startswith("mean_"):
        candidate = "std_" + y[len("mean_") :]
        if candidate in df.columns:
            return candidate
    return None


def plot_sweep(
    df: Any,
    x: str,
    y: str = "mean_s_per_batch",
    hue: str | None = None,
    ax: Any = None,
    *,
    title: str | None = None,
) -> Any:
    """Plot a sweep: ``y`` against ``x``, one line per value of ``hue``, with error bars.

    Error bars are one standard deviation over repeats, taken from ``std_...`` when
    ``y`` is ``mean_...`` and that column exists. Seconds-per-batch columns (names
    ending in ``_s_per_batch``, or in ``_s`` but not ``_per_s``) are drawn in milliseconds.

    Args:
        df: the DataFrame from :func:`sweep` (or any with the named columns).
        x: the column for the horizontal axis (numeric, or categories).
        y: the column for the vertical axis.
        hue: a column whose values each get their own line; None for one line.
        ax: a matplotlib Axes to draw on; a new figure is made when None.
        title: an optional title.

    Returns:
        The matplotlib Axes.

    Raises:
        KeyError: if ``x``, ``y`` or ``hue`` is not a column of ``df``.
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    for name in (x, y, hue):
        if name is not None and name not in df.columns:
            raise KeyError(f"{name!r} is not a column; columns are {list(df.columns)}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
    std_col = _std_column(df, y)
    in_ms = y.endswith("_s_per_batch") or (y.endswith("_s") and not y.endswith("_per_s"))
    scale = 1e3 if in_ms else 1.0
    numeric_x = all(isinstance(v, (int, float)) for v in df[x].tolist())
    categories = list(dict.fromkeys(df[x].tolist()))
    groups = [(None, df)] if hue is None else list(df.groupby(hue, sort=False))
    for key, part in groups:
        part = part.sort_values(x) if numeric_x else part
        xs = part[x].tolist() if numeric_x else [categories.index(v) for v in part[x]]
        ys = [v * scale for v in part[y]]
        err = [v * scale for v in part[std_col]] if std_col else None
        label = None if hue is None else f"{hue}={key}"
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=4, label=label)
    if not numeric_x:
        ax.set_xticks(range(len(categories)))
        ax.set_xticklabels([str(c) for c in categories])
    elif all(isinstance(v, int) for v in df[x].tolist()):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(x)
    nice = _NICE_LABELS.get(y, y)
    ax.set_ylabel(f"{nice} (ms)" if in_ms else nice)
    if all(math.isfinite(v) and v >= 0 for v in df[y]):
        ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if hue is not None:
        ax.legend(fontsize="small")
    if title:
        ax.set_title(title)
    return ax
