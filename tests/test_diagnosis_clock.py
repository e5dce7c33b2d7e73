"""Tests that the diagnosis times the user's loop without synchronising it at every step.

There is no GPU here: CUDA is faked with monkeypatch. ``torch.cuda.is_available`` says
True, ``torch.cuda.synchronize`` and ``Event.synchronize`` write "synchronize" into a log,
and ``torch.cuda.Event`` is a fake whose ``elapsed_time`` comes from ``perf_counter`` at
record time. The step writes "step" into the same log, so the order of the two shows
whether anything synchronised the loop between its steps. Reading the events after the
last step (one synchronisation) is allowed: that is after the timing.

Each check has a control that must see synchronisations: ``time_loader``'s default clock,
and the diagnosis run with that clock put back. No time is asserted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import feedgpu.diagnosis.modes.live as procedure
import feedgpu.diagnosis.sensing.runs as runs
from feedgpu import diagnose
from feedgpu.diagnosis.sensing.steps import TimedStep
from feedgpu.measure.timing import time_loader

pytestmark = pytest.mark.unit

SYNC = "synchronize"
STEP = "step"


class Items(Dataset):
    """``n`` tiny tensors, each taking ``item_s`` to load."""

    def __init__(self, n: int, item_s: float = 0.0005) -> None:
        self.n, self.item_s = n, item_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.item_s)
        return torch.full((4,), float(i))


def make_fake_event(log: list[str]) -> type:
    class FakeEvent:
        """``torch.cuda.Event``: records the host's clock; its synchronize is logged."""

        def __init__(self, enable_timing: bool = False, **kwargs: Any) -> None:
            self.at: float | None = None

        def record(self, stream: Any = None) -> None:
            self.at = time.perf_counter()

        def synchronize(self) -> None:
            log.append(SYNC)

        def elapsed_time(self, end: FakeEvent) -> float:
            assert self.at is not None and end.at is not None, "elapsed_time of an event never recorded"
            return (end.at - self.at) * 1e3

    return FakeEvent


@pytest.fixture
def fake_cuda(monkeypatch) -> list[str]:
    """Fake CUDA; returns the log that synchronisations (and the test's steps) write to."""
    log: list[str] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append(SYNC))
    monkeypatch.setattr(torch.cuda, "Event", make_fake_event(log))
    return log


def logging_step(log: list[str]) -> Callable[[Any], None]:
    def step(batch: Any) -> None:
        log.append(STEP)

    return step


def syncs_before_last_step(log: list[str]) -> int:
    """Synchronisations logged before the last step: in the timed loop (or its start-up)."""
    assert STEP in log, f"the step never ran: {log}"
    last = len(log) - 1 - log[::-1].index(STEP)
    return log[:last].count(SYNC)


def split_runs(log: list[str]) -> list[list[str]]:
    """The log between each "run" and "end" marker (see :func:`mark_runs`)."""
    out: list[list[str]] = []
    for entry in log:
        if entry == "run":
            out.append([])
        elif entry == "end":
            continue
        elif out:
            out[-1].append(entry)
    return out


def mark_runs(monkeypatch, log: list[str]) -> None:
    """Wrap the diagnosis's ``measure_run`` to log where each of its runs starts and ends."""
    real_run = runs.measure_run

    def measure_run(*args: Any, **kwargs: Any) -> Any:
        log.append("run")
        try:
            return real_run(*args, **kwargs)
        finally:
            log.append("end")

    monkeypatch.setattr(procedure, "measure_run", measure_run)


def force_synchronising_clock(monkeypatch) -> None:
    """For the controls: the runs get ``time_loader``'s synchronising clock back."""
    real_time_loader = runs.time_loader

    def time_loader_synchronising(*args: Any, **kwargs: Any) -> Any:
        return real_time_loader(*args, **{**kwargs, "synchronize": True})

    monkeypatch.setattr(runs, "time_loader", time_loader_synchronising)


# --------------------------------------------------------------------------- the harness


