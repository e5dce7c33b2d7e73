"""``feedgpu-record``: record this machine's readings folder (any machine with a CUDA GPU).

::

    feedgpu-record                                      # the copies, the copy loops and the bench
    feedgpu-record --loader mytraining:make_loader --step mytraining:train_step   # and your loop
    make record LOOP=mytraining:make_loader STEP=mytraining:train_step

It writes ``readings/<gpu>-<date>/`` (``--name``, ``--root``), which
:func:`feedgpu.readings.load_readings` reads back, so that an instructor or a student with
a GPU adds their machine to what the course replays without one. The folder is written
whole, at the end, by :func:`feedgpu.readings.write_readings`: a failure or Ctrl-C leaves
nothing half-written. What it holds (``readings/README.md`` says more):

* ``machine.json``: versions (Python, torch, torchvision, CUDA), the GPU (name, count,
  driver where ``nvidia-smi`` tells), the cores (:func:`feedgpu.measure.machine.describe_machine`),
  the course's version and a hash of its sources (:func:`course_identity`; not a git commit), the
  command, and which guards applied (``"guards":
  {"empty_host_cache": false}`` on a PyTorch without ``torch.accelerator.empty_host_cache``);
* ``copies_and_loop.json``: ``device``, ``torch``, ``cpus``, ``when`` and ``copies``, every
  kind of copy by size, 4 KiB to 512 MiB (:func:`feedgpu.measure.pinning.measure_copy_table`);
  with a loader named, as ``readings/h200-2026-11-26/record.py`` recorded them:
  ``item_cost_s`` (one item in this process, on one thread and on every core),
  ``stall_free_step_s`` and ``stall_free_step_synced_s`` (the step on one batch held in
  memory: the loop's bound, without and with a synchronize per step) and ``loops`` (the
  loop itself, steady, by ``num_workers``, persistent workers; seconds per batch and the
  share spent in ``next()``);
* ``copy_loops.json``: the loops of copies and compute that the course replays
  (:data:`COPY_LOOPS`: the bench's two and notebook 05's three), each timed with
  :func:`~feedgpu.measure.pinning.measure_training`, with the device time of its compute
  (:func:`~feedgpu.measure.pinning.measure_compute_s`);
* ``bench_gpu.json``: ``feedgpu-bench --only gpu``'s figures, in its format;
* with a loader named: ``diagnosis_nw<N>.json`` (:func:`feedgpu.diagnose`'s report, for the
  loader's own ``num_workers`` and the fastest count of ``loops``), and a copy of the
  loader's module (and the step's, if another), as ``gpu_case.py`` was kept.

Exits 0 once the folder is written; 2 with a one-line reason, before measuring anything,
where there is no CUDA GPU, the folder exists, an argument is bad, or the loader or the
step cannot be imported or built; 130 on Ctrl-C (nothing written).

The measurements are made through an :class:`Instruments` object (the GPU's functions of
:mod:`feedgpu.measure.pinning`, the bench and the diagnosis by default), which the tests
replace to check the folder's format without a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.metadata
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import __file__ as _package_file  # feedgpu/__init__.py: where the course's sources are
from ...base.cli import OneLineParser, UsageError, import_named, run_command
from ...readings import READINGS_ROOT, CopyLoopSettings, default_name

__all__ = ["main", "Instruments", "default_instruments", "Plan", "plan_for", "COPY_LOOPS", "default_name",
           "default_workers", "UsageError", "SOURCE_ROOT", "course_identity", "course_source_files",
           "course_source_sha256", "course_version"]

PROG = "feedgpu-record"

#: Notebook 05's loops (its configuration cell): 8 batches of 64 faces, 250 x 250 RGB, float32.
NOTEBOOK05_N_BATCHES = 8
NOTEBOOK05_BATCH_BYTES = 64 * 3 * 250 * 250 * 4  # 48,000,000 bytes

#: Bytes of a batch of the bench's loops (:mod:`feedgpu.workflows.bench.gpu`), and how many.
BENCH_N_BATCHES = 20
BENCH_BATCH_BYTES = 64 * 2**20


#: The loops of copies and compute the course replays, by the names of ``copy_loops.json``.
COPY_LOOPS: tuple[CopyLoopSettings, ...] = (
    CopyLoopSettings("bench, plain copies", BENCH_N_BATCHES, BENCH_BATCH_BYTES, False, False, False),
    CopyLoopSettings("bench, pinned + non_blocking + prefetch", BENCH_N_BATCHES, BENCH_BATCH_BYTES, True, True, True),
    CopyLoopSettings("notebook 05, pageable, blocking", NOTEBOOK05_N_BATCHES, NOTEBOOK05_BATCH_BYTES, False, False, False),
    CopyLoopSettings("notebook 05, pinned, non_blocking, one stream", NOTEBOOK05_N_BATCHES, NOTEBOOK05_BATCH_BYTES,
                 True, True, False),
    CopyLoopSettings("notebook 05, pinned, non_blocking, prefetched", NOTEBOOK05_N_BATCHES, NOTEBOOK05_BATCH_BYTES,
                 True, True, True),
)

#: Timed runs of each copy loop; the median is recorded (each run after its own untimed one).
COPY_LOOP_RUNS = 3


# --------------------------------------------------------------------------- instruments


@dataclass
class Instruments:
    """What the recorder measures with, one function each (:func:`default_instruments`).

    Attributes:
        cuda_skip_reason: None with a CUDA GPU, else why not
            (:func:`feedgpu.measure.pinning.cuda_skip_reason`).
        gpu: the GPU's facts: ``{"gpu", "gpu_count", "cuda", "driver"}``.
        describe_machine: :func:`feedgpu.measure.machine.describe_machine` (versions, cores, memory).
        empty_host_cache: :func:`feedgpu.measure.pinning.empty_host_cache` (True if emptied).
        copy_table: :func:`feedgpu.measure.pinning.measure_copy_table`.
        compute_s: :func:`feedgpu.measure.pinning.measure_compute_s`.
        training: :func:`feedgpu.measure.pinning.measure_training`.
        bench: the bench's gpu figures (:func:`feedgpu.workflows.bench.gpu.bench_gpu`).
        synchronize: ``torch.cuda.synchronize``.
        diagnose: ``(loader, step, max_seconds) -> dict``: :func:`feedgpu.diagnose`'s report, ``.to_dict()``.
        recommended: ``(plan, synchronize) -> dict``: the course's recommended loop, predicted then
            measured (:func:`feedgpu.workflows.bench.recommended.record_recommended`); None: not recorded.
        recommended_missing: why ``recommended`` cannot run here (no faces to read), or None;
            asked before anything is measured.
    """

    cuda_skip_reason: Callable[[], str | None]
    gpu: Callable[[], dict[str, Any]]
    describe_machine: Callable[[], dict[str, Any]]
    empty_host_cache: Callable[[], bool]
    copy_table: Callable[..., list[dict[str, Any]]]
    compute_s: Callable[[], float]
    training: Callable[..., float]
    bench: Callable[[], list[dict[str, Any]]]
    synchronize: Callable[[], None]
    diagnose: Callable[[Any, Any, float], dict[str, Any]]
    recommended: Callable[[Plan, Callable[[], None]], dict[str, Any]] | None = None
    recommended_missing: Callable[[], str | None] = lambda: None


def _driver_version() -> str | None:
    """The NVIDIA driver's version as ``nvidia-smi`` gives it, or None where it cannot tell."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0].strip() if out.strip() else None


