"""A simulated accelerator that runs training steps asynchronously, in real time, and the
per-step breakdown of its time into busy, waiting for data, and other.

A GPU does not make the Python thread wait for a step: ``loss = model(x)`` only *queues*
the kernels, and the host goes on (to fetch the next batch) while the device computes.
The host waits only when it needs a result (``loss.item()``, ``print(loss)``,
``torch.cuda.synchronize()``, a copy back to the CPU, a blocking copy to the device).
:class:`AsyncAccelerator` plays that out without a GPU:

* :meth:`AsyncAccelerator.step` queues one step and returns at once with a
  :class:`DeviceValue` (the step's loss, not yet computed); a thread of the accelerator
  takes steps in order, runs the small model's real update on the CPU, and stays busy
  until ``step_s`` has passed since the step started (the step's fixed cost; the thread
  sleeps, so it uses almost no core). At most ``queue_depth`` steps wait in the queue:
  a host that runs further ahead waits, as CUDA's launch queue makes it.
* :meth:`DeviceValue.item` makes the host wait for every step queued before the call,
  not only the step whose loss it reads: a *synchronisation*, counted in
  :attr:`AsyncAccelerator.syncs`. So does showing the value (``print(loss)``,
  ``repr``, an f-string). A step that fails raises at its own ``.item()``, or at the
  next :meth:`~AsyncAccelerator.synchronize` (or the end of a ``with`` block) if nothing
  read it.
* :meth:`AsyncAccelerator.feed` wraps a loader: it records when the host was inside
  ``next()``, waiting for a batch.
* :func:`step_breakdown` splits the device's time into, per step, *busy* (inside the
  step), *waiting for data* (idle while the host was inside ``next()``) and *other*
  (idle while the host was doing anything else: a synchronisation, converting the
  batch, logging). Holistic Trace Analysis splits a real GPU's time the same way
  (``hta.get_temporal_breakdown``: busy and idle; ``get_idle_time_breakdown``: idle by
  cause, *host wait*, *kernel wait* and *other*); here the device runs one step at a
  time, so there is no kernel wait, and the host's wait is split by what the host was
  doing: inside ``next()`` (data) or anything else.

The accelerator also keeps what each step received (sample ids, labels, the input's
shape, and a :func:`fingerprint` per sample), so that a grader can check that an epoch fed every
sample once, whole, at the right resolution (:meth:`AsyncAccelerator.received`).

Example::

    with AsyncAccelerator(0.030) as device:
        for images, labels, ids in device.feed(loader):
            loss = device.step(images.float(), labels, ids)
        device.synchronize()
    print(device.breakdown().busy_share)
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from ..base.checks import check_int, check_seconds

__all__ = [
    "DeviceValue",
    "AsyncAccelerator",
    "Breakdown",
    "step_breakdown",
    "Received",
    "fingerprint",
]


def fingerprint(inputs: torch.Tensor) -> np.ndarray:
    """One number per sample of a batch ``N x ... x W``: the sum of its values, each weighted
    by its column (1 to ``W``), in float64. A sample that differs, or is mirrored
    left-right, gets another number (a plain sum would not see a mirror)."""
    x = inputs.detach().double()
    weights = torch.arange(1, x.shape[-1] + 1, dtype=torch.float64)
    return (x * weights).reshape(x.shape[0], -1).sum(dim=1).numpy()


class DeviceValue:
    """The result of a queued step (its loss), available once the device has run it.

    :meth:`item` (and ``float()``) waits, as ``loss.item()`` does on a GPU, for every step
    queued on the accelerator before the call, then returns the loss as a Python float:
    one synchronisation. Showing the value (``print(loss)``, ``str``, ``repr``, an
    f-string) waits the same way, as printing a CUDA tensor does. :attr:`done` says,
    without waiting, whether the step has finished.

    Why the whole queue, and not only this step: on CUDA, ``Tensor.item()`` is
    ``_local_scalar_dense``, which in ``aten/src/ATen/native/cuda/CUDAScalar.cu``
    (``_local_scalar_dense_cuda``) copies the value with ``at::cuda::memcpy_and_sync``,
    that is ``cudaMemcpyAsync`` on the current stream then ``cudaStreamSynchronize``
    (``c10/cuda/CUDAFunctions.h``): it returns once everything queued on the stream
    before it has run, steps queued after the one read included. A copy to the device
    with ``non_blocking=False`` ends the same way (``copy_kernel_cuda`` in
    ``aten/src/ATen/native/cuda/Copy.cu``). ``Tensor.__repr__`` (``torch/_tensor.py``)
    formats through ``torch/_tensor_str.py``, whose ``_scalar_str`` calls ``.item()``;
    ``Tensor.__format__`` calls ``.item()`` for a 0-dim tensor.
    """

    def __init__(self, device: AsyncAccelerator) -> None:
        self._device = device
        self._ready = threading.Event()
        self._value: float | None = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        """Whether the step has run (without waiting, and no synchronisation)."""
        return self._ready.is_set()

    def item(self) -> float:
        """Wait until every step queued before the call has run (this one among them),
        then this step's loss.

        Raises:
            the step's own error, if it failed (once reported here, the next
            :meth:`~AsyncAccelerator.synchronize` does not raise it again).
        """
        self._device._sync_queued()
        self._ready.wait()  # already set: the steps run in order, this one was queued before
        if self._error is not None:
            self._device._reported(self)
            raise self._error
        return float(self._value)  # type: ignore[arg-type]

    def __float__(self) -> float:
        return self.item()

    def __repr__(self) -> str:
        """``DeviceValue(<loss>)``, after waiting as :meth:`item` (``print(loss)`` synchronises)."""
        return f"DeviceValue({self.item()!r})"

    def __format__(self, format_spec: str) -> str:
        """The loss formatted as a float (``f"{loss:.3f}"``), after waiting as :meth:`item`."""
        return format(self.item(), format_spec)


class Received(NamedTuple):
    """What an accelerator's steps received, in order: per step the batch size and the
    input's shape after the batch dimension; per sample its id, label and
    :func:`fingerprint`."""

    batch_sizes: list[int]
    shapes: list[tuple[int, ...]]
    ids: np.ndarray
    labels: np.ndarray
    fingerprints: np.ndarray


_STOP = object()


class AsyncAccelerator:
    """A real-time simulated accelerator: steps run in order on a thread of their own, each
    busy ``step_s``, while the host goes on.

    Args:
        step_s: the fixed cost of one step, in seconds.
        model: a ``torch.nn.Module`` trained by the steps (cross-entropy, SGD), or None
            for steps that only take time (the loss is then 0.0).
        lr: the SGD learning rate.
        queue_depth: how many steps may wait to run; :meth:`step` blocks beyond that.

    Use it as a context manager, or call :meth:`close`. Attributes: ``steps`` (steps
    queued), ``syncs`` (synchronisations the host asked for), ``busy_spans`` (the
    ``(start, end)`` of every step run, :func:`time.perf_counter` seconds), ``data_spans``
    (the host's waits inside ``next()`` of :meth:`feed`).

    Raises:
        ValueError, TypeError: a negative or non-finite ``step_s``, a ``queue_depth`` below 1.
    """

    def __init__(self, step_s: float, model: torch.nn.Module | None = None, *, lr: float = 0.05,
                 queue_depth: int = 2) -> None:
        self.step_s = check_seconds("step_s", step_s)
        self.queue_depth = check_int("queue_depth", queue_depth, minimum=1)
        self.model = model
        self._optimizer = torch.optim.SGD(model.parameters(), lr=lr) if model is not None else None
        self._queue: queue.Queue = queue.Queue(maxsize=self.queue_depth)
        self._lock = threading.Lock()
        self.steps = 0
        self.syncs = 0
        self._failed: list[DeviceValue] = []  # failed steps whose error no .item() has reported yet
        # steps put in the queue, and steps run: the queue runs in order, so once `_ran` reaches
        # the count put before a call, everything queued before it has run
        self._put = self._ran = 0
        self._ran_changed = threading.Condition(self._lock)
        self.busy_spans: list[tuple[float, float]] = []
        self.data_spans: list[tuple[float, float]] = []
        self._batch_sizes: list[int] = []
        self._shapes: list[tuple[int, ...]] = []
        self._ids: list[np.ndarray] = []
        self._labels: list[np.ndarray] = []
        self._fingerprints: list[np.ndarray] = []
        self.started_at = time.perf_counter()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="simulated-accelerator", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------------- host side

    def step(self, inputs: torch.Tensor, labels: Any, ids: Any = None) -> DeviceValue:
        """Queue one training step on ``inputs`` (a float tensor ``N x ...``) and their
        ``labels``; ``ids`` are the samples' ids (kept for the epoch's checks). Returns at
        once (unless ``queue_depth`` steps already wait) with the step's loss, pending.

        Raises:
            TypeError: ``inputs`` is not a floating-point tensor (the model needs floats).
            ValueError: ``labels`` (or ``ids``) do not have one entry per input.
            RuntimeError: the accelerator is closed.
        """
        if self._closed:
            raise RuntimeError("this accelerator is closed: make a new one")
        if not isinstance(inputs, torch.Tensor) or not inputs.is_floating_point():
            raise TypeError(f"inputs must be a floating-point torch.Tensor, got {type(inputs).__name__}"
                            + (f" of {inputs.dtype}" if isinstance(inputs, torch.Tensor) else ""))
        labels = torch.as_tensor(labels)
        n = inputs.shape[0]
        if labels.shape != (n,):
            raise ValueError(f"labels must have one entry per input ({n}), got shape {tuple(labels.shape)}")
        ids_array = np.full(n, -1, dtype=np.int64) if ids is None else np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids_array.shape != (n,):
            raise ValueError(f"ids must have one entry per input ({n}), got {ids_array.shape[0]}")
        value = DeviceValue(self)
        with self._lock:
            self.steps += 1
            self._batch_sizes.append(n)
            self._shapes.append(tuple(inputs.shape[1:]))
            self._ids.append(ids_array)
            self._labels.append(labels.numpy().astype(np.int64, copy=True))
            self._fingerprints.append(fingerprint(inputs))
        self._queue.put((inputs, labels, value))
        with self._lock:  # counted once in the queue: a put interrupted while the queue is full queued nothing
            self._put += 1
        return value

    def synchronize(self) -> None:
        """Wait until every queued step has run (``torch.cuda.synchronize()``).

        Raises:
            RuntimeError: a step failed and no ``.item()`` has reported it yet (as a GPU
                reports a failed kernel at the next synchronisation); raised once.
        """
        self._count_sync()
        self._queue.join()
        self._raise_unreported()

    def feed(self, batches: Iterable[Any]) -> Iterator[Any]:
        """Yield the batches of ``batches``, recording each wait inside ``next()`` (and the
        wait for the iterator itself, where workers start) in :attr:`data_spans`."""
        start = time.perf_counter()
        iterator = iter(batches)
        self.data_spans.append((start, time.perf_counter()))
        while True:
            start = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                self.data_spans.append((start, time.perf_counter()))
                return
            self.data_spans.append((start, time.perf_counter()))
            yield batch

    def close(self) -> None:
        """Finish the queued steps, then stop the accelerator's thread."""
        if not self._closed:
            self._closed = True
            self._queue.put(_STOP)
            self._thread.join()

    def __enter__(self) -> AsyncAccelerator:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.close()
        if exc_type is None:  # a failure of the block itself is the one to see
            self._raise_unreported()

    def _count_sync(self) -> None:
        with self._lock:
            self.syncs += 1

    def _sync_queued(self) -> None:
        """Count a synchronisation and wait until every step queued so far has run (a
        stream synchronisation: what ``.item()`` does on CUDA)."""
        with self._lock:
            self.syncs += 1
            target = self._put
            self._ran_changed.wait_for(lambda: self._ran >= target)

    def _reported(self, value: DeviceValue) -> None:
        with self._lock:
            if value in self._failed:
                self._failed.remove(value)

    def _raise_unreported(self) -> None:
        with self._lock:
            failed, self._failed = self._failed, []
        if failed:
            err = failed[0]._error
            raise RuntimeError(f"{len(failed)} step(s) failed on the accelerator, the first with "
                               f"{type(err).__name__}: {err}") from err

    # ----------------------------------------------------------------------- device side

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is _STOP:
                    return
                inputs, labels, value = job
                start = time.perf_counter()
                try:
                    value._value = self._train(inputs, labels)
                except BaseException as err:  # handed to the host at .item(), or at the next synchronize()
                    value._error = err
                    with self._lock:
                        self._failed.append(value)
                remaining = self.step_s - (time.perf_counter() - start)
                if remaining > 0:
                    time.sleep(remaining)
                self.busy_spans.append((start, time.perf_counter()))
                value._ready.set()
                with self._lock:
                    self._ran += 1
                    self._ran_changed.notify_all()
            finally:
                self._queue.task_done()

    def _train(self, inputs: torch.Tensor, labels: torch.Tensor) -> float:
        if self.model is None:
            return 0.0
        self._optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(self.model(inputs), labels)
        loss.backward()
        self._optimizer.step()
        return float(loss.detach())

    # ----------------------------------------------------------------------- after the epoch

    def breakdown(self, start: float | None = None, end: float | None = None) -> Breakdown:
        """:func:`step_breakdown` of the steps run between ``start`` and ``end``
        (default: since the accelerator was made, until now)."""
        start = self.started_at if start is None else start
        end = time.perf_counter() if end is None else end
        spans = [s for s in self.busy_spans if s[0] >= start and s[1] <= end]
        return step_breakdown(spans, self.data_spans, start, end)

    def received(self) -> Received:
        """What every step received so far (see :class:`Received`)."""
        with self._lock:
            cat = (lambda parts, dtype: np.concatenate(parts) if parts else np.zeros(0, dtype))
            return Received(list(self._batch_sizes), list(self._shapes), cat(self._ids, np.int64),
                            cat(self._labels, np.int64), cat(self._fingerprints, np.float64))

    def __repr__(self) -> str:
        return f"AsyncAccelerator(step_s={self.step_s}, steps={self.steps}, syncs={self.syncs})"


