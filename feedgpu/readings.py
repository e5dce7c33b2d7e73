"""Recorded readings of real machines: the one place that reads and writes them.

The course is built on 2-core machines without a GPU; students have many cores and CUDA
GPUs. What the course's code measured on such a machine is kept in the repository as a
*readings folder*, ``readings/<machine>-<date>/``, so that the models and the diagnosis
can be held to a real GPU in ``make test`` and a student without one can see real figures
(notebook 05). :mod:`feedgpu.workflows.bench.record` (``feedgpu-record``, ``make record``)
writes a folder on any machine with a CUDA GPU; this module reads it back, whatever wrote
it, and nothing else in the course opens these files.

A folder holds (every file optional but the first; see ``readings/README.md``):

* ``copies_and_loop.json``: the machine (``device``, ``torch``, ``cpus``, ``when``), the
  copies by size (``copies``: for each size, the median, the fastest and every reading of
  each kind of copy: ``h2d_pageable``, ``h2d_pinned``, ``d2h_pinned``,
  ``pin_memory_cached`` (``pin_memory()`` on torch's threads), ``host_copy_1thread`` and
  ``host_copy_all_threads``; a newer recorder adds ``pin_memory_1thread`` and
  ``h2d_pageable_in_loop``), one item of the loader (``item_cost_s``), the loop's
  stall-free step (``stall_free_step_s``) and the loop itself by ``num_workers``
  (``loops``);
* ``copy_loops.json``: loops of copies and compute (the bench's and notebook 05's), each
  with its settings, the time measured and the device time of its compute;
* ``diagnosis_nw<N>.json``: ``feedgpu-diagnose --json`` of the loop with ``N`` workers;
* ``bench_gpu.json``: ``feedgpu-bench --only gpu``;
* ``machine.json``: what the recorder knows of the machine (versions, cores, the GPU).

The first folder, ``h200-2026-11-26``, was recorded before the recorder existed; its JSON
files are kept byte for byte, and ``copy_loops.json`` beside them is the course's own
reading of what its bench and notebook 05 printed there (it says where each figure comes
from).

Example::

    from feedgpu.readings import load_readings

    h200 = load_readings("h200-2026-11-26")
    print(h200.describe())                 # NVIDIA H200, 16 cores, torch 2.11.0+cu130, 2026-11-26 23:22:16
    costs = h200.copy_costs()              # the copy model fitted to its copies
    for loop in h200.copy_loops:
        print(loop.name, loop.measured_s)
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .base.files import replacing_folder
from .models.copies import (IN_LOOP_FROM, PINNING_FROM, PINNING_SPREAD, CopyCosts, CopyRange, CostFit, LinearCost,
                     fit_linear_cost, pageable_range, spread_range)

__all__ = [
    "READINGS_ROOT",
    "default_name",
    "copy_loops_json",
    "CopyReading",
    "CopyLoop",
    "CopyLoopSettings",
    "LoopReading",
    "Readings",
    "available_readings",
    "load_readings",
    "write_readings",
    "FIT_SIZES",
]

logger = logging.getLogger(__name__)

#: Where the course keeps its readings: ``readings/`` at the top of the repository.
READINGS_ROOT = Path(__file__).resolve().parents[1] / "readings"

#: The sizes the copy model is fitted over, as the bench and notebook 05 fit a live GPU:
#: 4 KiB to 64 MiB, four times apart (``feedgpu.measure.pinning.DEFAULT_SIZES``).
FIT_SIZES: tuple[int, ...] = tuple(4096 * 4**k for k in range(8))

#: The pageable copies a folder may hold that were timed inside a loop: repeated loops
#: from fresh sources (a newer recorder's), and copies inside one loop.
PAGEABLE_IN_LOOP_KINDS: tuple[str, ...] = ("h2d_pageable_loops", "h2d_pageable_in_loop")
#: Host copies on one thread: a pageable copy's staging is one.
ONE_THREAD_HOST_KINDS: tuple[str, ...] = ("host_copy_1thread", "pin_memory_1thread")

COPIES_FILE = "copies_and_loop.json"
COPY_LOOPS_FILE = "copy_loops.json"
BENCH_FILE = "bench_gpu.json"
MACHINE_FILE = "machine.json"
RECOMMENDED_FILE = "recommended_loop.json"


def default_name(gpu_name: str, day: datetime.date | None = None) -> str:
    """The folder's name: the GPU's name in lower case without the vendor, and the date
    (``"NVIDIA H200"`` on 2026-11-26: ``h200-2026-11-26``)."""
    words = [w for w in re.findall(r"[a-z0-9]+", gpu_name.lower()) if w != "nvidia"] or ["gpu"]
    return "-".join(words + [(day or datetime.date.today()).isoformat()])


#: What ``copy_loops.json`` says of itself.
COPY_LOOPS_ABOUT = ("Loops of copies to the GPU and compute recorded on this machine by feedgpu-record "
                    "(feedgpu.readings.CopyLoop): the bench's two (feedgpu-bench --only gpu, 20 batches of "
                    "64 MiB) and notebook 05's three (8 batches of 48 MB), each timed with measure_training, "
                    "with the device time of its compute.")


class ReadingsError(ValueError):
    """A readings folder that is missing or cannot be read as one (the message says which file)."""


@dataclass(frozen=True)
class CopyReading:
    """One kind of copy at one size: the median, the fastest and every reading, in seconds."""

    median_s: float
    min_s: float
    all_s: tuple[float, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CopyReading":
        return cls(float(data["median_s"]), float(data.get("min_s", data["median_s"])),
                   tuple(float(v) for v in data.get("all_s", ())))


@dataclass(frozen=True)
class CopyLoopSettings:
    """A loop of ``n_batches`` copies of ``batch_bytes`` to the GPU, each followed by compute,
    as the recorder runs it: the settings of :func:`feedgpu.measure.pinning.measure_training`.

    Attributes:
        name: what the loop is, e.g. ``"bench, plain"`` or ``"notebook 05, pageable, blocking"``.
    """

    name: str
    n_batches: int
    batch_bytes: int
    pinned: bool
    non_blocking: bool
    prefetch: bool


@dataclass(frozen=True)
class CopyLoop(CopyLoopSettings):
    """A recorded loop (:class:`CopyLoopSettings`) and what it measured.

    Attributes:
        measured_s: host seconds of the whole loop, as recorded.
        compute_s: device seconds of one step's compute (``measure_compute_s``).
        source: where the figures come from (a file, a cell, or how a figure was derived).
    """

    measured_s: float
    compute_s: float
    source: str = ""

    @property
    def overlapped(self) -> bool:
        """Whether copy and compute can overlap: pinned, ``non_blocking`` and prefetched."""
        return self.pinned and self.non_blocking and self.prefetch


def copy_loops_json(loops: Sequence[tuple[CopyLoop, Sequence[float]]]) -> dict[str, Any]:
    """``copy_loops.json``'s document: each loop's fields (:class:`CopyLoop`'s) and its timed runs (``all_s``)."""
    return {"about": COPY_LOOPS_ABOUT,
            "loops": [{**asdict(loop), "all_s": list(all_s)} for loop, all_s in loops]}


@dataclass(frozen=True)
class LoopReading:
    """The user's training loop, steady, with ``num_workers`` workers: seconds per batch and the wait in ``next()``."""

    num_workers: int
    synced_each_step: bool
    s_per_batch: float
    wait_s_per_batch: float
    batches: int
    warm_up_s: float


@dataclass(frozen=True)
class Readings:
    """Everything a readings folder holds (see the module's docstring). Read it with :func:`load_readings`."""

    folder: Path
    machine: dict[str, Any]
    copies: dict[str, list[tuple[int, CopyReading]]]
    copy_loops: list[CopyLoop] = field(default_factory=list)
    item_cost_s: dict[str, float] = field(default_factory=dict)
    stall_free_step_s: float | None = None
    loops: list[LoopReading] = field(default_factory=list)
    diagnoses: dict[str, dict[str, Any]] = field(default_factory=dict)
    bench: list[dict[str, Any]] = field(default_factory=list)
    recommended: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.folder.name

    def describe(self) -> str:
        """The machine in one line: GPU, cores, torch, and when, as recorded."""
        m = self.machine
        parts = [str(m.get("device", "unknown GPU")), f"{m.get('cpus', '?')} cores", f"torch {m.get('torch', '?')}"]
        if m.get("when"):
            parts.append(str(m["when"]))
        return ", ".join(parts)

    def kinds(self) -> list[str]:
        """The kinds of copy recorded (``h2d_pageable``, ``h2d_pinned``, ...)."""
        return list(self.copies)

    def copy_table(self, kind: str) -> tuple[list[int], list[float]]:
        """(sizes in bytes, median seconds) of one kind of copy, by size.

        Raises:
            KeyError: the kind was not recorded (the message lists those that were).
        """
        if kind not in self.copies:
            raise KeyError(f"{self.name} has no {kind!r} copies; it has {self.kinds()}")
        rows = self.copies[kind]
        return [b for b, _ in rows], [r.median_s for _, r in rows]

    def fit(self, kind: str, sizes: Sequence[int] = FIT_SIZES) -> CostFit:
        """The copy model's straight line fitted to one kind of copy over ``sizes`` (those recorded)."""
        all_sizes, seconds = self.copy_table(kind)
        wanted = set(sizes)
        points = [(b, s) for b, s in zip(all_sizes, seconds) if b in wanted]
        if len(points) < 2:
            raise ReadingsError(f"{self.name}: fewer than two {kind!r} copies among the sizes {sorted(wanted)}")
        return fit_linear_cost([b for b, _ in points], [s for _, s in points])

    def streaming_cost(self, kind: str = "h2d_pageable") -> LinearCost:
        """A copy whose source no cache holds: the bandwidth of the largest copy recorded.

        A pageable copy is staged by the CPU, and the sweep copies one source again and
        again: sizes that fit in the CPU's caches come out faster than the same bytes do
        in a training loop (see :attr:`feedgpu.models.copies.CopyCosts.pageable_in_loop`). The
        largest size recorded fits in no cache; its bytes per second, with the latency of
        the straight-line fit, is what a copy streaming from memory costs.
        """
        sizes, seconds = self.copy_table(kind)
        largest, its_s = sizes[-1], seconds[-1]
        return LinearCost(self.fit(kind).cost.latency_s, largest / its_s)

    def copy_costs(self, sizes: Sequence[int] = FIT_SIZES) -> CopyCosts:
        """The copy model of this machine, as :func:`feedgpu.measure.pinning.measure_copy_costs`
        would have fitted it there: pageable, pinned and ``pin_memory()`` (on torch's threads,
        as a call in the user's thread) over ``sizes``, and the pageable copy in a loop
        (recorded in a loop where the folder has it, fitted over those of ``sizes`` from
        :data:`feedgpu.models.copies.IN_LOOP_FROM` up; else :meth:`streaming_cost`); with the
        ranges of :meth:`pageable_range` and :meth:`pinning_range`.
        """
        if "h2d_pageable_in_loop" in self.copies:  # measured in a loop: fitted over the batch-sized copies
            in_loop = self.fit("h2d_pageable_in_loop", [b for b in sizes if b >= IN_LOOP_FROM]).cost
        else:
            in_loop = self.streaming_cost("h2d_pageable")
        pinning = self.fit("pin_memory_cached", sizes).cost
        return CopyCosts(pageable=self.fit("h2d_pageable", sizes).cost, pinned=self.fit("h2d_pinned", sizes).cost,
                         pinning=pinning, pageable_in_loop=in_loop,
                         pageable_range=self.pageable_range(in_loop.latency_s),
                         pinning_range=self.pinning_range(pinning.latency_s))

    def readings_of(self, kinds: Sequence[str], smallest: int = IN_LOOP_FROM) -> list[tuple[int, float]]:
        """Every reading (``all_s``, or the median where a size kept none) of the ``kinds``
        recorded here, as ``(bytes, seconds)``, for sizes of at least ``smallest``."""
        points = []
        for kind in kinds:
            for nbytes, reading in self.copies.get(kind, []):
                if nbytes >= smallest:
                    points += [(nbytes, t) for t in (reading.all_s or (reading.median_s,))]
        return points

    def pageable_range(self, latency_s: float = 0.0) -> CopyRange | None:
        """The range a pageable copy of a batch's size ran in here
        (:func:`feedgpu.models.copies.pageable_range`): copies in a loop (``h2d_pageable_loops``,
        repeated loops from fresh sources, where a newer recorder timed them, and
        ``h2d_pageable_in_loop``), alone (``h2d_pageable``), and the one-thread host copies
        (``host_copy_1thread``, ``pin_memory_1thread``), every reading. None without pageable copies."""
        return pageable_range(self.readings_of(PAGEABLE_IN_LOOP_KINDS), self.readings_of(["h2d_pageable"]),
                              latency_s, one_thread=self.readings_of(ONE_THREAD_HOST_KINDS))

    def pinning_range(self, latency_s: float = 0.0) -> CopyRange | None:
        """The range ``pin_memory()`` on torch's threads runs in, where its readings spread
        from run to run (:func:`feedgpu.models.copies.spread_range` around the fitted line, at
        ``latency_s``); None: a point, or not recorded."""
        rows = [(b, r.all_s) for b, r in self.copies.get("pin_memory_cached", [])]
        if not rows:
            return None
        line = self.fit("pin_memory_cached").cost
        return spread_range(LinearCost(latency_s, line.bytes_per_s), rows, smallest=PINNING_FROM,
                            spread=PINNING_SPREAD)

    def pin_thread_kind(self) -> str:
        """The copy kind that stands for the DataLoader's pin thread, which pins on one thread:
        ``pin_memory_1thread`` where recorded, else a one-thread host copy (pinning into a
        cached pinned block is a host copy)."""
        return "pin_memory_1thread" if "pin_memory_1thread" in self.copies else "host_copy_1thread"

    def median_at(self, kind: str, nbytes: int) -> float:
        """The recorded median of one kind at one size, or by straight-line interpolation between the
        two recorded sizes around it (the sweep's own points, no model)."""
        sizes, seconds = self.copy_table(kind)
        if nbytes in sizes:
            return seconds[sizes.index(nbytes)]
        if not sizes[0] <= nbytes <= sizes[-1]:
            raise ValueError(f"{nbytes} bytes lies outside the recorded sizes {sizes[0]}-{sizes[-1]}")
        k = next(i for i, b in enumerate(sizes) if b > nbytes)
        (b0, s0), (b1, s1) = (sizes[k - 1], seconds[k - 1]), (sizes[k], seconds[k])
        return s0 + (s1 - s0) * (nbytes - b0) / (b1 - b0)

    def steady_loop_s(self) -> dict[int, float]:
        """The recorded loop's seconds per batch by ``num_workers``: the mean of its rows at
        that count (with and without a synchronize per step, where both were recorded)."""
        rows: dict[int, list[float]] = {}
        for loop in self.loops:
            rows.setdefault(loop.num_workers, []).append(loop.s_per_batch)
        return {n: sum(v) / len(v) for n, v in sorted(rows.items())}

    def bench_figure(self, name: str) -> float | None:
        """A figure of the recorded ``feedgpu-bench --only gpu``, by name, or None."""
        return next((float(f["value"]) for f in self.bench if f.get("name") == name), None)


def available_readings(root: Path = READINGS_ROOT) -> list[str]:
    """The readings folders under ``root``, by name, sorted."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / COPIES_FILE).is_file())


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ReadingsError(f"cannot read {path}: {err}") from err


def _folder(name_or_path: str | os.PathLike, root: Path) -> Path:
    path = Path(name_or_path)
    if not path.is_dir():
        path = Path(root) / str(name_or_path)
    if not (path / COPIES_FILE).is_file():
        raise ReadingsError(f"{name_or_path!s} is not a readings folder (no {COPIES_FILE}); "
                            f"the course has {available_readings(root) or 'none'} under {root}")
    return path


def _copies(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[tuple[int, CopyReading]]]:
    table: dict[str, list[tuple[int, CopyReading]]] = {}
    for row in sorted(rows, key=lambda r: int(r["bytes"])):
        for kind, data in row.items():
            if kind != "bytes" and isinstance(data, Mapping) and "median_s" in data:
                table.setdefault(kind, []).append((int(row["bytes"]), CopyReading.from_json(data)))
    return table


def load_readings(name_or_path: str | os.PathLike, root: Path = READINGS_ROOT) -> Readings:
    """Read a readings folder: a folder name under ``root`` (``"h200-2026-11-26"``) or a path.

    Raises:
        ReadingsError: not a readings folder, or a file that is not valid JSON.
    """
    folder = _folder(name_or_path, root)
    main = _read_json(folder / COPIES_FILE)
    machine = {key: main[key] for key in ("device", "torch", "cpus", "when") if key in main}
    if (folder / MACHINE_FILE).is_file():
        machine.update(_read_json(folder / MACHINE_FILE))
    bench = []
    if (folder / BENCH_FILE).is_file():
        recorded = _read_json(folder / BENCH_FILE)
        bench = list(recorded.get("figures", []))
        for key, value in recorded.get("machine", {}).items():
            machine.setdefault(key, value)
    copy_loops = []
    if (folder / COPY_LOOPS_FILE).is_file():
        copy_loops = [CopyLoop(**{k: v for k, v in loop.items() if k in CopyLoop.__dataclass_fields__})
                      for loop in _read_json(folder / COPY_LOOPS_FILE).get("loops", [])]
    diagnoses = {p.stem: _read_json(p) for p in sorted(folder.glob("diagnosis_nw*.json"))}
    loops = [LoopReading(**{k: v for k, v in loop.items() if k in LoopReading.__dataclass_fields__})
             for loop in main.get("loops", [])]
    return Readings(folder=folder, machine=machine, copies=_copies(main.get("copies", [])),
                    copy_loops=copy_loops, item_cost_s=dict(main.get("item_cost_s", {})),
                    stall_free_step_s=main.get("stall_free_step_s"), loops=loops, diagnoses=diagnoses,
                    bench=bench, recommended=_read_json(folder / RECOMMENDED_FILE)
                    if (folder / RECOMMENDED_FILE).is_file() else None)


def write_readings(folder: str | os.PathLike, files: Mapping[str, Any], *, extra: Mapping[str, Path] = {}) -> Path:
    """Write a readings folder whole, or not at all.

    Every file is written into a scratch folder beside ``folder``, which is renamed into
    place only when all of them are written, so a failure (or Ctrl-C) never leaves a
    half-written folder; an existing folder is refused, not overwritten.

    Args:
        folder: the folder to create (its name: ``<machine>-<date>``).
        files: file name -> content: a dict or list (written as JSON), or a string.
        extra: file name -> a file to copy in (a plot, the script that made the loop).

    Returns:
        The folder written.

    Raises:
        FileExistsError: ``folder`` exists already.
        ReadingsError: ``files`` lacks ``copies_and_loop.json``.
    """
    folder = Path(folder)
    if folder.exists():
        raise FileExistsError(f"{folder} exists already: choose another name, or remove it first")
    if COPIES_FILE not in files:
        raise ReadingsError(f"a readings folder needs {COPIES_FILE}; got {sorted(files)}")
    with replacing_folder(folder) as scratch:
        for name, content in files.items():
            text = content if isinstance(content, str) else json.dumps(content, indent=1, default=_jsonable)
            (scratch / name).write_text(text if text.endswith("\n") else text + "\n")
        for name, source in extra.items():
            shutil.copyfile(source, scratch / name)
    logger.info("readings written to %s", folder)
    return folder


def _jsonable(value: Any) -> Any:
    """What ``json`` cannot write by itself: dataclasses, paths, tuples of numbers."""
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