def _gpu() -> dict[str, Any]:
    import torch

    return {"gpu": torch.cuda.get_device_name(0), "gpu_count": torch.cuda.device_count(),
            "cuda": torch.version.cuda, "driver": _driver_version()}


def _bench() -> list[dict[str, Any]]:
    from .gpu import bench_gpu

    return bench_gpu()


def _synchronize() -> None:
    import torch

    torch.cuda.synchronize()


def _diagnose(loader: Any, step: Any, max_seconds: float) -> dict[str, Any]:
    from ...diagnosis import diagnose

    return diagnose(loader, step, max_seconds=max_seconds).to_dict()


def default_instruments() -> Instruments:
    """The recorder's instruments on a real GPU (imports torch)."""
    from ...measure import pinning
    from ...measure.machine import describe_machine

    return Instruments(cuda_skip_reason=pinning.cuda_skip_reason, gpu=_gpu, describe_machine=describe_machine,
                       empty_host_cache=pinning.empty_host_cache,
                       copy_table=pinning.measure_copy_table, compute_s=pinning.measure_compute_s,
                       training=pinning.measure_training, bench=_bench, synchronize=_synchronize,
                       diagnose=_diagnose, recommended=_recommended, recommended_missing=_faces_missing)


def _recommended(plan: Plan, synchronize: Callable[[], None]) -> dict[str, Any]:
    from .recommended import record_recommended

    return record_recommended(plan.workers, synchronize, measure_loop, batches=plan.loop_batches[1],
                              steps=plan.stall_free_steps, say=_say)