@dataclass(frozen=True)
class Breakdown:
    """Where a device's time went between ``start`` and ``end``: per step (arrays, seconds)
    and in total.

    ``busy[k]`` is step ``k``'s time; ``waiting[k]`` and ``other[k]`` split the idle time
    just before it; ``tail_s`` is the idle time after the last step.
    """

    busy: np.ndarray
    waiting: np.ndarray
    other: np.ndarray
    tail_s: float
    total_s: float

    @property
    def busy_share(self) -> float:
        """The share of the wall time the device was busy (0 to 1)."""
        return float(self.busy.sum() / self.total_s) if self.total_s > 0 else 0.0

    @property
    def waiting_share(self) -> float:
        """The share of the wall time the device was idle while the host waited for data."""
        return float(self.waiting.sum() / self.total_s) if self.total_s > 0 else 0.0

    @property
    def other_share(self) -> float:
        """The share of the wall time the device was idle for any other reason."""
        return 1.0 - self.busy_share - self.waiting_share if self.total_s > 0 else 0.0

    def table(self):
        """A pandas DataFrame, one row per step: busy, waiting and other, in milliseconds."""
        import pandas as pd

        return pd.DataFrame({"busy ms": self.busy * 1e3, "waiting for data ms": self.waiting * 1e3,
                             "other ms": self.other * 1e3}).rename_axis("step")

    def summary(self) -> dict[str, float]:
        """The totals: steps, wall seconds and the three shares."""
        return {"steps": len(self.busy), "wall_s": self.total_s, "busy_share": self.busy_share,
                "waiting_share": self.waiting_share, "other_share": self.other_share}


