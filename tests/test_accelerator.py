"""Tests for feedgpu.models.accelerator: the simulated accelerator and the breakdown of its time.

The breakdown's expected values are worked out by hand from the spans (numbers chosen so
that the sums are exact). The accelerator runs in real time, so its checks are orderings
(which steps had finished when the host went on), counts, and ratios of sleeps of known
length with wide margins; a raw time is only ever a lower bound that a sleep guarantees.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from feedgpu.models.accelerator import fingerprint, AsyncAccelerator, step_breakdown

pytestmark = pytest.mark.unit


def floats(n: int, value: float = 1.0) -> torch.Tensor:
    return torch.full((n, 3), value)


# --------------------------------------------------------------------------- step_breakdown


def test_step_breakdown_splits_each_gap_into_waiting_and_other():
    """Three steps in [0, 7]; the gap before step 1 holds 1.25 s of the host's data waits."""
    busy = [(1.0, 2.0), (4.0, 5.0), (5.0, 6.0)]
    data = [(2.0, 3.0), (3.5, 3.75)]
    b = step_breakdown(busy, data, 0.0, 7.0)
    # step 0: idle 0..1, no data wait; step 1: idle 2..4, of which 2..3 and 3.5..3.75 in next();
    # step 2 follows step 1 at once; then idle 6..7 (the tail)
    np.testing.assert_allclose(b.busy, [1.0, 1.0, 1.0], err_msg="each step's own time")
    np.testing.assert_allclose(b.waiting, [0.0, 1.25, 0.0], err_msg="idle while the host was in next()")
    np.testing.assert_allclose(b.other, [1.0, 0.75, 0.0], err_msg="idle for any other reason")
    assert b.tail_s == pytest.approx(1.0), f"idle after the last step: {b.tail_s}"
    assert b.total_s == pytest.approx(7.0), f"the window: {b.total_s}"
    assert b.busy_share == pytest.approx(3 / 7), b.summary()
    assert b.waiting_share == pytest.approx(1.25 / 7), b.summary()
    assert b.other_share == pytest.approx((1.0 + 0.75 + 1.0) / 7), "other, the tail included"
    assert b.busy_share + b.waiting_share + b.other_share == pytest.approx(1.0), b.summary()
    assert b.summary()["steps"] == 3, b.summary()
    assert list(b.table().columns) == ["busy ms", "waiting for data ms", "other ms"], b.table()
    np.testing.assert_allclose(b.table()["waiting for data ms"], [0.0, 1250.0, 0.0], err_msg="in ms")


def test_step_breakdown_clips_spans_to_the_window():
    """Spans that cross the window's edges count only inside it; a step outside is dropped."""
    busy = [(-1.0, 1.0), (2.0, 3.0), (4.0, 6.0), (6.0, 7.0)]
    data = [(-2.0, 1.5)]
    b = step_breakdown(busy, data, 0.0, 5.0)
    # step 0 counts from 0; the gap 1..2 waited 1..1.5; step 2 ends at 5; step 3 is outside
    np.testing.assert_allclose(b.busy, [1.0, 1.0, 1.0], err_msg="busy inside [0, 5] only")
    np.testing.assert_allclose(b.waiting, [0.0, 0.5, 0.0], err_msg="the data wait clipped to the gap")
    np.testing.assert_allclose(b.other, [0.0, 0.5, 1.0], err_msg="the rest of each gap")
    assert b.tail_s == 0.0, f"the last step runs to the end of the window: {b.tail_s}"
    assert b.busy_share == pytest.approx(3 / 5), b.summary()


def test_step_breakdown_counts_the_tail_as_other_and_no_steps_as_idle():
    """Idle time after the last step belongs to no step: it is other, even while the host waits."""
    b = step_breakdown([(0.0, 1.0)], [(1.0, 3.0)], 0.0, 4.0)
    assert b.tail_s == pytest.approx(3.0), b
    assert (b.busy_share, b.waiting_share) == (pytest.approx(0.25), 0.0), b.summary()
    assert b.other_share == pytest.approx(0.75), b.summary()
    empty = step_breakdown([], [(0.0, 1.0)], 0.0, 2.0)
    assert len(empty.busy) == 0 and empty.tail_s == pytest.approx(2.0), empty
    assert empty.busy_share == 0.0, empty.summary()
    nothing = step_breakdown([], [], 3.0, 3.0)
    assert (nothing.busy_share, nothing.waiting_share, nothing.other_share) == (0.0, 0.0, 0.0), "an empty window"


