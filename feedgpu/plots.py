"""Every plot of the course, in one place.

Each function draws on a Matplotlib ``Axes`` (a new figure from ``plt.subplots`` when
none is given) and returns it; none calls ``plt.show()``, so the same code works inline
in Jupyter, in a script that saves the figure, and in tests with the Agg backend.

* faces: :func:`show_faces`;
* the overlap of loading and stepping: :func:`plot_overlap_timeline`;
* timings: :func:`bar_with_error`, :func:`plot_timings`, :func:`plot_waits`, :func:`plot_sweep`;
* where an image's time goes: :func:`plot_stages`;
* the pipeline model against measurement: :func:`plot_model_vs_measured`;
* memory over time: :func:`plot_memory`; per start method and layout of a dataset:
  :func:`plot_memory_grid`;
* copies to the device: :func:`plot_device_timeline`, :func:`plot_copy_strategies`,
  :func:`plot_copy_fit`, :func:`plot_pin_slowdown`;
* what each rank loaded, across ranks and workers: :func:`plot_seen`, :func:`plot_copies`;
* remote storage: :func:`plot_store_simulation`, :func:`plot_littles_law`,
  :func:`plot_first_batch_and_rate`, :func:`plot_slowest_request`, :func:`plot_retry_outcomes`.
* an accelerator's busy share, per run and after each fix: :func:`plot_busy_shares`, :func:`plot_fix_progress`.
"""

from __future__ import annotations

import logging
import math
import statistics
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .base.checks import check_int, check_seconds
from .models.copies import STRATEGIES, CopyCosts, CostFit, pin_then_copy_limit, pin_then_copy_slowdown
from .models.pipeline import simulate, steady_state_time_per_batch
from .palette import (BLUE, GREY, LIGHT, LOAD_COLOR, ORANGE, PURPLE, SERIES, SKY, STEP_COLOR, VERMILLION,
                      use_palette)
from .models.device import ENGINES, Span

if TYPE_CHECKING:  # an annotation only: importing it would import torch
    from .measure.timing import LoaderTiming

__all__ = [
    "SUMMARY_PREFIX",
    "describe",
    "show_faces",
    "plot_overlap_timeline",
    "bar_with_error",
    "plot_timings",
    "plot_waits",
    "plot_sweep",
    "STAGE_COLORS",
    "plot_stages",
    "plot_model_vs_measured",
    "ENGINE_COLORS",
    "plot_device_timeline",
    "plot_copy_strategies",
    "plot_copy_fit",
    "plot_pin_slowdown",
]


logger = logging.getLogger(__name__)

use_palette()  # the course's figures, those that name no colour too, take the palette's colours

#: What starts the one line that follows every figure of the course (:func:`describe`).
SUMMARY_PREFIX = "In the figure:"


def describe(summary: str) -> None:
    """Print the one line that follows a figure: what it shows, with the numbers to compare.

    A reader who cannot see the figure (a screen reader, a text-only log) loses nothing:
    every figure of the course is followed by such a line, and the reference site
    (``make site``) gives the figure this line as its alternative text. In Jupyter
    (matplotlib's inline backend) the open figures are shown first, so the line comes
    after its figure, not above it.

    Example::

        describe(f"serial {serial_ms:.0f} ms against overlapped {overlapped_ms:.0f} ms per step")
        # In the figure: serial 142 ms against overlapped 112 ms per step
    """
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None and "inline" in pyplot.get_backend():
        pyplot.show()  # the inline backend draws a cell's figures when it ends: now, above the line
    print(f"{SUMMARY_PREFIX} {' '.join(str(summary).split())}")



def _to_float_image(image: Any):
    """A PIL image, numpy array or tensor -> float tensor ``3 x H x W``."""
    import numpy as np
    import torch
    from torchvision.transforms import functional as F

    if isinstance(image, torch.Tensor):
        t = image.detach().cpu()
    elif isinstance(image, np.ndarray):
        t = torch.from_numpy(image)
        if t.ndim == 3 and t.shape[-1] in (1, 3, 4) and t.shape[0] not in (1, 3, 4):
            t = t.permute(2, 0, 1)  # H x W x C -> C x H x W
    else:  # a PIL image
        t = F.pil_to_tensor(image.convert("RGB"))
    if t.ndim == 2:
        t = t.unsqueeze(0)
    if t.ndim != 3:
        raise ValueError(f"expected an image of 2 or 3 dimensions, got shape {tuple(t.shape)}")
    if t.dtype == torch.uint8:
        t = t.float() / 255
    else:
        t = t.float()
    if t.shape[0] == 1:
        t = t.expand(3, -1, -1)
    elif t.shape[0] == 4:
        t = t[:3]
    return t


def _take(dataset_or_images: Any, labels: Any, n: int) -> tuple[list[Any], list[Any] | None]:
    """The first ``n`` images (and labels) of a batch tensor, a sequence or a Dataset."""
    import torch

    if isinstance(dataset_or_images, torch.Tensor):
        if dataset_or_images.ndim != 4:
            raise ValueError(
                f"a batch tensor must be N x C x H x W, got shape {tuple(dataset_or_images.shape)}"
            )
        images = list(dataset_or_images[:n])
        return images, (list(labels[:n]) if labels is not None else None)
    if labels is not None:  # a sequence of images with their labels
        return [dataset_or_images[i] for i in range(min(n, len(dataset_or_images)))], list(labels[:n])
    images, found = [], []
    for i in range(min(n, len(dataset_or_images))):
        item = dataset_or_images[i]
        if isinstance(item, tuple) and len(item) == 2:
            images.append(item[0])
            found.append(item[1])
        else:
            images.append(item)
    return images, (found or None)


def _name(label: Any, classes: Sequence[str] | None) -> str:
    try:
        index = int(label)
    except (TypeError, ValueError):
        return str(label)
    if classes is not None and 0 <= index < len(classes):
        return str(classes[index]).replace("_", " ")
    return str(index)