def test_time_loader_without_synchronize_never_synchronises(fake_cuda):
    loader = DataLoader(Items(16), batch_size=2)
    time_loader(loader, batches=5, warmup=1, repeats=1, step=logging_step(fake_cuda), synchronize=False)
    assert fake_cuda.count(STEP) == 7, f"1 start-up + 1 warm-up + 5 timed steps: {fake_cuda}"
    assert fake_cuda.count(SYNC) == 0, f"synchronize=False still synchronised: {fake_cuda}"


def test_time_loader_synchronises_by_default(fake_cuda):
    """The control: the notebooks' clock synchronises before its readings, so the fakes see it."""
    loader = DataLoader(Items(16), batch_size=2)
    time_loader(loader, batches=5, warmup=1, repeats=1, step=logging_step(fake_cuda))
    assert syncs_before_last_step(fake_cuda) > 0, f"the default clock did not synchronise: {fake_cuda}"


# --------------------------------------------------------------------------- one run of the diagnosis


def measure_baseline(loader: DataLoader, step: TimedStep) -> runs.Run:
    """One run as ``_Diagnosis.run`` makes the baseline: CUDA events, ``gpu_busy`` given."""
    warmup = max(2, loader.num_workers)
    now = time.perf_counter()
    return runs.measure_run(loader, step, label="baseline", batches=warmup + 6, warmup=warmup,
                            soft_deadline=now + 20, hard_deadline=now + 30, cores=2,
                            memory=loader.num_workers > 0, gpu_busy=step.gpu_busy_s)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_measure_run_keeps_synchronisation_out_of_the_loop(fake_cuda, num_workers):
    loader = DataLoader(Items(32), batch_size=2, num_workers=num_workers, pin_memory=False)
    step = TimedStep(logging_step(fake_cuda), cuda_events=True)
    run = measure_baseline(loader, step)
    assert run.measured, run.reason
    assert syncs_before_last_step(fake_cuda) == 0, f"a synchronisation inside the timed loop: {fake_cuda}"
    assert fake_cuda[-1] == SYNC, f"the events are read after the last step: {fake_cuda}"
    assert run.gpu_busy_s is not None and run.gpu_busy_s >= 0
    timed = run.timing.n_batches[0]
    assert step.gpu_s_per_step(step.calls - timed) == pytest.approx(run.gpu_busy_s / timed)


def test_measure_run_with_the_synchronising_clock_is_seen(fake_cuda, monkeypatch):
    """The control: the same run with ``time_loader``'s default clock fails the check above."""
    force_synchronising_clock(monkeypatch)
    loader = DataLoader(Items(32), batch_size=2, pin_memory=False)
    measure_baseline(loader, TimedStep(logging_step(fake_cuda), cuda_events=True))
    assert syncs_before_last_step(fake_cuda) > 0, f"the synchronising clock went unseen: {fake_cuda}"


# --------------------------------------------------------------------------- the whole diagnosis


def diagnose_logged(log: list[str]) -> Any:
    loader = DataLoader(Items(48), batch_size=2, num_workers=0, pin_memory=False)
    return diagnose(loader, logging_step(log), max_seconds=8, progress=False)


def test_diagnose_never_synchronises_a_run_between_its_steps(fake_cuda, monkeypatch):
    mark_runs(monkeypatch, fake_cuda)
    result = diagnose_logged(fake_cuda)
    timed_runs = [r for r in split_runs(fake_cuda) if STEP in r]
    assert timed_runs, f"no run called the step: {fake_cuda}"
    for k, run in enumerate(timed_runs):
        assert syncs_before_last_step(run) == 0, f"run {k} synchronised inside its loop: {run}"
    assert result.gpu_busy_share is not None, "the baseline did not read its (fake) CUDA events"


def test_diagnose_with_the_synchronising_clock_is_seen(fake_cuda, monkeypatch):
    """The control: put the synchronising clock back in the runs, and the check above fails."""
    mark_runs(monkeypatch, fake_cuda)
    force_synchronising_clock(monkeypatch)
    diagnose_logged(fake_cuda)
    timed_runs = [r for r in split_runs(fake_cuda) if STEP in r]
    assert any(syncs_before_last_step(run) > 0 for run in timed_runs), f"unseen: {fake_cuda}"