@pytest.mark.parametrize("busy, data, start, end", [
    ([(0.0, 1.0)], [], 2.0, 1.0),           # end before start
    ([(1.0, 0.5)], [], 0.0, 2.0),           # a step that ends before it starts
    ([(0.0, 1.0)], [(1.5, 1.2)], 0.0, 2.0),  # a data wait that ends before it starts
])
def test_step_breakdown_rejects_backward_times(busy, data, start, end):
    """A window or a span that runs backwards is a ValueError."""
    with pytest.raises(ValueError):
        step_breakdown(busy, data, start, end)


# --------------------------------------------------------------------------- the accelerator


def test_step_returns_at_once_and_item_waits_for_its_step():
    """The host queues four steps before the first is done; item() on the last waits for all."""
    step_s = 0.5  # the host has half a second to queue four steps, even on a busy machine
    with AsyncAccelerator(step_s, queue_depth=4) as device:
        start = time.perf_counter()
        values = [device.step(floats(2), [0, 1], [2 * k, 2 * k + 1]) for k in range(4)]
        assert not any(v.done for v in values), "the host ran ahead of the device"
        assert device.syncs == 0, "queuing a step is no synchronisation"
        loss = values[-1].item()
        waited = time.perf_counter() - start
        assert all(v.done for v in values), "the steps before the last ran first"
        assert loss == 0.0, f"no model: a step only takes time, its loss is 0.0, got {loss}"
        assert waited >= 3.9 * step_s, f"item() of the 4th step returned after {waited:.3f} s"
        assert device.syncs == 1, f"item() is one synchronisation, counted {device.syncs}"
        assert float(values[0]) == 0.0 and device.syncs == 2, "float() is item()"
    starts = [s for s, _ in device.busy_spans]
    assert starts == sorted(starts), f"steps run in the order queued: {device.busy_spans}"
    assert all(e - s >= step_s for s, e in device.busy_spans), f"each step is busy step_s: {device.busy_spans}"
    assert all(e1 <= s2 for (_, e1), (s2, _) in zip(device.busy_spans, device.busy_spans[1:])), (
        "one step at a time")
    assert device.steps == 4 and device.received().ids.tolist() == list(range(8)), device.received()


def test_item_of_an_earlier_step_waits_for_every_step_queued_before_the_call():
    """As CUDA's loss.item() synchronises the stream: item() on the first of three queued steps
    returns only once the two queued after it have run too."""
    step_s = 0.05
    with AsyncAccelerator(step_s, queue_depth=4) as device:
        start = time.perf_counter()
        values = [device.step(floats(1), [0]) for _ in range(3)]
        assert not values[2].done, "the host queued three steps before the third ran"
        loss = values[0].item()
        returned = time.perf_counter()
        assert loss == 0.0, loss
        assert values[1].done and values[2].done, "item() returned with steps queued before it still to run"
        assert len(device.busy_spans) == 3, f"three steps have run: {device.busy_spans}"
        assert all(end <= returned for _, end in device.busy_spans), (
            f"a step was still busy when item() returned at {returned}: {device.busy_spans}")
        waited = returned - start
        assert waited >= 0.9 * 3 * step_s, f"item() returned {waited:.3f} s after the first of 3 steps of {step_s} s"
        assert device.syncs == 1, f"item() is one synchronisation, counted {device.syncs}"
        values[2].item()
        assert device.syncs == 2, f"an item() with nothing left to wait for still counts: {device.syncs}"


@pytest.mark.parametrize("show, expected", [
    (repr, "DeviceValue(0.0)"), (str, "DeviceValue(0.0)"), (print, "DeviceValue(0.0)"),
    ("{}".format, "0.0"), ("{:.3f}".format, "0.000"),  # as a 0-dim tensor's f-string: its .item()'s
], ids=["repr", "str", "print", "f-string", "f-string-spec"])
def test_showing_a_value_waits_like_item(show, expected, capsys):
    """repr, str, print and f-strings of a pending loss wait for the queue and count one
    synchronisation (printing a CUDA tensor copies it to the host); .done does not wait."""
    with AsyncAccelerator(0.04, queue_depth=4) as device:
        values = [device.step(floats(1), [0]) for _ in range(2)]
        assert not values[0].done and device.syncs == 0, ".done neither waits nor counts"
        shown = show(values[0])
        assert values[1].done, f"{show} returned with a step queued before it still to run"
        assert device.syncs == 1, f"{show} is one synchronisation, counted {device.syncs}"
    text = capsys.readouterr().out if show is print else shown
    assert text.strip() == expected, f"the loss is shown, not a placeholder: {text!r}"