def show_faces(
    dataset_or_images: Any,
    labels: Any = None,
    classes: Sequence[str] | None = None,
    n: int = 16,
    nrow: int | None = None,
    ax: Any = None,
    title: str | None = None,
):
    """Draw faces as one grid (``torchvision.utils.make_grid``) with each person's name.

    Args:
        dataset_or_images: a Dataset whose items are ``(image, label)`` (PIL images or
            tensors), a batch tensor ``N x C x H x W``, or a sequence of images.
        labels: the labels of a batch or sequence (taken from the items of a Dataset).
        classes: names by label; default ``dataset.classes`` when the Dataset has them.
        n: how many faces to draw (the first ``n``).
        nrow: faces per row (as in ``make_grid``); default about the square root of ``n``.
        ax: the Axes to draw on; a new figure when ``None``.
        title: the title; default says how many faces.

    Returns:
        The Axes.

    Raises:
        ValueError: nothing to draw, or a tensor of the wrong shape.

    Images of different sizes are resized to the first one's size. Tensors with values
    outside [0, 1] (for example normalised ones) are rescaled per image for display.
    """
    import matplotlib.pyplot as plt
    import torch
    from torchvision.transforms import functional as F
    from torchvision.utils import make_grid

    if classes is None:
        classes = getattr(dataset_or_images, "classes", None)
    images, found = _take(dataset_or_images, labels, n)
    if not images:
        raise ValueError("show_faces: nothing to draw (an empty dataset or batch)")
    tensors = [_to_float_image(img) for img in images]
    height, width = tensors[0].shape[-2:]
    tensors = [t if t.shape[-2:] == (height, width) else F.resize(t, [height, width], antialias=True)
               for t in tensors]
    batch = torch.stack(tensors)
    out_of_range = bool(batch.min() < 0 or batch.max() > 1)
    nrow = nrow or max(1, math.ceil(math.sqrt(len(tensors))))
    padding = 2
    grid = make_grid(batch, nrow=nrow, padding=padding, normalize=out_of_range, scale_each=True,
                     pad_value=1.0)
    ncol_rows = math.ceil(len(tensors) / nrow)
    if ax is None:
        _, ax = plt.subplots(figsize=(min(2.0 * nrow, 14), min(2.0 * ncol_rows, 14) + 0.4))
    ax.imshow(grid.permute(1, 2, 0).clamp(0, 1).numpy())
    ax.set_axis_off()
    if found is not None:
        for i, label in enumerate(found):
            row, col = divmod(i, nrow)
            x = col * (width + padding) + padding + 2
            y = (row + 1) * (height + padding) - 2
            ax.text(x, y, _name(label, classes)[:22], fontsize=7, color="white", va="bottom",
                    ha="left", bbox={"facecolor": "black", "alpha": 0.55, "pad": 1, "linewidth": 0})
    ax.set_title(title if title is not None else f"{len(tensors)} faces")
    return ax


def _schedule(load_s: float, step_s: float, n_steps: int, overlapped: bool) -> dict[str, Any]:
    """Start times of every load and step, and the total, for the two-stage pipeline.

    Serial: load k, then step k, then load k + 1. Overlapped: one background loader
    starts loading batch k + 1 when step k takes batch k (it may run ahead by one batch);
    step k starts when batch k is loaded and step k - 1 is done.
    """
    load_s, step_s = check_seconds("load_s", load_s), check_seconds("step_s", step_s)
    n_steps = check_int("n_steps", n_steps, minimum=1)
    loads, steps = [], []
    if not overlapped:
        t = 0.0
        for _ in range(n_steps):
            loads.append(t)
            steps.append(t + load_s)
            t += load_s + step_s
        return {"load": loads, "step": steps, "total": t}
    load_start, step_end = 0.0, 0.0
    for _ in range(n_steps):
        loads.append(load_start)
        start = max(load_start + load_s, step_end)
        steps.append(start)
        step_end = start + step_s
        load_start = start  # the next batch loads while this one is stepped
    return {"load": loads, "step": steps, "total": step_end}