def _overlap(a: float, b: float, spans: Sequence[tuple[float, float]]) -> float:
    """Seconds of ``[a, b]`` covered by ``spans`` (sorted, not overlapping each other)."""
    return sum(max(0.0, min(b, e) - max(a, s)) for s, e in spans if e > a and s < b)


def step_breakdown(busy_spans: Sequence[tuple[float, float]], data_spans: Sequence[tuple[float, float]],
                   start: float, end: float) -> Breakdown:
    """Split ``[start, end]`` into the device's busy spans and the idle gaps between them;
    the part of each gap during which the host was inside a data span is *waiting for
    data*, the rest *other*.

    Args:
        busy_spans: the ``(start, end)`` of each step, in order, not overlapping.
        data_spans: the ``(start, end)`` of each wait of the host for a batch, in order.
        start, end: the window (``end >= start``); spans are clipped to it.

    Raises:
        ValueError: ``end < start``, or a span ends before it starts.
    """
    if end < start:
        raise ValueError(f"end ({end}) is before start ({start})")
    for s, e in (*busy_spans, *data_spans):
        if e < s:
            raise ValueError(f"a span ends ({e}) before it starts ({s})")
    data = sorted((max(s, start), min(e, end)) for s, e in data_spans if e > start and s < end)
    busy, waiting, other = [], [], []
    cursor = start
    for s, e in sorted(busy_spans):
        s, e = max(s, start), min(e, end)
        if e <= s:
            continue
        gap_s = max(0.0, s - cursor)
        wait_s = _overlap(cursor, s, data) if gap_s > 0 else 0.0
        busy.append(e - s)
        waiting.append(wait_s)
        other.append(gap_s - wait_s)
        cursor = max(cursor, e)
    tail = max(0.0, end - cursor)
    return Breakdown(np.array(busy), np.array(waiting), np.array(other), tail, end - start)