def test_a_failed_step_raises_when_shown_and_item_reads_only_its_own_step():
    """Showing a failed step raises its error, as item() does (then synchronize() does not
    raise it again); item() of a good step waits for a failing one after it, without its error."""

    class FailsOnNaN(torch.nn.Linear):
        def forward(self, x):
            if torch.isnan(x).any():
                raise FloatingPointError("a NaN in the batch")
            return super().forward(x)

    with AsyncAccelerator(0.02, FailsOnNaN(3, 2), queue_depth=4) as device:
        bad = device.step(floats(2, float("nan")), [0, 1])
        with pytest.raises(FloatingPointError, match="NaN"):
            print(bad)
        device.synchronize()  # reported by print(bad) already
        good = device.step(floats(2), [0, 1])
        later_bad = device.step(floats(2, float("nan")), [0, 1])
        assert np.isfinite(good.item()), "the good step's loss"
        assert later_bad.done, "item() waited for the step queued after it"
        with pytest.raises(RuntimeError, match="1 step.*FloatingPointError"):
            device.synchronize()  # the later failure nobody read


def test_synchronize_waits_for_every_queued_step():
    """After synchronize() every step has run, and it counts as one synchronisation."""
    with AsyncAccelerator(0.05, queue_depth=8) as device:
        values = [device.step(floats(1), [0]) for _ in range(5)]
        device.synchronize()
        assert all(v.done for v in values), "synchronize() returned with a step still to run"
        assert len(device.busy_spans) == 5, device.busy_spans
        assert device.syncs == 1, device.syncs


def test_queue_depth_bounds_how_far_the_host_runs_ahead():
    """With depth 1, the 4th step can only be queued once the first two have finished."""
    step_s = 0.1
    with AsyncAccelerator(step_s, queue_depth=1) as device:
        start = time.perf_counter()
        values = [device.step(floats(1), [0]) for _ in range(4)]
        queued_s = time.perf_counter() - start
        # one step runs, one waits in the queue: the 3rd waits for the 1st to finish, the 4th for the 2nd
        assert values[0].done and values[1].done, f"the host ran more than 2 steps ahead: {values}"
        assert queued_s >= 1.9 * step_s, f"queuing 4 steps took {queued_s:.3f} s, under 2 steps of {step_s} s"
    with pytest.raises(ValueError):
        AsyncAccelerator(0.01, queue_depth=0)


def test_a_failing_step_hands_its_error_to_item():
    """The model's exception comes back at item(); the device goes on with the next step."""

    class FailsOnNaN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(3, 2)

        def forward(self, x):
            if torch.isnan(x).any():
                raise FloatingPointError("a NaN in the batch")
            return self.linear(x)

    with AsyncAccelerator(0.0, FailsOnNaN()) as device:
        bad = device.step(floats(2, float("nan")), [0, 1])
        good = device.step(floats(2), [0, 1])
        with pytest.raises(FloatingPointError, match="NaN"):
            bad.item()
        assert np.isfinite(good.item()), "the step after a failed one still runs"


def test_step_rejects_what_a_device_step_cannot_take():
    """uint8 inputs (TypeError), labels or ids of another length (ValueError), a closed device."""
    device = AsyncAccelerator(0.0)
    with pytest.raises(TypeError, match="floating-point"):
        device.step(torch.zeros(2, 3, dtype=torch.uint8), [0, 1])
    with pytest.raises(TypeError):
        device.step(np.zeros((2, 3)), [0, 1])
    with pytest.raises(ValueError, match="labels"):
        device.step(floats(2), [0, 1, 1])
    with pytest.raises(ValueError, match="ids"):
        device.step(floats(2), [0, 1], [5])
    assert device.steps == 0, "a rejected step is not queued"
    device.close()
    with pytest.raises(RuntimeError, match="closed"):
        device.step(floats(2), [0, 1])
    device.close()  # closing twice is harmless


class SlowBatches:
    """Three batches; iter() takes ``start_s`` (workers starting), each next() ``next_s``."""

    def __init__(self, start_s: float, next_s: float):
        self.start_s, self.next_s = start_s, next_s

    def __iter__(self):
        time.sleep(self.start_s)
        return self._batches()

    def _batches(self):
        for k in range(3):
            time.sleep(self.next_s)
            yield k


def test_feed_records_each_wait_for_a_batch():
    """One span for iter(), one per batch, one for the final StopIteration, in order."""
    with AsyncAccelerator(0.0) as device:
        got = list(device.feed(SlowBatches(0.05, 0.1)))
    assert got == [0, 1, 2], f"feed() yields the loader's batches: {got}"
    spans = device.data_spans
    assert len(spans) == 5, f"iter + 3 batches + StopIteration: {spans}"
    lengths = [e - s for s, e in spans]
    assert lengths[0] >= 0.05, f"iter() waited for the workers to start: {lengths}"
    assert all(x >= 0.1 for x in lengths[1:4]), f"each next() waited for its batch: {lengths}"
    assert lengths[4] < 0.1, f"the final next() only found the end, it waited for no batch: {lengths}"
    assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:])), f"in order: {spans}"


