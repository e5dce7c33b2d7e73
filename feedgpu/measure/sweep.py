"""Measure a DataLoader over a grid of settings (plot it with :func:`feedgpu.plots.plot_sweep`).

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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .timing import LoaderTiming, shutdown_workers, time_loader

__all__ = [
    "RESULT_COLUMNS",
    "grid_settings",
    "sweep",
]


logger = logging.getLogger(__name__)


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
    ``make_loader(**setting)``, measures it with :func:`~feedgpu.measure.timing.time_loader`,
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