def plot_overlap_timeline(load_s: float, step_s: float, n_steps: int, ax: Any = None):
    """Draw the serial and the overlapped loop as a Gantt chart, one lane per activity.

    * serial: load batch k, then step on it; each step costs ``load_s + step_s``.
    * overlapped: batch k + 1 loads (in a worker) while step k runs; each step costs
      ``max(load_s, step_s)`` once the first batch is in.

    Args:
        load_s: seconds to load one batch.
        step_s: seconds of one training step.
        n_steps: steps to draw (a few: 4 to 8 read best).
        ax: the Axes to draw on; a new figure when ``None``.

    Returns:
        The Axes. Bars are labelled with the batch index; dashed lines mark each loop's
        end.

    Raises:
        ValueError: a negative time, or ``n_steps`` < 1.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    serial = _schedule(load_s, step_s, n_steps, overlapped=False)
    overlap = _schedule(load_s, step_s, n_steps, overlapped=True)
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 3.2))
    lanes = [
        ("serial: load", serial["load"], load_s, LOAD_COLOR),
        ("serial: step", serial["step"], step_s, STEP_COLOR),
        ("overlapped: load", overlap["load"], load_s, LOAD_COLOR),
        ("overlapped: step", overlap["step"], step_s, STEP_COLOR),
    ]
    height = 0.8
    for lane, (_, starts, duration, color) in enumerate(lanes):
        y = len(lanes) - 1 - lane
        ax.broken_barh([(s, duration) for s in starts], (y - height / 2, height),
                       facecolors=color, edgecolors="white")
        if n_steps <= 12 and duration > 0:
            for k, s in enumerate(starts):
                ax.text(s + duration / 2, y, str(k), ha="center", va="center", fontsize=8,
                        color="white")
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([name for name, *_ in reversed(lanes)])
    for name, result, y, va in (("serial", serial, 3.45, "bottom"),
                                ("overlapped", overlap, -0.45, "top")):
        total = result["total"]
        ax.axvline(total, color=GREY, linestyle="--", linewidth=1)
        ax.text(total, y, f" {name} ends: {total:.3g} s", va=va, ha="left", fontsize=8)
    ax.set_xlim(0, serial["total"] * 1.2 or 1.0)
    ax.set_ylim(-0.95, len(lanes) - 0.05)
    ax.set_xlabel("time (s)")
    ax.set_title(f"load {load_s * 1e3:.0f} ms, step {step_s * 1e3:.0f} ms: serial load + step = "
                 f"{(load_s + step_s) * 1e3:.0f} ms/step, overlapped max(load, step) = "
                 f"{max(load_s, step_s) * 1e3:.0f} ms/step")
    ax.legend(handles=[Patch(color=LOAD_COLOR, label="load a batch"),
                       Patch(color=STEP_COLOR, label="training step")],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return ax


def bar_with_error(
    labels: Sequence[Any],
    samples: Sequence[Sequence[float]],
    ax: Any = None,
    ylabel: str | None = None,
    title: str | None = None,
    predicted: Sequence[float] | None = None,
):
    """Bars of the mean of repeated measurements, with the standard deviation as error bar.

    Each repeat is also drawn as a dot, so a reader sees the spread and the outliers.

    Args:
        labels: one label per bar.
        samples: for each bar, the repeated measurements (one value is allowed: no error bar).
        ax: the Axes to draw on; a new figure when ``None``.
        ylabel, title: axis label and title.
        predicted: optional model value per bar, drawn as a black line across the bar.

    Returns:
        The Axes.

    Raises:
        ValueError: lengths differ, or a bar has no measurements.
    """
    import matplotlib.pyplot as plt

    if len(labels) != len(samples):
        raise ValueError(f"{len(labels)} labels but {len(samples)} groups of samples")
    if predicted is not None and len(predicted) != len(labels):
        raise ValueError(f"{len(labels)} labels but {len(predicted)} predicted values")
    values = [[float(v) for v in group] for group in samples]
    if any(not group for group in values):
        raise ValueError("every bar needs at least one measurement")
    means = [statistics.fmean(group) for group in values]
    stds = [statistics.stdev(group) if len(group) > 1 else 0.0 for group in values]
    if ax is None:
        longest = max(len(str(label)) for label in labels)
        _, ax = plt.subplots(figsize=(max(4.0, len(labels) * max(1.3, 0.085 * longest) + 1.5), 3.5))
    xs = list(range(len(labels)))
    ax.bar(xs, means, yerr=stds, capsize=6, color=BLUE, alpha=0.6,
           label="mean ± std")
    for x, group in zip(xs, values):
        offsets = [(i - (len(group) - 1) / 2) * 0.06 for i in range(len(group))]
        ax.scatter([x + o for o in offsets], group, color="black", s=10, zorder=3)
    if predicted is not None:
        for x, p in zip(xs, predicted):
            ax.hlines(p, x - 0.4, x + 0.4, colors=VERMILLION, linewidth=2,
                      label="model" if x == 0 else None)
    ax.set_xticks(xs)
    ax.set_xticklabels([str(label) for label in labels])
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    return ax


def _rows_from(results: Any) -> tuple[list[str], list[float], list[float]]:
    """Labels, means and stds (seconds) from a mapping of timings or a DataFrame."""
    if isinstance(results, Mapping):
        labels = [str(k) for k in results]
        means = [t.mean_s_per_batch for t in results.values()]
        stds = [t.std_s_per_batch for t in results.values()]
        return labels, means, stds
    columns = getattr(results, "columns", None)
    if columns is None or "mean_s_per_batch" not in columns:
        raise TypeError(
            "results must be a mapping of label -> LoaderTiming, or a DataFrame with a "
            f"'mean_s_per_batch' column (as sweep() returns), got {type(results).__name__}"
        )
    labels_src = results["label"] if "label" in columns else results.index
    labels = [str(v) for v in labels_src]
    means = [float(v) for v in results["mean_s_per_batch"]]
    if "std_s_per_batch" in columns:
        stds = [float(v) for v in results["std_s_per_batch"]]
    else:
        stds = [0.0] * len(means)
    return labels, means, stds


def plot_timings(results: Any, ax: Any = None, *, title: str | None = None) -> Any:
    """Plot mean time per batch with error bars (one standard deviation over repeats).

    Args:
        results: a mapping ``label -> LoaderTiming``, or a DataFrame with columns
            ``mean_s_per_batch`` and optionally ``std_s_per_batch`` and ``label``
            (otherwise the index labels the points).
        ax: a matplotlib Axes to draw on; a new figure is made when None.
        title: an optional title.

    Returns:
        The matplotlib Axes.

    Raises:
        TypeError: if ``results`` is neither of the accepted kinds.
    """
    import matplotlib.pyplot as plt

    labels, means, stds = _rows_from(results)
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
    xs = list(range(len(labels)))
    ax.errorbar(
        xs,
        [m * 1e3 for m in means],
        yerr=[s * 1e3 for s in stds],
        fmt="o",
        capsize=4,
        markersize=6,
    )
    ax.set_xticks(xs)
    ax.set_xticklabels(labels)
    ax.set_xlim(-0.5, len(xs) - 0.5)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("time per batch (ms)")
    ax.grid(axis="y", alpha=0.3)
    if title:
        ax.set_title(title)
    return ax


def plot_waits(timing: LoaderTiming, ax: Any = None, *, title: str | None = None) -> Any:
    """Plot the wait inside ``next()`` for every timed batch, one line per repeat.

    A dashed line marks the mean step time: waits well below it mean the workers keep
    up; waits near or above it mean the loop is starved for data.

    Args:
        timing: what :func:`time_loader` returned.
        ax: a matplotlib Axes to draw on; a new figure is made when None.
        title: an optional title.

    Returns:
        The matplotlib Axes.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
    offset = timing.warmup + 1  # timed batches start after start-up and warm-up
    for r, waits in enumerate(timing.waits_s):
        xs = range(offset, offset + len(waits))
        ax.plot(xs, [w * 1e3 for w in waits], marker=".", label=f"repeat {r + 1}")
    all_steps = [s for steps in timing.steps_s for s in steps]
    if all_steps and statistics.fmean(all_steps) > 0:
        ax.axhline(statistics.fmean(all_steps) * 1e3, color=GREY, linestyle="--", label="mean step")
    ax.set_xlabel("batch (0 = the start-up batch)")
    ax.set_ylabel("wait in next() (ms)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    if title:
        ax.set_title(title)
    return ax


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


#: Colours of the stages in :func:`plot_stages`.
STAGE_COLORS = {
    "read": GREY,
    "decode": BLUE,
    "augment": ORANGE,
    "to_tensor": SKY,
    "collate": PURPLE,
}


def plot_stages(
    results: Mapping[str, Mapping[str, float]], ax: Any = None, *, title: str | None = None
) -> Any:
    """Stacked bars: milliseconds per image of each stage, one bar per pipeline.

    Args:
        results: pipeline name -> what :func:`time_stages` returned (seconds per image).
        ax: a matplotlib Axes to draw on; a new figure is made when None.
        title: an optional title.

    Returns:
        The matplotlib Axes.
    """
    import matplotlib.pyplot as plt

    # Imported here: stages imports feedgpu.workloads (torchvision), absent from diagnose/'s package.
    from .measure.stages import STAGES

    names = list(results)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(5.0, 1.4 * len(names) + 2.5), 3.6), layout="constrained")
    xs = list(range(len(names)))
    bottom = [0.0] * len(names)
    for stage in STAGES:
        heights = [results[name].get(stage, 0.0) * 1e3 for name in names]
        ax.bar(xs, heights, bottom=bottom, width=0.6, label=stage, color=STAGE_COLORS[stage])
        bottom = [b + h for b, h in zip(bottom, heights)]
    for x, total in zip(xs, bottom):
        ax.text(x, total, f"{total:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(xs)
    ax.set_xticklabels(names)
    ax.set_ylabel("time per image (ms, one core)")
    ax.set_ylim(0, max(bottom) * 1.12 if bottom and max(bottom) > 0 else 1)
    ax.grid(axis="y", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], fontsize="small", loc="upper left",
              bbox_to_anchor=(1.0, 1.0))
    if title:
        ax.set_title(title)
    return ax