def test_received_keeps_ids_labels_shapes_and_sums():
    """What the steps got: batch sizes, shapes, ids (-1 when not given), labels, per-sample sums."""
    with AsyncAccelerator(0.0) as device:
        device.step(torch.arange(6.0).reshape(2, 3), torch.tensor([1, 0]), [7, 8])
        device.step(torch.full((1, 3), 0.5, dtype=torch.float64), [1])
        device.step(torch.ones(1, 2, 2, 2), [2], np.array([9]))
    got = device.received()
    assert got.batch_sizes == [2, 1, 1], got
    assert got.shapes == [(3,), (3,), (2, 2, 2)], got
    assert got.ids.tolist() == [7, 8, -1, 9], got
    assert got.labels.tolist() == [1, 0, 1, 2], got
    # each value weighted by its column (1 to W): 0*1+1*2+2*3, 3*1+4*2+5*3, 0.5*(1+2+3), 4 ones x 1 + 4 ones x 2
    np.testing.assert_allclose(got.fingerprints, [8.0, 26.0, 3.0, 12.0], err_msg="each sample's weighted sum")


def test_fingerprint_sees_a_mirrored_sample():
    """A sample and its left-right mirror have the same sum but not the same fingerprint."""
    x = torch.arange(24.0).reshape(1, 2, 3, 4)
    assert fingerprint(x)[0] != fingerprint(x.flip(-1))[0]
    assert float(x.sum()) == float(x.flip(-1).sum())


def test_steps_really_train_the_model():
    """On two separable blobs, 30 steps of SGD bring the loss well down."""
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 2)
    centres = torch.tensor([[-2.0, -2.0], [2.0, 2.0]])
    losses = []
    with AsyncAccelerator(0.0, model, lr=0.5) as device:
        for _ in range(30):
            labels = torch.randint(0, 2, (16,))
            x = centres[labels] + 0.5 * torch.randn(16, 2)
            losses.append(device.step(x, labels))
        losses = [v.item() for v in losses]
    assert np.mean(losses[-5:]) < 0.3 * losses[0], f"the loss did not go down: {losses}"
    assert device.syncs == 30, f"one item() per step: {device}"


# --------------------------------------------------------------------------- busy share of a loop


STEP_S = 0.030
NEXT_S = 0.020
STEPS = 20


def loop_breakdown(sync_every_step: bool):
    """A loop over batches that each take NEXT_S to load, on steps of STEP_S."""

    def batches():
        for _ in range(STEPS):
            time.sleep(NEXT_S)
            yield floats(4)

    with AsyncAccelerator(STEP_S) as device:
        start = time.perf_counter()
        for x in device.feed(batches()):
            loss = device.step(x, [0, 1, 0, 1])
            if sync_every_step:
                loss.item()
        device.synchronize()
        return device.breakdown(start, time.perf_counter())


def test_a_loop_that_syncs_every_step_leaves_the_device_idle_while_it_loads():
    """Synced: the device waits for every load, busy about STEP_S / (STEP_S + NEXT_S) = 0.6;
    not synced (loading faster than a step): the next batch loads while the step runs, busy near 1."""
    synced = loop_breakdown(True)
    overlapped = loop_breakdown(False)
    assert len(synced.busy) == len(overlapped.busy) == STEPS, (synced.summary(), overlapped.summary())
    assert 0.45 < synced.busy_share < 0.72, f"synced every step: {synced.summary()}"
    assert synced.waiting_share > 0.25, f"synced: the device waits while the host loads: {synced.summary()}"
    assert overlapped.busy_share > 0.8, f"not synced: loading hides behind the steps: {overlapped.summary()}"
    assert overlapped.busy_share > synced.busy_share + 0.15, (synced.summary(), overlapped.summary())


def test_a_failed_step_nobody_read_is_raised_at_the_next_synchronize():
    """As a GPU reports a failed kernel at the next synchronisation: once, and not again
    for a failure that .item() already reported."""

    class Broken(torch.nn.Linear):
        def forward(self, x):
            raise ValueError("bad input")

    device = AsyncAccelerator(0.0, Broken(3, 2))
    device.step(torch.zeros(2, 3), [0, 1])
    with pytest.raises(RuntimeError, match="1 step.*ValueError: bad input"):
        device.synchronize()
    device.synchronize()  # reported once
    read = device.step(torch.zeros(2, 3), [0, 1])
    with pytest.raises(ValueError):
        read.item()
    device.synchronize()  # already reported by .item()
    device.step(torch.zeros(2, 3), [0, 1])
    with pytest.raises(RuntimeError, match="failed on the accelerator"):
        with device:
            pass