def _faces_missing() -> str | None:
    """Why the recommended loop cannot run here (no faces to read), or None."""
    from ...workloads.faces_on_gpu import faces_root

    root = faces_root()
    if root.is_dir() and any(p.is_dir() for p in root.iterdir()):
        return None
    return (f"the recommended loop reads the course's faces, and {root} holds none: run "
            "`python3 lfw_dataset.py -prepare synthetic` (or `make data`) first, or pass --no-recommended")


# --------------------------------------------------------------------------- the plan


def default_workers(cores: int) -> list[int]:
    """The ``num_workers`` of the loop's sweep: 0, the powers of two below ``cores``, and
    ``cores - 1`` (a core left to the main process), e.g. 0, 1, 2, 4, 8, 15 on 16 cores."""
    counts = {0, max(0, cores - 1)} | {2**k for k in range(max(cores, 1).bit_length()) if 2**k < cores}
    return sorted(counts)


@dataclass(frozen=True)
class Plan:
    """How much the recorder measures (:func:`plan_for`; ``--quick`` measures less)."""

    sizes: tuple[int, ...]
    repeats: int
    large_repeats: int
    workers: tuple[int, ...]
    stall_free_steps: int
    loop_batches: tuple[int, int]  # batches timed with 0 or 1 worker, and with more
    max_seconds: float
    synced: tuple[int, ...]  # worker counts also run with a synchronize per step
    items: int = 64  # items timed for item_cost_s, on each number of threads
    quick: bool = False