def plot_model_vs_measured(
    num_workers: Sequence[int],
    measured_s: Sequence[float],
    *,
    load_s: float,
    step_s: float,
    transfer_s: float = 0.0,
    measured_std: Sequence[float] | None = None,
    simulate_jitter: float | None = None,
    prefetch_factor: int = 2,
    ax: Any = None,
    title: str | None = None,
) -> Any:
    """Plot measured seconds per batch against the model's prediction.

    Draws the model (:func:`steady_state_time_per_batch`) for every worker count from 0
    to the largest measured one, the measurements as points with error bars, and, when
    ``simulate_jitter`` is given, the simulated steady state with that load jitter.

    Args:
        num_workers: worker counts measured.
        measured_s: measured seconds per batch, one per worker count.
        load_s, step_s, transfer_s: the model's costs (see
            :func:`steady_state_time_per_batch`).
        measured_std: optional spread of each measurement (drawn as error bars).
        simulate_jitter: if not None, also plot :func:`simulate` with this jitter.
        prefetch_factor: used for the simulation.
        ax: a matplotlib Axes to draw on; a new figure is made when None.
        title: an optional title.

    Returns:
        The matplotlib Axes.

    Raises:
        ValueError: if ``num_workers`` and ``measured_s`` differ in length, or a worker
            count is not a whole number >= 0.
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    workers = [check_int("num_workers", w) for w in num_workers]
    measured = [float(m) for m in measured_s]
    if len(workers) != len(measured):
        raise ValueError(
            f"num_workers has {len(workers)} values but measured_s has {len(measured)}"
        )
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
    grid = list(range(0, max(workers) + 1))
    model = [steady_state_time_per_batch(w, load_s, step_s, transfer_s) for w in grid]
    ax.plot(grid, [m * 1e3 for m in model], ".-", color=BLUE, label="model")
    err = None if measured_std is None else [float(s) * 1e3 for s in measured_std]
    ax.errorbar(
        workers,
        [m * 1e3 for m in measured],
        yerr=err,
        fmt="o",
        color=ORANGE,
        capsize=4,
        label="measured",
    )
    if simulate_jitter is not None:
        sims = [
            simulate(
                w,
                load_s,
                step_s,
                transfer_s=transfer_s,
                prefetch_factor=prefetch_factor,
                n_batches=400,
                load_jitter=simulate_jitter,
            ).steady_s_per_batch
            for w in grid
        ]
        ax.plot(
            grid,
            [s * 1e3 for s in sims],
            "x",
            color=SKY,
            label=f"simulated (jitter {simulate_jitter:g})",
        )
    floor = (step_s + transfer_s) * 1e3
    ax.axhline(floor, color=GREY, linestyle=":", label="step + transfer (floor with workers)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("num_workers")
    ax.set_ylabel("time per batch (ms)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    if title:
        ax.set_title(title)
    return ax


# Line styles by a process's role in a memory table (see feedgpu.measure.memory).
_ROLE_STYLES = {"main": "-", "worker": "--", "other": ":"}


def plot_memory(table: Any, metric: str = "pss", ax: Any = None, *, title: str | None = None) -> Any:
    """Plot one memory number of every process over time, one line per process.

    Args:
        table: a :meth:`feedgpu.measure.memory.MemoryProbe.table` (columns ``process``,
            ``role``, ``time_s`` and ``rss_mb``, ``uss_mb``, ``pss_mb``).
        metric: ``"rss"``, ``"uss"`` or ``"pss"`` (or the column name, ``"pss_mb"``).
        ax: a matplotlib Axes to draw on; a new figure is made when None.
        title: an optional title.

    Returns:
        The matplotlib Axes; each line is labelled ``"<role> <pid>"`` (solid for the main
        process, dashed for workers, dotted for other processes).

    Raises:
        ValueError: an unknown metric, or one the table has no values of (no PSS on macOS
            or Windows: plot ``"rss"`` or ``"uss"`` there).
    """
    import matplotlib.pyplot as plt

    name = metric[:-3] if metric.endswith("_mb") else metric
    if name not in ("rss", "uss", "pss"):
        raise ValueError(f"metric must be 'rss', 'uss' or 'pss', got {metric!r}")
    column = f"{name}_mb"
    rows = table.dropna(subset=[column])
    if rows.empty:
        raise ValueError(f"the table has no {name.upper()} values (not readable on this platform, or "
                         "not asked for with kinds=...): plot metric='rss' instead")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5), layout="constrained")
    order = {"main": 0, "worker": 1, "other": 2}
    groups = sorted(rows.groupby("process"), key=lambda g: (order.get(g[1]["role"].iloc[-1], 3), g[0]))
    for pid, samples in groups:
        samples = samples.sort_values("time_s", kind="stable")
        role = samples["role"].iloc[-1]
        ax.plot(samples["time_s"], samples[column], linestyle=_ROLE_STYLES.get(role, "-."),
                marker=".", label=f"{role} {pid}")
    ax.set_xlabel("time since the probe started (s)")
    ax.set_ylabel(f"{name.upper()} (MB)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", title="process")
    if title:
        ax.set_title(title)
    return ax


__all__.append("plot_memory")


def plot_memory_grid(cells: Any, ax: Any = None, *, title: str | None = None, vmax: float | None = None) -> Any:
    """A table of memory figures in MB as a heat map, each cell's value written in it.

    Args:
        cells: a pandas DataFrame of MB, e.g. rows the start methods and columns the
            layouts of a dataset (notebook 06's grid), drawn in its own order.
        ax: a matplotlib Axes to draw on; a new figure is made when None.
        title: an optional title.
        vmax: the MB of the darkest colour (default: the table's largest value), so that
            two grids side by side can share one scale. Values below zero (noise in a
            difference of two totals) take the lightest colour and keep their number.

    Returns:
        The matplotlib Axes.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    values = cells.to_numpy(dtype=float)
    top = max(float(np.nanmax(values)) if vmax is None else float(vmax), 1.0)
    if ax is None:
        _, ax = plt.subplots(figsize=(1.6 * values.shape[1] + 1.5, 0.9 * values.shape[0] + 1.2),
                             layout="constrained")
    ax.imshow(np.clip(values, 0, None), cmap="Reds", vmin=0, vmax=top)
    ax.set_xticks(range(values.shape[1]), [str(name).replace(" ", "\n", 1) for name in cells.columns])
    ax.set_yticks(range(values.shape[0]), [str(name) for name in cells.index])
    for (r, c), value in np.ndenumerate(values):
        text = "0" if -0.5 < value < 0.5 else f"{value:.0f}"  # no "-0"
        ax.text(c, r, text, ha="center", va="center", color="white" if value > 0.6 * top else "black")
    if title:
        ax.set_title(title)
    return ax


__all__.append("plot_memory_grid")


# --------------------------------------------------------------------------- copies to the device


#: Colours of the simulated device's spans: host work, host waits, copies, kernels.
ENGINE_COLORS = {"pin": ORANGE, "host": ORANGE, "wait": LIGHT,
                 "copy": PURPLE, "compute": SKY}


def _span_color(span: Span) -> str:
    if span.engine == "host":
        return ENGINE_COLORS["wait"] if span.op.startswith(("wait", "synchronize")) else ENGINE_COLORS["host"]
    return ENGINE_COLORS[span.engine]


def plot_device_timeline(timeline: Sequence[Span], ax: Any = None, *, total_s: float | None = None,
                         title: str | None = None, unit: str = "ms"):
    """Draw a simulated device's timeline: one lane per engine (host, copy, compute).

    Host work (pinning, staging a pageable copy) is orange, host waits grey, copies purple,
    kernels green; each bar carries the last word of its op (``b3``, ``t0``) when it is
    wide enough.

    Args:
        timeline: the spans, e.g. ``simulate_training(...).timeline``.
        ax: the Axes to draw on; a new figure when ``None``.
        total_s: when given, a dashed line and a label mark it (``SimRun.total_s``).
        title: the title; none when ``None``.
        unit: ``"ms"`` or ``"s"`` on the time axis.

    Returns:
        The Axes.

    Raises:
        ValueError: an empty timeline or an unknown unit.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if not timeline:
        raise ValueError("the timeline is empty: nothing to draw")
    scale = {"ms": 1e3, "s": 1.0}.get(unit)
    if scale is None:
        raise ValueError(f"unit must be 'ms' or 's', got {unit!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 2.6))
    end = max(s.end_s for s in timeline) if total_s is None else max(total_s, *(s.end_s for s in timeline))
    lanes = list(ENGINES)
    for span in timeline:
        y = len(lanes) - 1 - lanes.index(span.engine)
        width = (span.end_s - span.start_s) * scale
        ax.broken_barh([(span.start_s * scale, width)], (y - 0.4, 0.8),
                       facecolors=_span_color(span), edgecolors="white", linewidth=0.5)
        if width > 0.04 * end * scale and not span.op.startswith("synchronize"):
            ax.text(span.start_s * scale + width / 2, y, span.op.split()[-1].strip("()"),
                    ha="center", va="center", fontsize=7)
    if total_s is not None:
        ax.axvline(total_s * scale, color=GREY, linestyle="--", linewidth=1)
        ax.text(total_s * scale, len(lanes) - 0.5, f" total {total_s * scale:.3g} {unit}",
                va="bottom", ha="right", fontsize=8)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(list(reversed(lanes)))
    ax.set_ylim(-0.6, len(lanes) - 0.2)
    ax.set_xlim(0, end * scale * 1.02 or 1.0)
    ax.set_xlabel(f"time ({unit})")
    ax.legend(handles=[Patch(color=ENGINE_COLORS["host"], label="host work (pin, stage)"),
                       Patch(color=ENGINE_COLORS["wait"], label="host waits"),
                       Patch(color=ENGINE_COLORS["copy"], label="copy to device"),
                       Patch(color=ENGINE_COLORS["compute"], label="compute")],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    if title:
        ax.set_title(title)
    return ax


def plot_copy_strategies(predicted: Mapping[str, float], measured: Mapping[str, float] | None = None,
                         ax: Any = None, *, title: str | None = None):
    """Horizontal bars of the six copy strategies' times (ms), labelled with their code.

    Each bar says how many times a plain ``t.to(device)`` it takes (``"pageable"`` must
    be among them). Measured times, when given, are black dots on the bars.

    Args:
        predicted: strategy name -> seconds (:func:`feedgpu.models.copies.predict_strategies`).
        measured: the same for measurements (:func:`feedgpu.measure.pinning.measure_strategies`).
        ax: the Axes to draw on; a new figure when ``None``.
        title: the title.

    Returns:
        The Axes.

    Raises:
        KeyError: an unknown strategy, or no ``"pageable"`` to compare with.
    """
    import matplotlib.pyplot as plt

    names = list(predicted)
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        raise KeyError(f"unknown strategies {unknown}; known: {list(STRATEGIES)}")
    if "pageable" not in predicted:
        raise KeyError("predicted needs 'pageable' (plain t.to(device)) to compare with")
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.45 * len(names) + 1.2))
    ys = list(range(len(names)))[::-1]
    plain = predicted["pageable"]
    values = [predicted[n] * 1e3 for n in names]
    colors = [ORANGE if n.startswith("pin_then") else BLUE if n.startswith("pageable")
              else SKY for n in names]
    ax.barh(ys, values, color=colors, alpha=0.7, label="model")
    for y, name, value in zip(ys, names, values):
        right = max(value, (measured or {}).get(name, 0.0) * 1e3)
        ax.text(right, y, f"  {predicted[name] / plain:.2f}x", va="center", fontsize=8)
    if measured is not None:
        ax.scatter([measured[n] * 1e3 for n in names if n in measured],
                   [y for y, n in zip(ys, names) if n in measured],
                   color="black", zorder=3, s=18, label="measured")
        ax.legend(fontsize=8, loc="lower right")
    ax.set_yticks(ys)
    ax.set_yticklabels([STRATEGIES[n] for n in names], fontfamily="monospace", fontsize=8)
    ax.set_xlabel("time (ms)")
    ax.set_xlim(0, max(values + [m * 1e3 for m in (measured or {}).values()]) * 1.18)
    ax.set_title(title if title is not None else "sending tensors to the device: x = times a plain .to()")
    ax.grid(axis="x", alpha=0.3)
    return ax


def plot_copy_fit(fit: CostFit, ax: Any = None, *, label: str = "copy", color: str | None = None):
    """The measured (bytes, seconds) points of a :class:`~feedgpu.models.copies.CostFit` and its
    fitted line, on log-log axes; call again with the same ``ax`` to compare fits
    (pageable, pinned, pinning).

    Returns:
        The Axes.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    sizes = np.asarray(fit.nbytes, dtype=float)
    lo, hi = max(sizes.min(), 1.0), sizes.max()
    grid = np.geomspace(lo, hi, 100)
    cost = fit.cost
    points = ax.scatter(sizes, fit.seconds, s=14, color=color, zorder=3)
    ax.plot(grid, [cost.time_s(b) for b in grid], color=points.get_facecolor()[0],
            label=f"{label}: {cost.latency_s * 1e6:.1f} us + bytes / {cost.bytes_per_s / 1e9:.2f} GB/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("bytes")
    ax.set_ylabel("seconds")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    return ax


def plot_pin_slowdown(costs: CopyCosts | None = None, sizes_bytes: Sequence[float] | None = None,
                      n_tensors: Sequence[int] = (1, 4, 16), ax: Any = None):
    """How many times slower ``t.pin_memory().to(device, non_blocking=True)`` is than
    ``t.to(device)``, against the tensor's size, one line per number of tensors.

    Lines at 1 (no difference), at 2 (the tutorial's wording, "up to twice as slow") and
    at the model's own limit for one large tensor, ``(p + c_pinned) / c_pageable``
    (:func:`feedgpu.models.copies.pin_then_copy_limit`), which may lie above 2.

    Returns:
        The Axes.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    costs = CopyCosts() if costs is None else costs
    sizes = np.geomspace(1e3, 1e9, 61) if sizes_bytes is None else np.asarray(sizes_bytes, dtype=float)
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    for n in n_tensors:
        ax.plot(sizes, [pin_then_copy_slowdown(b, costs, n) for b in sizes], label=f"{n} tensor(s)")
    ax.axhline(1.0, color=GREY, linewidth=1)
    ax.axhline(2.0, color=VERMILLION, linestyle="--", linewidth=1, label='the tutorial: "up to twice as slow"')
    limit = pin_then_copy_limit(costs)
    ax.axhline(limit, color="black", linestyle=":", linewidth=1,
               label="the model, one large tensor: (p + c_pinned) / c_pageable")
    ax.set_ylim(top=max(2.0, limit) * 1.4)  # room for the legend above the lines
    ax.set_xscale("log")
    ax.set_xlabel("bytes per tensor")
    ax.set_ylabel("pin_memory().to(nb) / to()")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3, which="both")
    return ax


# --------------------------------------------------------------------------- what each rank loaded


#: Colours of the ranks in the pictures of what each rank loaded (rank modulo their number).
RANK_COLORS = [BLUE, ORANGE, SKY, PURPLE]


def plot_seen(seen: Any, ax: Any = None, *, title: str | None = None) -> Any:
    """One row per (epoch, rank), one box per sample in the order the rank's loader gave it.

    Args:
        seen: :func:`feedgpu.distributed.seen.read_seen`'s table (columns ``rank``,
            ``epoch``, ``position``, ``sample_id``).
        ax: a matplotlib Axes to draw on; a new figure is made when None.
        title: an optional title.

    Returns:
        The Axes: each box shows its sample id in the rank's colour (:data:`RANK_COLORS`);
        an id loaded more than once in its epoch (a padded duplicate) has a red frame.
        Epochs read top to bottom.
    """
    import collections

    import matplotlib.pyplot as plt

    rows = sorted(seen.groupby(["epoch", "rank"]).groups)
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 0.4 * len(rows) + 1.2), layout="constrained")
    for y, (epoch, rank) in enumerate(rows):
        in_epoch = seen[seen["epoch"] == epoch]
        counts = collections.Counter(in_epoch["sample_id"])
        part = in_epoch[in_epoch["rank"] == rank]
        for pos, sample_id in zip(part["position"], part["sample_id"]):
            ax.add_patch(plt.Rectangle((pos + 0.05, y + 0.1), 0.9, 0.8,
                                       facecolor=RANK_COLORS[rank % len(RANK_COLORS)], alpha=0.35,
                                       edgecolor=VERMILLION if counts[sample_id] > 1 else "none", linewidth=2))
            ax.text(pos + 0.5, y + 0.5, str(sample_id), ha="center", va="center", fontsize=8)
    ax.set_xlim(0, int(seen["position"].max()) + 1 if len(seen) else 1)
    ax.set_ylim(len(rows), 0)
    ax.set_yticks([y + 0.5 for y in range(len(rows))], [f"epoch {e}, rank {r}" for e, r in rows], fontsize=8)
    ax.set_xlabel("position in the rank's epoch")
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def plot_copies(seen: Any, n_items: int, ax: Any = None, *, title: str | None = None) -> Any:
    """How many times each id ``0 .. n_items - 1`` was loaded, stacked by who loaded it.

    Args:
        seen: :func:`feedgpu.distributed.seen.read_seen`'s table (columns ``rank``,
            ``worker``, ``sample_id``).
        n_items: the ids on the x axis.
        ax: a matplotlib Axes to draw on; a new figure is made when None.
        title: an optional title.

    Returns:
        The Axes: one bar segment per (rank, DataLoader worker) and id, labelled
        ``"rank R, worker W"`` (the rank's colour, darker for odd workers); a dotted line at
        1, where every id loaded exactly once ends.
    """
    import collections

    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3), layout="constrained")
    bottom = [0] * n_items
    for rank, worker in sorted(set(zip(seen["rank"], seen["worker"]))):
        mine = collections.Counter(seen[(seen["rank"] == rank) & (seen["worker"] == worker)]["sample_id"])
        heights = [mine.get(i, 0) for i in range(n_items)]
        ax.bar(range(n_items), heights, bottom=bottom, label=f"rank {rank}, worker {worker}",
               color=RANK_COLORS[rank % len(RANK_COLORS)], alpha=0.45 + 0.4 * (worker % 2), edgecolor="white")
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.axhline(1, color="black", linestyle=":", linewidth=1)
    ax.set_xticks(range(n_items))
    ax.set_xlabel("sample id")
    ax.set_ylabel("times loaded")
    if title:
        ax.set_title(title, fontsize=9)
    return ax


__all__ += ["RANK_COLORS", "plot_seen", "plot_copies"]


# --------------------------------------------------------------------------- remote storage (notebook 07)


def plot_store_simulation(threads: Sequence[int], simulated: Sequence[float], predicted: Sequence[float], *,
                          latency_s: float, max_concurrent: int | None, ax: Any = None) -> Any:
    """Little's law against the simulated store: objects/s for a growing thread pool.

    Args:
        threads: threads in each worker, one value per point (log x axis).
        simulated: the simulated store's steady objects/s, one per value of ``threads``.
        predicted: the model's objects/s, one per value of ``threads`` (drawn as a line).
        latency_s, max_concurrent: the store's, for the title.
        ax: a matplotlib Axes to draw on; a new figure is made when None.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.4), layout="constrained")
    ax.plot(threads, simulated, "o", label="simulated store")
    ax.plot(threads, predicted, "-", label="your model")
    limit = "no limit" if max_concurrent is None else f"{max_concurrent} requests at once"
    ax.set(xscale="log", xticks=list(threads), xticklabels=[str(t) for t in threads], ylabel="objects/s",
           title=f"Little's law with a limit: {latency_s * 1e3:.0f} ms, {limit}")
    ax.set_xlabel("threads in each of 2 workers")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small")
    return ax


