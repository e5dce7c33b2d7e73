"""The step wrappers: what the training step runs on while the diagnosis times a loop.

* :class:`SimulatedAccelerator`: a real-time stand-in for a GPU, for a student without
  one who asks "would a 30 ms step starve?". Each step holds the calling thread for
  ``step_s`` without using a CPU (a sleep, as a synchronising GPU step such as
  ``loss.item()`` holds the host), and adds the time to ``busy_s``.
* :class:`TimedStep`: the user's step, timed the same way; its CPU time is counted
  (``time.thread_time``) so the diagnosis knows how much of a core the step itself takes.
  On a CUDA GPU it also records a pair of CUDA events around every step, from which
  :meth:`TimedStep.gpu_busy_s` sums the device time between them.

The diagnosis never synchronises the user's loop per step (its harness runs with
``time_loader(..., synchronize=False)``): a step that queues its GPU work asynchronously
then overlaps it with the loading of the next batches, as in training. Recording an
event does not wait for the device; the events are read once, after the run
(:meth:`TimedStep.gpu_busy_s` synchronises then). So for an asynchronous step the wall
time of the step (``wall_s``, and the harness's step times) is the host's part, launching
the work, and the device's part is :meth:`TimedStep.gpu_busy_s`; for a step that waits
for its result (``loss.item()``) the wall time holds both.

These are the step wrappers the diagnosis times a loop with; the course's models of a GPU
(:mod:`feedgpu.models.device`, :mod:`feedgpu.models.accelerator`) model more than a step's
length, and the diagnosis needs none of it.

The CUDA events follow the pinned ``torch/cuda/streams.py``: ``Event(enable_timing=True)``
(line 184), ``Event.record()`` on the current stream (line 199), and
``Event.elapsed_time(end)`` in milliseconds "after the event was recorded and before the
end_event was recorded" (line 234), valid once both have completed (after
``torch.cuda.synchronize()``). The span between two events also holds the moments the
device waited for the host inside the step, so the sum is an upper bound of the device's
busy time. This path cannot run on the course's machines (no GPU): it is written from
the source, not measured.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from ...base.checks import check_number, check_seconds
from ...base.spin import spin_cpu

__all__ = ["SimulatedAccelerator", "ReplayedStep", "TimedStep"]


class SimulatedAccelerator:
    """A device that is busy ``step_s`` per step and makes the host wait for it (a sleep).

    Call it on a batch (it ignores the batch). Attributes ``busy_s`` (seconds busy so far,
    as measured around each sleep) and ``steps`` (steps taken).

    Raises:
        ValueError, TypeError: ``step_s`` negative, not finite or not a number.
    """

    def __init__(self, step_s: float) -> None:
        self.step_s = check_seconds("step_s", step_s)
        self.busy_s = 0.0
        self.steps = 0

    def __call__(self, batch: Any) -> None:
        start = time.perf_counter()
        time.sleep(self.step_s)
        self.busy_s += time.perf_counter() - start
        self.steps += 1

    def __repr__(self) -> str:
        return f"SimulatedAccelerator(step_s={self.step_s})"


class ReplayedStep:
    """A step measured in someone's loop, played again: ``cpu_s`` of work on this thread's
    CPU (counted by ``time.thread_time``, so a busy machine stretches it, as it stretched
    the original), then ``device_s`` holding the host without a CPU (a sleep), as the wait
    for an accelerator does. ``feedgpu-diagnose run`` diagnoses a script's loader with the
    step its loop measured; the planted ``main-thread-work`` loop uses it too.

    ``accelerator=False`` says that the original ran on no accelerator (a CPU-only
    script): its time off this thread's CPU was spent waiting for torch's other threads, or
    for a core beside busy workers, not for a device, and the diagnosis names no
    ``main-thread-work`` from it.

    ``parallel_share``: the share of ``cpu_s`` the original spent in torch's parallel
    regions (0: none; 1: all of it, on every one of torch's threads). That share is played
    as a fixed number of matrix products of one size (:data:`_REGION_SIDE`), each a parallel
    region on torch's threads as a step's products are, the number calibrated at the first
    call to take that much CPU on a quiet machine (from the fastest of a few regions timed,
    :data:`_CALIBRATION_REGIONS`), so that beside
    busy workers it is stretched as the original was: a region ends only when its last
    thread has had a core, and its threads spin-wait for work a while after it (a busy
    machine makes this thread's CPU grow, not only its wall time, so a replay held to a CPU
    deadline would end too soon). Any share above 0 plays one region at least: a step with
    a single small region already leaves torch's threads spinning after it.

    Raises:
        ValueError, TypeError: a time negative, not finite or not a number; ``parallel_share``
            outside 0 to 1.
    """

    def __init__(self, cpu_s: float, device_s: float, accelerator: bool = True, parallel_share: float = 0.0) -> None:
        self.cpu_s = check_seconds("cpu_s", cpu_s)
        self.device_s = check_seconds("device_s", device_s)
        self.accelerator = bool(accelerator)
        self.parallel_share = check_number("parallel_share", parallel_share)
        if self.parallel_share > 1:
            raise ValueError(f"parallel_share must be between 0 and 1, got {parallel_share!r}")
        self._regions: int | None = None  # calibrated at the first call
        self._tensors: Any = None

    def __call__(self, batch: Any) -> None:
        spin_cpu(self.cpu_s * (1.0 - self.parallel_share))
        if self.parallel_share > 0:  # last, as a backward pass ends a step: torch's threads spin on after it
            self._parallel()
        time.sleep(self.device_s)

    def _parallel(self) -> None:
        import torch

        if self._tensors is None:
            a = torch.full((_REGION_SIDE, _REGION_SIDE), 1.0 / _REGION_SIDE)
            self._tensors = (a, torch.empty_like(a))
        a, out = self._tensors
        played = 0
        if self._regions is None:  # as many regions as take the share's CPU on a quiet machine
            torch.mm(a, a, out=out)  # the first region starts torch's threads: not counted
            fastest = math.inf
            for played in range(1, _CALIBRATION_REGIONS + 1):
                start = time.thread_time()
                torch.mm(a, a, out=out)
                fastest = min(fastest, time.thread_time() - start)
            share_s = self.cpu_s * self.parallel_share
            self._regions = max(1, round(share_s / fastest)) if fastest > 0 else played
        for _ in range(self._regions - played):
            torch.mm(a, a, out=out)

    def __getstate__(self) -> dict[str, Any]:  # tensors and a calibration are this process's
        return {**self.__dict__, "_tensors": None, "_regions": None}

    def __repr__(self) -> str:
        off = "" if self.accelerator else ", accelerator=False"
        par = f", parallel_share={self.parallel_share:.2g}" if self.parallel_share else ""
        return f"ReplayedStep(cpu_s={self.cpu_s:.4g}, device_s={self.device_s:.4g}{off}{par})"


#: The side of the square matrices multiplied in a replayed parallel region: a product torch
#: splits over its threads, about 0.8 ms of each of 2 threads (a small step's own products
#: are each a region of that order). Regions far shorter are played in their thousands, each
#: waiting for its last thread to get a core: as additions of 65,536 elements (7 us each) a
#: 26 ms step replayed beside busy workers and another diagnosis took 1.3 s, and as
#: additions of a million, 0.3 to 2 s, where the step it replays took 21 to 57 ms.
_REGION_SIDE = 384
#: Regions timed, all of them, to count those a step's parallel share takes: the fastest is
#: the quiet machine's (a busy one only slows a region, its threads spinning meanwhile, which
#: counts as this thread's CPU: regions played until the share's CPU was spent were 3 beside
#: two busy processes, where a quiet machine needed 200 of the additions this replaced).
_CALIBRATION_REGIONS = 8


class TimedStep:
    """The user's ``step(batch)``, with its CPU time counted and, on CUDA, its device time.

    With ``cuda_events`` (by default where CUDA is available) a pair of CUDA events is
    recorded around every call; recording does not wait for the device, and the events are
    read only after the run (:meth:`gpu_busy_s`, :meth:`gpu_s_per_step`), so the loop is
    never synchronised per step. ``wall_s`` is then the host's part of an asynchronous step
    (launching its work); the device's part comes from the events.

    Attributes:
        cpu_s: CPU seconds of the calling thread inside the step, all calls.
        wall_s: wall seconds inside the step, all calls.
        calls: how many times it was called.
        events: ``(start, end)`` CUDA events, one pair per call (empty without them).
    """

    def __init__(self, step: Callable[[Any], Any], cuda_events: bool | None = None) -> None:
        self.step = step
        self.cpu_s = 0.0
        self.process_cpu_s = 0.0
        self.wall_s = 0.0
        self.calls = 0
        if cuda_events is None:
            import torch

            cuda_events = torch.cuda.is_available()
        self.cuda_events = bool(cuda_events)
        self.events: list[tuple[Any, Any]] = []

    def __call__(self, batch: Any) -> Any:
        if self.cuda_events:
            import torch

            start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start_event.record()
        wall, cpu, process = time.perf_counter(), time.thread_time(), time.process_time()
        try:
            return self.step(batch)
        finally:
            self.cpu_s += time.thread_time() - cpu
            self.process_cpu_s += time.process_time() - process
            self.wall_s += time.perf_counter() - wall
            self.calls += 1
            if self.cuda_events:
                end_event.record()
                self.events.append((start_event, end_event))

    @property
    def cpu_share(self) -> float:
        """CPU time over wall time inside the step: the share of one core it keeps busy."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def threads(self) -> float:
        """The threads the step keeps busy: the process's CPU inside it over this thread's (1
        at least; more for a step on torch's threads; the pin thread, if busy meanwhile, counts)."""
        return max(self.process_cpu_s / self.cpu_s, 1.0) if self.cpu_s > 0 else 1.0

    def gpu_busy_s(self, first: int = 0) -> float | None:
        """Device seconds between the events of steps ``first``, ``first + 1``, ...; None
        without CUDA events. Waits for the device first (the one synchronisation, once the
        run is over: call it after the loop, never inside it)."""
        if not self.cuda_events:
            return None
        import torch

        torch.cuda.synchronize()
        return sum(start.elapsed_time(end) for start, end in self.events[first:]) / 1e3

    def gpu_s_per_step(self, first: int = 0) -> float | None:
        """Mean device seconds per step over steps ``first``, ``first + 1``, ...: the device's
        part of a step, beside its host part (the step's wall time). None without CUDA
        events or without such steps. Waits for the device, as :meth:`gpu_busy_s`."""
        steps = len(self.events[first:])
        if not self.cuda_events or steps == 0:
            return None
        busy = self.gpu_busy_s(first)
        return None if busy is None else busy / steps