def plan_for(*, quick: bool, cores: int, workers: Sequence[int] | None = None,
             max_seconds: float | None = None) -> Plan:
    """The recorder's plan: ``readings/h200-2026-11-26/record.py``'s, or its QUICK one.

    ``workers`` (sorted, default :func:`default_workers`; 0 and 2 with ``quick``) are timed
    each; the first, the middle and the last also with a synchronize per step.
    """
    from ...measure.pinning import RECORD_SIZES

    if workers is None:
        workers = sorted({0, min(2, max(cores - 1, 0))}) if quick else default_workers(cores)
    w = tuple(sorted(workers))
    synced = tuple(sorted({w[0], w[len(w) // 2], w[-1]}))
    if quick:
        return Plan(sizes=tuple(2**k for k in (12, 16, 20, 22, 24)), repeats=5, large_repeats=3, workers=w,
                    stall_free_steps=10, loop_batches=(4, 8), max_seconds=20.0 if max_seconds is None else max_seconds,
                    synced=synced, quick=True)
    return Plan(sizes=RECORD_SIZES, repeats=20, large_repeats=8, workers=w, stall_free_steps=60,
                loop_batches=(25, 80), max_seconds=60.0 if max_seconds is None else max_seconds, synced=synced)


# --------------------------------------------------------------------------- the user's loop


def _load(spec: str, what: str) -> tuple[Any, Any]:
    """The callable named by ``MODULE:ATTRIBUTE`` (:func:`feedgpu.base.cli.import_named`), and its module."""
    try:
        obj, module = import_named(spec, what)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if not callable(obj):
        raise UsageError(f"{what} {spec} is not callable")
    return obj, module


def _user_loop(loader_spec: str, step_spec: str) -> tuple[Any, Any, dict[str, Path]]:
    """The user's DataLoader (built by the factory), the step, and their modules' files to keep."""
    from ...diagnosis.command import build_loader

    factory, loader_module = _load(loader_spec, "--loader")
    step, step_module = _load(step_spec, "--step")
    loader = build_loader(factory, loader_spec)
    kept = {}
    for module in (loader_module, step_module):
        source = getattr(module, "__file__", None)
        if source and source.endswith(".py") and Path(source).is_file():
            kept[Path(source).name] = Path(source)
    return loader, step, kept


def measure_item_cost(dataset: Any, items: int = 64) -> dict[str, float]:
    """Seconds of one item (``dataset[i]``) in this process: ``items`` items on one thread,
    the next ``items`` on every usable core (as ``record.py``). Empty for a dataset without
    indices (an ``IterableDataset``)."""
    import torch

    from ...measure.machine import usable_cores

    try:
        length = len(dataset)
        dataset[0]  # noqa: B018 - an IterableDataset raises here
    except (TypeError, NotImplementedError, IndexError, KeyError):  # no len(), no indices, or no items
        return {}
    threads = torch.get_num_threads()

    def per_item(start: int) -> float:
        began = time.perf_counter()
        for i in range(start, start + items):
            dataset[i % length]
        return (time.perf_counter() - began) / items

    try:
        torch.set_num_threads(1)
        one = per_item(0)
        torch.set_num_threads(usable_cores())
        every = per_item(items)
    finally:
        torch.set_num_threads(threads)
    return {"one_thread": one, "all_threads": every}


def _endless(loader: Any) -> Iterator[Any]:
    """The loader's batches, epoch after epoch (a small dataset must not end a timed loop)."""
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            raise ValueError("the loader gives no batch")


def measure_loop(base: Any, step: Callable[[Any], Any], synchronize: Callable[[], None], *, num_workers: int,
                 synced: bool, batches: int) -> dict[str, Any]:
    """The user's loop, unchanged but for ``num_workers`` (persistent workers), steady, as
    ``record.py`` timed it: a warm-up of 3 batches (0 workers) or ``max(4, 2 x workers)``,
    then ``batches`` batches timed, and the time spent in ``next()`` among them.

    Returns:
        A row of ``copies_and_loop.json``'s ``loops`` (:class:`feedgpu.readings.LoopReading`).
    """
    from ...diagnosis import clone_loader

    loader = clone_loader(base, num_workers=num_workers, persistent_workers=num_workers > 0)
    began = time.perf_counter()
    source = _endless(loader)
    try:
        for _ in range(3 if num_workers == 0 else max(4, 2 * num_workers)):
            step(next(source))
        synchronize()
        warm_up_s = time.perf_counter() - began
        began, wait = time.perf_counter(), 0.0
        for _ in range(batches):
            asked = time.perf_counter()
            batch = next(source)
            wait += time.perf_counter() - asked
            step(batch)
            if synced:
                synchronize()
        synchronize()
        seconds = (time.perf_counter() - began) / batches
    finally:
        source.close()  # ends the epoch's iterator; dropping the loader stops its persistent workers
        del source, loader
    return {"num_workers": num_workers, "synced_each_step": synced, "s_per_batch": seconds,
            "wait_s_per_batch": wait / batches, "batches": batches, "warm_up_s": warm_up_s}


# --------------------------------------------------------------------------- the course's identity

#: The distribution the course installs as (``[project] name`` in ``pyproject.toml``).
DISTRIBUTION = "feeding-the-gpu"

#: The course's own root: the folder that holds the ``feedgpu`` package beside ``lfw_dataset.py``,
#: found from the package's own file. Not the current folder, nor git's idea of the repository:
#: a copy of the course inside another repository would name that repository's commit.
SOURCE_ROOT = Path(_package_file).resolve().parent.parent

#: Hex digits of the source hash kept in ``machine.json``: 64 bits, enough to tell versions apart.
SOURCE_HASH_DIGITS = 16


def course_version(root: Path) -> str | None:
    """The course's version: the installed distribution's (:data:`DISTRIBUTION`), else ``[project]
    version`` of ``root/pyproject.toml`` (a copy run without installing), else None.

    It names a release, not the code: two copies of 0.1.0 may differ (:func:`course_source_sha256` tells).
    """
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        import tomllib  # Python 3.11+; on 3.10 the version stays unknown
        with open(root / "pyproject.toml", "rb") as f:
            return str(tomllib.load(f)["project"]["version"])
    except (ImportError, OSError, KeyError, ValueError):  # ValueError: tomllib.TOMLDecodeError
        return None


def course_source_files(root: Path) -> list[str]:
    """The course's sources, as paths relative to ``root`` (``/``-separated), sorted: every
    ``feedgpu/**/*.py`` (none under a hidden folder such as ``.ipynb_checkpoints``, whose files
    never run) and ``lfw_dataset.py``.

    Raises:
        FileNotFoundError: ``root`` holds no ``feedgpu/__init__.py`` or no ``lfw_dataset.py``.
    """
    for required in ("feedgpu/__init__.py", "lfw_dataset.py"):
        if not (root / required).is_file():
            raise FileNotFoundError(f"{root / required} is missing: the course's sources are not where its package "
                                    "is; reinstall the course from its folder (.venv/bin/pip install -e .)")
    found = [path.relative_to(root).as_posix() for path in (root / "feedgpu").rglob("*.py") if path.is_file()]
    kept = [name for name in found if not any(part.startswith(".") for part in name.split("/"))]
    return sorted([*kept, "lfw_dataset.py"])


def course_source_sha256(root: Path, files: Sequence[str] | None = None) -> str:
    """The course's code as a hash: the first :data:`SOURCE_HASH_DIGITS` hex digits of the sha256 of
    a manifest with one line per file of :func:`course_source_files`, in that order,
    ``<sha256 of its bytes>  <path relative to root>`` and a newline (``sha256sum``'s lines), so
    that an edit, an added or removed file, and a rename each change it. The same from a shell::

        cd ROOT && { find feedgpu -name '*.py' -not -path '*/.*'; echo lfw_dataset.py; } \\
            | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16
    """
    manifest = hashlib.sha256()
    for name in course_source_files(root) if files is None else files:
        manifest.update(f"{hashlib.sha256((root / name).read_bytes()).hexdigest()}  {name}\n".encode())
    return manifest.hexdigest()[:SOURCE_HASH_DIGITS]


def course_identity(root: Path) -> dict[str, Any]:
    """What names the course that recorded a folder, ``machine.json``'s ``recorder`` beside its
    ``name``: ``version`` (:func:`course_version`), ``source_sha256`` (:func:`course_source_sha256`)
    and ``source_files`` (how many files it covers).

    Nothing comes from git. The recorder once wrote ``commit`` and ``modified`` from ``git``, which
    answers for whatever repository encloses the folder: a copy of the course inside another
    repository named that repository's commit. They are dropped rather than kept under another
    name, since the hash names the code that ran without them, and can be computed for any commit.
    (Folders recorded before keep them: their files are never edited.)

    Raises:
        FileNotFoundError: as :func:`course_source_files`.
    """
    files = course_source_files(root)
    return {"version": course_version(root), "source_sha256": course_source_sha256(root, files),
            "source_files": len(files)}


# --------------------------------------------------------------------------- the recording


def _say(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def _bar(items: Sequence[Any], desc: str, unit: str) -> Any:
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, unit=unit, leave=False)


def _machine(described: dict[str, Any], gpu: dict[str, Any], emptied: bool, when: str,
             argv: Sequence[str], course: dict[str, Any]) -> dict[str, Any]:
    machine = dict(described)
    machine.pop("device", None)  # "cuda": the GPU's name below is the device of a readings folder
    machine.update({
        "device": gpu.get("gpu"), "gpu": gpu.get("gpu"), "gpu_count": gpu.get("gpu_count"),
        "cuda": gpu.get("cuda"), "driver": gpu.get("driver"), "cpus": os.cpu_count(), "when": when,
        "recorder": {"name": PROG, **course},
        "command": " ".join([PROG, *argv]),
        "guards": {"empty_host_cache": emptied},
    })
    return machine


def _copy_loops(instruments: Instruments, source: str) -> dict[str, Any]:
    compute_s = instruments.compute_s()
    from ...readings import CopyLoop, copy_loops_json

    loops = []
    for spec in _bar(COPY_LOOPS, "copy loops", "loop"):
        how = {"pinned": spec.pinned, "non_blocking": spec.non_blocking, "prefetch": spec.prefetch}
        runs = [instruments.training(spec.n_batches, spec.batch_bytes, **how) for _ in range(COPY_LOOP_RUNS)]
        loop = CopyLoop(**dataclasses.asdict(spec), measured_s=statistics.median(runs), compute_s=compute_s,
                        source=(f"{source}: feedgpu.measure.pinning.measure_training({spec.n_batches}, "
                                f"{spec.batch_bytes}, pinned={spec.pinned}, non_blocking={spec.non_blocking}, "
                                f"prefetch={spec.prefetch}), the median of {COPY_LOOP_RUNS} runs (all_s), each "
                                "after its own untimed run; compute_s: measure_compute_s() (CUDA events)"))
        loops.append((loop, runs))
    return copy_loops_json(loops)


def _bench_file(instruments: Instruments) -> dict[str, Any]:
    from . import machine as bench_machine

    figures, failed = [], []
    try:
        figures = [dict(f, bench="gpu", when=time.strftime("%Y-%m-%d %H:%M:%S")) for f in instruments.bench()]
    except Exception as err:  # noqa: BLE001 - as feedgpu-bench: the failure is kept, the rest recorded
        failed.append(f"gpu: {type(err).__name__}: {err}"[:500])
        _say(f"the bench failed (kept in bench_gpu.json): {failed[-1]}")
    return {"machine": bench_machine(), "figures": figures, "failed": failed}


def _record_loop(instruments: Instruments, plan: Plan, loader: Any, step: Any,
                 record: dict[str, Any]) -> dict[str, Any]:
    """Item cost, stall-free step and loops into ``record``; returns the diagnoses' files."""
    from ...diagnosis import clone_loader
    from ...measure.feeding import measure_stall_free_step

    _say("the loader: one item, in this process")
    record["item_cost_s"] = measure_item_cost(loader.dataset, plan.items)
    _say("the stall-free step: the step on one batch held in memory")
    batch = next(iter(clone_loader(loader, num_workers=0)))  # as the loader hands it over (pinned if it pins)
    free, free_synced = measure_stall_free_step(step, batch, instruments.synchronize, plan.stall_free_steps)
    record["stall_free_step_s"], record["stall_free_step_synced_s"] = free, free_synced
    del batch
    _say(f"the loop by num_workers: {', '.join(map(str, plan.workers))} "
         f"(also synchronised each step: {', '.join(map(str, plan.synced))})")
    runs = [(w, synced) for w in plan.workers for synced in ((False, True) if w in plan.synced else (False,))]
    loops = []
    for workers, synced in _bar(runs, "loops", "loop"):
        batches = plan.loop_batches[0] if workers <= 1 else plan.loop_batches[1]
        loops.append(measure_loop(loader, step, instruments.synchronize, num_workers=workers, synced=synced,
                                  batches=batches))
    record["loops"] = loops
    fastest = min((row for row in loops if not row["synced_each_step"]), key=lambda row: row["s_per_batch"])
    files = {}
    for workers in sorted({loader.num_workers, fastest["num_workers"]}):
        _say(f"the diagnosis with num_workers={workers} (at most {plan.max_seconds:g} s)")
        files[f"diagnosis_nw{workers}.json"] = instruments.diagnose(clone_loader(loader, num_workers=workers), step,
                                                                    plan.max_seconds)
    return files


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description="Record this machine's readings folder (readings/<gpu>-<date>/): "
                     "copies by size, the course's copy loops, the bench's gpu figures, and your loop. Needs a "
                     "CUDA GPU.")
    parser.add_argument("--name", help="the folder's name (default: the GPU's name and today's date, e.g. "
                        "h100-80gb-hbm3-2026-11-27)")
    parser.add_argument("--root", type=Path, default=READINGS_ROOT, help="where the folder goes "
                        "(default: the course's readings/)")
    parser.add_argument("--loader", metavar="MODULE:FACTORY", help="a function that returns your DataLoader")
    parser.add_argument("--step", metavar="MODULE:STEP", help="your training step, a function of a batch")
    parser.add_argument("--workers", metavar="N,N,...", help="the num_workers of your loop to time (default: 0, "
                        "powers of two below the cores, and cores - 1)")
    parser.add_argument("--max-seconds", type=float, metavar="S", help="each diagnosis's budget (default 60; "
                        "20 with --quick)")
    parser.add_argument("--no-recommended", action="store_true", help="do not record the course's recommended "
                        "faces loop (recommended_loop.json: its predicted and measured busy share, beside the plain "
                        "loop's)")
    parser.add_argument("--quick", action="store_true", help="fewer sizes, repeats and loops: a check in a minute "
                        "or two, not a reference")
    return parser


def _workers(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        counts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UsageError(f"--workers must be numbers separated by commas, e.g. 0,2,4, got {text!r}") from None
    if not counts or counts[0] < 0:
        raise UsageError(f"--workers must be numbers >= 0, e.g. 0,2,4, got {text!r}")
    return counts


def _check_args(args: argparse.Namespace) -> None:
    if (args.loader is None) != (args.step is None):
        raise UsageError("--loader and --step go together: name both (e.g. --loader mytraining:make_loader "
                         "--step mytraining:train_step) or neither")
    if args.max_seconds is not None and not (0 < args.max_seconds < float("inf")):
        raise UsageError(f"--max-seconds must be a finite number > 0, got {args.max_seconds}")
    if args.name is not None and (not args.name or args.name != Path(args.name).name or args.name.startswith(".")):
        raise UsageError(f"--name must be a plain folder name (no '/', not hidden), got {args.name!r}")


def main(argv: Sequence[str] | None = None, *, instruments: Instruments | None = None) -> int:
    """Run the command; returns the exit status (0 written, 2 refused with a one-line reason, 130 Ctrl-C).

    Args:
        argv: the arguments (default ``sys.argv[1:]``).
        instruments: what to measure with (default :func:`default_instruments`; the tests pass fakes).
    """
    return run_command(PROG, lambda args: _main(args, instruments), argv, interrupted="interrupted: nothing written")


def _main(argv: list[str], instruments: Instruments | None) -> int:
    args = _parser().parse_args(argv)
    _check_args(args)
    workers = _workers(args.workers)
    instruments = instruments or default_instruments()
    reason = instruments.cuda_skip_reason()
    if reason is not None:
        raise UsageError(f"the recorder needs a CUDA GPU, and there is none here: {reason}")
    if not args.no_recommended and instruments.recommended is not None:
        missing = instruments.recommended_missing()
        if missing is not None:
            raise UsageError(missing)
    gpu = instruments.gpu()
    when = time.strftime("%Y-%m-%d %H:%M:%S")
    folder = Path(args.root) / (args.name or default_name(str(gpu.get("gpu") or "gpu")))
    if folder.exists():
        raise UsageError(f"{folder} exists already: choose another --name, or remove it first")
    loader = step = None
    kept: dict[str, Path] = {}
    if args.loader is not None:
        loader, step, kept = _user_loop(args.loader, args.step)
    return _record(args, argv, instruments, gpu, when, folder, loader, step, kept, workers)


def _record(args: argparse.Namespace, argv: Sequence[str], instruments: Instruments, gpu: dict[str, Any], when: str,
            folder: Path, loader: Any, step: Any, kept: dict[str, Path], workers: list[int] | None) -> int:
    import torch

    from ...measure.machine import usable_cores
    from ...readings import BENCH_FILE, COPIES_FILE, COPY_LOOPS_FILE, MACHINE_FILE, RECOMMENDED_FILE, write_readings

    try:
        course = course_identity(SOURCE_ROOT)  # before measuring: a course without its sources is refused
    except FileNotFoundError as err:
        raise UsageError(str(err)) from None
    plan = plan_for(quick=args.quick, cores=usable_cores(), workers=workers, max_seconds=args.max_seconds)
    recommended = None if args.no_recommended else instruments.recommended
    stages = 4 + (loader is not None) + (recommended is not None)
    emptied = instruments.empty_host_cache()
    machine = _machine(instruments.describe_machine(), gpu, emptied, when, argv, course)
    _say(f"[1/{stages}] the machine: {gpu.get('gpu')}, {os.cpu_count()} cores, torch {torch.__version__}"
         + ("" if emptied else " (no torch.accelerator.empty_host_cache: guarded)") + f"; writing {folder}")
    _say(f"[2/{stages}] copies by size: {len(plan.sizes)} sizes, {plan.sizes[0] // 2**10} KiB to "
         f"{plan.sizes[-1] // 2**20} MiB")
    copies = []
    for nbytes in _bar(plan.sizes, "copies", "size"):
        copies.extend(instruments.copy_table([nbytes], repeats=plan.repeats, large_repeats=plan.large_repeats))
    record: dict[str, Any] = {"device": gpu.get("gpu"), "torch": torch.__version__, "cpus": os.cpu_count(),
                              "when": when, "copies": copies}
    _say(f"[3/{stages}] the copy loops: the bench's two and notebook 05's three")
    source = f"{PROG} (course {course['version']}, source sha256 {course['source_sha256']})"
    files: dict[str, Any] = {COPY_LOOPS_FILE: _copy_loops(instruments, source)}
    _say(f"[4/{stages}] the bench's gpu figures (feedgpu-bench --only gpu)")
    files[BENCH_FILE] = _bench_file(instruments)
    if loader is not None:
        _say(f"[5/{stages}] your loop: {args.loader} feeding {args.step}")
        files.update(_record_loop(instruments, plan, loader, step, record))
    if recommended is not None:
        _say(f"[{stages}/{stages}] the course's recommended faces loop: predicted, then measured, beside the plain one")
        try:
            files[RECOMMENDED_FILE] = recommended(plan, instruments.synchronize)
        except Exception as err:  # noqa: BLE001 - as the bench: the failure is kept, the rest recorded
            files[RECOMMENDED_FILE] = {"failed": f"{type(err).__name__}: {err}"[:500]}
            _say(f"the recommended loop failed (kept in {RECOMMENDED_FILE}): {files[RECOMMENDED_FILE]['failed']}")
    files[COPIES_FILE] = record
    files[MACHINE_FILE] = machine
    try:
        write_readings(folder, files, extra=kept)
    except FileExistsError as err:
        raise UsageError(str(err)) from None
    print(folder)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