def plot_littles_law(results: Mapping[str, Mapping[str, float]], request_s: float, *, store_cpu_s: float,
                     cpu_s: float, cores: int, ax: Any = None) -> Any:
    """Measured images/s against requests in flight, with Little's law and the two CPU limits.

    Args:
        results: name -> a row with ``"in flight"`` and ``"images/s"``; rows whose name
            starts with "stream" are drawn as circles, "threads" as squares, others skipped.
        request_s: seconds per request, one at a time (the line: in flight / request_s).
        store_cpu_s: the store's CPU seconds per request: it answers from one Python
            process, so at most ``1 / store_cpu_s`` requests a second (dotted line).
        cpu_s: CPU seconds per request of client and store together: on ``cores`` shared
            cores, at most ``cores / cpu_s`` requests a second (dash-dotted line).
        ax: a matplotlib Axes to draw on; a new figure is made when None.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    in_flight = [1, 2, 4, 8, 16, 32]
    ax.plot(in_flight, [n / request_s for n in in_flight], "-", color=GREY,
            label=f"Little's law: in flight / {request_s * 1e3:.0f} ms")
    ax.axhline(1 / store_cpu_s, color=GREY, linestyle=":",
               label=f"the store's CPU: 1 / {store_cpu_s * 1e3:.1f} ms (one process)")
    ax.axhline(cores / cpu_s, color="black", linestyle="-.",
               label=f"the machine's CPU: {cores} cores / {cpu_s * 1e3:.1f} ms (client and store)")
    for name, row in results.items():
        if name.startswith(("stream", "threads")):
            ax.plot(row["in flight"], row["images/s"], "s" if name.startswith("threads") else "o",
                    markersize=8, label=name)
    ax.set(xscale="log", yscale="log", xticks=in_flight, xticklabels=[str(n) for n in in_flight],
           xlabel="requests in flight", ylabel="images/s", title="Little's law, measurement and the CPU")
    ax.set_yticks([10, 20, 50, 100, 200, 500, 1000], labels=["10", "20", "50", "100", "200", "500", "1000"])
    ax.yaxis.set_minor_formatter(plt.NullFormatter())
    ax.legend(fontsize="x-small")
    return ax


def plot_first_batch_and_rate(table: Any, axes: Any = None) -> Any:
    """Two panels per strategy: seconds to the first batch, and steady images/s (log scale).

    Args:
        table: a DataFrame indexed by strategy with columns ``"first batch (s)"`` and ``"images/s"``.
        axes: two matplotlib Axes side by side; a new figure is made when None.

    Returns:
        The two Axes.
    """
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained", sharey=True)
    left, right = axes
    names = list(table.index)[::-1]
    left.barh(names, table.loc[names, "first batch (s)"], color=LOAD_COLOR)
    left.set(xlabel="seconds", title="time to first batch (lower is better)")
    right.barh(names, table.loc[names, "images/s"], color=STEP_COLOR)
    right.set(xscale="log", xlabel="images/s (log scale)", title="steady throughput (higher is better)")
    return axes


def plot_slowest_request(request_s: Sequence[float], batches_s: Mapping[str, Sequence[float]],
                         model_s: Mapping[str, float], *, latency_s: float, axes: Any = None) -> Any:
    """Where a batch's time goes when latency has a tail: each request, and each batch.

    Left: the time of every request (log scale), the store's median and the mean batch
    times as lines. Right: the mean batch time per remedy, measured beside the model.

    Args:
        request_s: seconds of every single request of the batches without a remedy.
        batches_s: remedy name -> seconds of each of its batches (measured).
        model_s: remedy name -> the model's expected batch time (``expected_slowest_s``);
            a remedy may be in the model only.
        latency_s: the store's median time to first byte.
        axes: two matplotlib Axes side by side; a new figure is made when None.

    Returns:
        The two Axes.
    """
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    left, right = axes
    times = [t * 1e3 for t in request_s]
    low, high = max(min(times), 1.0), max(times)
    bins = [low * (high / low) ** (i / 30) for i in range(31)]
    left.hist(times, bins=bins, color=LIGHT, edgecolor=GREY)
    left.axvline(latency_s * 1e3, color="black", linestyle=":", label=f"store's median {latency_s * 1e3:.0f} ms")
    for i, (name, batches) in enumerate(batches_s.items()):
        left.axvline(statistics.fmean(batches) * 1e3, color=SERIES[i % len(SERIES)], label=f"mean batch, {name}")
    left.set(xscale="log", xlabel="ms (log scale)", ylabel="requests", title="one request, and whole batches")
    left.legend(fontsize="small")
    names = list(dict.fromkeys([*batches_s, *model_s]))
    x = range(len(names))
    measured = [statistics.fmean(batches_s[n]) * 1e3 if n in batches_s else float("nan") for n in names]
    right.bar([i - 0.2 for i in x], measured, width=0.4, color=BLUE, label="measured")
    right.bar([i + 0.2 for i in x], [model_s.get(n, float("nan")) * 1e3 for n in names], width=0.4,
              color=LIGHT, edgecolor=GREY, label="model (no CPU)")
    right.set_xticks(list(x), names)
    right.set(ylabel="ms per batch", title="a batch waits for its slowest request")
    right.legend(fontsize="small")
    return axes


def plot_retry_outcomes(table: Any, limit_per_s: float | None = None, axes: Any = None) -> Any:
    """Per way of retrying: requests per delivered object, and objects delivered per second.

    Args:
        table: a DataFrame indexed by the way of retrying, with columns
            ``"requests per delivered"``, ``"goodput (images/s)"`` and ``"lost"``.
        limit_per_s: the store's request-rate limit, drawn on the right (``None``: none).
        axes: two matplotlib Axes side by side; a new figure is made when None.

    Returns:
        The two Axes; each bar of the right panel is labelled with the objects lost.
    """
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(11, 3.6), layout="constrained", sharey=True)
    left, right = axes
    names = list(table.index)[::-1]
    left.barh(names, table.loc[names, "requests per delivered"], color=VERMILLION)
    left.axvline(1, color="black", linestyle=":", linewidth=1)
    left.set(xlabel="requests per object delivered (1 is ideal)", title="what the store was asked")
    bars = right.barh(names, table.loc[names, "goodput (images/s)"], color=SKY)
    right.bar_label(bars, labels=[f"{int(lost)} lost" for lost in table.loc[names, "lost"]], padding=3,
                    fontsize="small")
    if limit_per_s is not None:
        right.axvline(limit_per_s, color="black", linestyle=":", label=f"the store's limit, {limit_per_s:g}/s")
        right.legend(fontsize="small", loc="lower right")
    right.set(xlabel="objects delivered per second", title="what came back")
    right.margins(x=0.25)
    return axes


__all__ += ["plot_store_simulation", "plot_littles_law", "plot_first_batch_and_rate", "plot_slowest_request",
            "plot_retry_outcomes"]


_SHARE_COLORS = (("busy_share", "busy", STEP_COLOR), ("waiting_share", "waiting for data", LOAD_COLOR),
                 ("other_share", "other", LIGHT))


def plot_busy_shares(rows: Mapping[str, Mapping[str, float]], ax: Any = None, *, target: float | None = None,
                     title: str | None = None) -> Any:
    """Where an accelerator's time went, one stacked horizontal bar per run: busy, waiting
    for data, other (shares of the wall time, from
    :meth:`feedgpu.models.accelerator.Breakdown.summary` or :func:`feedgpu.workloads.face_training.run_epochs`).

    Args:
        rows: run label -> a mapping with ``busy_share``, ``waiting_share``, ``other_share``.
        target: a busy share to mark with a dotted line.

    Returns:
        The Axes.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * max(1, len(rows))), layout="constrained")
    labels = list(rows)
    for y, label in enumerate(labels):
        start = 0.0
        for key, name, color in _SHARE_COLORS:
            share = max(0.0, float(rows[label].get(key) or 0.0))
            ax.barh(y, share, left=start, color=color, label=name if y == 0 else None)
            start += share
        ax.text(1.01, y, f"{rows[label].get('busy_share', 0):.2f}", va="center", fontsize="small")
    if target is not None:
        ax.axvline(target, color="black", linestyle=":", label=f"target {target:g}")
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.08)
    ax.set_xlabel("share of the wall time")
    ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(labels) > 2 else -0.45),
              ncol=4)
    ax.set_title(title or "Where the accelerator's time went")
    return ax


