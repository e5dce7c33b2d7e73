"""Plots shared by the notebooks: a grid of faces, the overlap timeline, bars with error bars.

Each function draws on a Matplotlib ``Axes`` (a new figure from ``plt.subplots`` when
none is given) and returns it; none calls ``plt.show()``, so the same code works inline
in Jupyter, in a script that saves the figure, and in tests with the Agg backend.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["show_faces", "plot_overlap_timeline", "bar_with_error"]

LOAD_COLOR = "tab:orange"
STEP_COLOR = "tab:blue"


# --------------------------------------------------------------------------- faces


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


# --------------------------------------------------------------------------- overlap


def _schedule(load_s: float, step_s: float, n_steps: int, overlapped: bool) -> dict[str, Any]:
    """Start times of every load and step, and the total, for the two-stage pipeline.

    Serial: load k, then step k, then load k + 1. Overlapped: one background loader
    starts loading batch k + 1 when step k takes batch k (it may run ahead by one batch);
    step k starts when batch k is loaded and step k - 1 is done.
    """
    if load_s < 0 or step_s < 0:
        raise ValueError(f"times must be >= 0, got load_s={load_s!r}, step_s={step_s!r}")
    if int(n_steps) != n_steps or n_steps < 1:
        raise ValueError(f"n_steps must be a positive integer, got {n_steps!r}")
    loads, steps = [], []
    if not overlapped:
        t = 0.0
        for _ in range(int(n_steps)):
            loads.append(t)
            steps.append(t + load_s)
            t += load_s + step_s
        return {"load": loads, "step": steps, "total": t}
    load_start, step_end = 0.0, 0.0
    for _ in range(int(n_steps)):
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
        ax.axvline(total, color="grey", linestyle="--", linewidth=1)
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


# --------------------------------------------------------------------------- bars


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
    ax.bar(xs, means, yerr=stds, capsize=6, color="tab:blue", alpha=0.6,
           label="mean ± std")
    for x, group in zip(xs, values):
        offsets = [(i - (len(group) - 1) / 2) * 0.06 for i in range(len(group))]
        ax.scatter([x + o for o in offsets], group, color="black", s=10, zorder=3)
    if predicted is not None:
        for x, p in zip(xs, predicted):
            ax.hlines(p, x - 0.4, x + 0.4, colors="tab:red", linewidth=2,
                      label="model" if x == 0 else None)
    ax.set_xticks(xs)
    ax.set_xticklabels([str(label) for label in labels])
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    return ax
