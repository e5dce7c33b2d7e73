"""Tests for feedgpu.measure.sweep: measuring a grid of loader settings, and its plot.

Measured checks use SleepDataset items of known cost and compare ratios with wide
tolerances; structural checks use loaders whose items cost nothing.
"""

from __future__ import annotations

import multiprocessing

import matplotlib

matplotlib.use("Agg")

import pandas as pd
import pytest
from torch.utils.data import DataLoader

from feedgpu.measure.sweep import grid_settings, sweep
from feedgpu.plots import plot_sweep
from feedgpu.workloads import SleepDataset

pytestmark = pytest.mark.unit

RESULT_COLUMNS = [
    "mean_s_per_batch",
    "std_s_per_batch",
    "startup_s",
    "items_per_s",
    "wait_fraction",
]


def free_loader(batch_size: int = 4, num_workers: int = 0, **kwargs) -> DataLoader:
    """A loader whose items cost nothing, for structural tests."""
    return DataLoader(
        SleepDataset(64, 0.0), batch_size=batch_size, num_workers=num_workers, **kwargs
    )


def test_grid_settings_is_the_cartesian_product_last_key_fastest():
    settings = grid_settings({"a": [1, 2], "b": ["x", "y", "z"]})
    expected = [
        {"a": 1, "b": "x"},
        {"a": 1, "b": "y"},
        {"a": 1, "b": "z"},
        {"a": 2, "b": "x"},
        {"a": 2, "b": "y"},
        {"a": 2, "b": "z"},
    ]
    assert settings == expected, f"grid order: {settings}"


@pytest.mark.parametrize(
    ("grid", "error"),
    [
        ({"num_workers": 2}, TypeError),  # not a list
        ({"name": "abc"}, TypeError),  # a string would be split into letters
        ({"num_workers": []}, ValueError),
        ({"mean_s_per_batch": [1]}, ValueError),  # clashes with a result column
    ],
)
def test_grid_settings_rejects_bad_grids(grid, error):
    with pytest.raises(error):
        grid_settings(grid)


def test_sweep_calls_make_loader_once_per_setting_in_order():
    calls = []

    def make_loader(batch_size, weight):
        calls.append((batch_size, weight))
        return free_loader(batch_size)

    df = sweep(
        make_loader,
        {"batch_size": [2, 4], "weight": [1, 2, 3]},
        progress=False,
        batches=2,
        warmup=0,
        repeats=1,
    )
    expected_calls = [(2, 1), (2, 2), (2, 3), (4, 1), (4, 2), (4, 3)]
    assert calls == expected_calls, f"make_loader calls: {calls}"
    assert (
        list(df[["batch_size", "weight"]].itertuples(index=False, name=None)) == expected_calls
    ), "one row per setting, in grid order"
    assert list(df.columns[:2]) == ["batch_size", "weight"], f"params first: {list(df.columns)}"
    missing = [c for c in RESULT_COLUMNS if c not in df.columns]
    assert not missing, f"result columns missing: {missing}"
    assert (df["n_batches"] == 2).all(), f"2 batches timed per setting: {df['n_batches'].tolist()}"


def test_sweep_time_per_batch_scales_with_batch_size():
    def make_loader(batch_size):
        return DataLoader(SleepDataset(120, 0.005), batch_size=batch_size, num_workers=0)

    df = sweep(make_loader, {"batch_size": [4, 8]}, progress=False, batches=4, warmup=1, repeats=2)
    small, large = df["mean_s_per_batch"].tolist()
    assert 1.5 <= large / small <= 2.5, (
        f"twice the items of fixed cost should take about twice as long: {small} vs {large} s"
    )
    ratio = df["items_per_s"].iloc[1] / df["items_per_s"].iloc[0]
    assert 0.7 <= ratio <= 1.4, f"items/s should not depend on batch size here, ratio {ratio}"
    assert (df["std_s_per_batch"] >= 0).all(), "spreads are never negative"


def test_sweep_workload_weight_and_workers():
    # A workload parameter that make_loader uses itself: the cost per item.
    def make_loader(num_workers, weight):
        return DataLoader(SleepDataset(160, 0.005 * weight), batch_size=4, num_workers=num_workers)

    df = sweep(
        make_loader,
        {"num_workers": [0, 2], "weight": [1, 2]},
        progress=False,
        batches=3,
        warmup=2,
        repeats=2,
    )
    t = df.set_index(["num_workers", "weight"])["mean_s_per_batch"]
    assert t[(0, 2)] / t[(0, 1)] >= 1.3, (
        f"doubling the weight should double the time: {t.to_dict()}"
    )
    assert t[(0, 2)] / t[(2, 2)] >= 1.4, (
        f"2 workers should speed up a sleep workload: {t.to_dict()}"
    )


def test_sweep_stops_persistent_workers_between_settings():
    before = {p.pid for p in multiprocessing.active_children()}

    def make_loader(num_workers):
        return free_loader(num_workers=num_workers, persistent_workers=True)

    sweep(make_loader, {"num_workers": [1, 2]}, progress=False, batches=2, warmup=0, repeats=2)
    left = {p.pid for p in multiprocessing.active_children()} - before
    assert left == set(), f"persistent workers left running after the sweep: {left}"


def test_sweep_passes_timing_errors_on():
    with pytest.raises(ValueError):
        sweep(
            lambda batch_size: free_loader(batch_size),
            {"batch_size": [64]},
            progress=False,
            batches=5,
            repeats=1,
        )


# --------------------------------------------------------------------------- plot


def sweep_frame() -> pd.DataFrame:
    """A hand-made sweep result: 2 batch sizes x 3 worker counts."""
    rows = []
    for bs in (8, 16):
        for w, t in zip((0, 1, 2), (0.04, 0.04, 0.02)):
            rows.append(
                {
                    "num_workers": w,
                    "batch_size": bs,
                    "mean_s_per_batch": t * bs / 8,
                    "std_s_per_batch": 0.001,
                }
            )
    return pd.DataFrame(rows)


def test_plot_sweep_one_line_per_hue_with_error_bars(tmp_path):
    ax = plot_sweep(sweep_frame(), x="num_workers", hue="batch_size")
    assert len(ax.containers) == 2, f"one error-bar series per batch size, got {len(ax.containers)}"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["batch_size=8", "batch_size=16"], f"legend: {labels}"
    first = ax.containers[0].lines[0]
    assert list(first.get_ydata()) == pytest.approx([40.0, 40.0, 20.0]), "seconds drawn as ms"
    assert ax.containers[0].has_yerr, "error bars from std_s_per_batch"
    ax.figure.savefig(tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").stat().st_size > 0, "the figure should save"


def test_plot_sweep_categorical_x_and_bad_column():
    df = sweep_frame().assign(kind=["a", "b", "c"] * 2)
    ax = plot_sweep(df[df.batch_size == 8], x="kind")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"], "categories as ticks"
    with pytest.raises(KeyError):
        plot_sweep(df, x="no_such_column")