def plot_fix_progress(labels: Sequence[str], measured: Sequence[float], predicted: Sequence[float] | None = None,
                      ax: Any = None, *, target: float | None = None, title: str | None = None) -> Any:
    """The busy share after each fix, measured (points) and predicted (line), in the order
    the fixes were made.

    Returns:
        The Axes.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.2), layout="constrained")
    x = range(len(labels))
    if predicted is not None:
        ax.plot(x, predicted, "-", color=GREY, marker=".", label="predicted")
    ax.plot(x, measured, "o", color=ORANGE, label="measured")
    if target is not None:
        ax.axhline(target, color="black", linestyle=":", label=f"target {target:g}")
    ax.set_xticks(list(x), labels, rotation=25, ha="right", fontsize="small")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("busy share")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small")
    ax.set_title(title or "The accelerator's busy share after each fix")
    return ax


__all__ += ["plot_busy_shares", "plot_fix_progress"]


def plot_gpu_feeding(rows: Mapping[str, Mapping[str, float]], ax: Any = None, *, target: float | None = None,
                     title: str | None = None) -> Any:
    """The GPU's busy share on each recorded machine: the plain loop as measured beside the
    recommended one as the model estimates it (a bar from its low to its high end where it is a range).

    Args:
        rows: machine -> ``{"plain": share, "recommended": share, "low": share, "high": share}``
            (``low``/``high`` optional; ``measured``, where the recommended loop was recorded too).
        target: a busy share to mark with a dotted line.

    Returns:
        The Axes.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.2), layout="constrained")
    names = list(rows)
    x = np.arange(len(names))
    plain = [rows[n]["plain"] for n in names]
    rec = [rows[n]["recommended"] for n in names]
    low = [rec[i] - rows[n].get("low", rec[i]) for i, n in enumerate(names)]
    high = [rows[n].get("high", rec[i]) - rec[i] for i, n in enumerate(names)]
    ax.bar(x - 0.2, plain, 0.4, color=GREY, label="plain loop, measured")
    ax.bar(x + 0.2, rec, 0.4, color=ORANGE, yerr=[low, high], capsize=4, label="recommended, estimated")
    measured = [(i, rows[n]["measured"]) for i, n in enumerate(names) if rows[n].get("measured") is not None]
    if measured:
        ax.plot([i + 0.2 for i, _ in measured], [m for _, m in measured], "kD", label="recommended, measured")
    for i, (p_, r_) in enumerate(zip(plain, rec)):
        ax.text(i - 0.2, p_ + 0.02, f"{p_:.2f}", ha="center", fontsize="small")
        ax.text(i + 0.2, r_ + 0.02, f"{r_:.2f}", ha="center", fontsize="small")
    if target is not None:
        ax.axhline(target, color="black", linestyle=":", label=f"goal {target:g}")
    ax.set_xticks(x, names)
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("GPU busy share")
    ax.legend(fontsize="x-small", loc="lower right")
    ax.set_title(title or "Feeding a real GPU: the plain loop and the recommended one")
    return ax


__all__ += ["plot_gpu_feeding"]
