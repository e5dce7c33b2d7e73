"""The recommended faces pipeline, the busy-share model, and its estimate for the recorded GPUs (issue 42)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from feedgpu.base.processes import usable_cores
from feedgpu.measure.feeding import measure_slowdown
from feedgpu.models import feeding
from feedgpu.models.feeding import FeedCosts, predict, slowdown_at, slowdown_from_loops, workers_needed
from feedgpu.readings import READINGS_ROOT, available_readings, load_readings

ROOT = Path(__file__).resolve().parents[1]
RECORDED_WITH_LOOPS = ["h200-2026-11-26", "h100-2026-11-27"]


def costs(**changes) -> FeedCosts:
    base = FeedCosts(step_s=0.010, item_s=0.002, batch_size=10, batch_bytes=1000, collate_s=0.001, pin_s=0.0005,
                     main_s=0.0002, cores=8)
    return replace(base, **changes)


# --------------------------------------------------------------------------- the model


def test_each_stage_can_set_the_pace():
    """Workers, GPU, pin thread, main thread and cores each become the slowest stage when they should."""
    # 10 items of 2 ms + 1 ms collate = 21 ms of work a batch: 1 worker 21 ms, 3 workers 7 ms
    one = predict(costs(), 1)
    assert one.bound_by == "the workers" and one.s_per_batch == pytest.approx(0.021)
    assert one.busy_share == pytest.approx(0.010 / 0.021)
    assert predict(costs(), 3).bound_by == "the GPU" and predict(costs(), 3).busy_share == 1.0
    assert predict(costs(pin_s=0.015), 3).bound_by == "the pin thread"
    assert predict(costs(main_s=0.012), 3).s_per_batch == pytest.approx(0.012)
    # 2 cores: (20 + 1 + 0.5 + 0.2) ms of CPU a batch on 2 cores = 10.85 ms, past the 10 ms step
    assert predict(costs(cores=2), 8).bound_by == "the cores"
    assert predict(costs(cores=2), 8).s_per_batch == pytest.approx(0.02170 / 2)
    # 0 workers: the main thread builds the batch while the GPU runs the last step
    assert predict(costs(), 0).s_per_batch == pytest.approx(0.020 + 0.001 + 0.0005 + 0.0002)
    assert predict(costs(main_item_s=0.0005), 0).s_per_batch == pytest.approx(0.010)


def test_slowdown_slows_the_workers_and_is_interpolated():
    slow = {2: 1.2, 4: 2.0}
    assert slowdown_at(slow, 1) == 1.0 and slowdown_at({}, 12) == 1.0
    assert slowdown_at(slow, 3) == pytest.approx(1.6) and slowdown_at(slow, 4) == 2.0
    assert slowdown_at(slow, 6) == pytest.approx(2.8), "past the last count: along the last two"
    assert slowdown_at({2: 1.5, 4: 1.2}, 8) == pytest.approx(1.2), "never below the last measured"
    assert predict(costs(slowdown=slow), 4).stages_s["the workers"] == pytest.approx((0.020 * 2.0 + 0.001) / 4)


def test_slowdown_read_from_a_sweep_gives_back_the_machines():
    """A sweep the model makes with a known slowdown gives that slowdown back, but for the rows the GPU paced."""
    truth = {2: 1.1, 4: 1.3, 8: 1.9}
    machine = costs(slowdown=truth, step_s=0.006)
    sweep = {w: predict(machine, w).s_per_batch for w in (1, 2, 4, 8)}
    read = slowdown_from_loops(sweep, costs(step_s=0.006))
    assert set(read) == {1, 2, 4}, f"8 workers ran at the GPU's pace, which tells nothing of them: {read}"
    assert read[1] == pytest.approx(1.0) and read[2] == pytest.approx(1.1) and read[4] == pytest.approx(1.3)


def test_workers_needed_leaves_headroom_and_two_cores():
    # 21 ms of work a batch, 10 ms step: 21 / w x 1.25 <= 10 at w = 3
    assert workers_needed(costs()) == 3
    assert workers_needed(costs(cores=4)) == 2, "at most cores - 2, even where the step needs more"
    assert workers_needed(costs(cores=1)) == 1


def test_costs_refuse_nonsense():
    with pytest.raises(ValueError):
        costs(step_s=-1.0)
    with pytest.raises(ValueError):
        costs(slowdown={2: 0.0})
    with pytest.raises(ValueError):
        costs(cores=0)


# --------------------------------------------------------------------------- the recorded GPUs


def _raw(name: str) -> dict:
    return json.loads((READINGS_ROOT / name / "copies_and_loop.json").read_text())


def _median_at(raw: dict, kind: str, nbytes: int) -> float:
    """The recorded median of ``kind`` at ``nbytes``, straight-line between the recorded sizes (written out here)."""
    rows = sorted((row["bytes"], row[kind]["median_s"]) for row in raw["copies"] if kind in row)
    for (b0, s0), (b1, s1) in zip(rows, rows[1:]):
        if b0 <= nbytes <= b1:
            return s0 + (s1 - s0) * (nbytes - b0) / (b1 - b0)
    raise AssertionError(f"{nbytes} outside {kind}'s sizes")


@pytest.mark.parametrize("name", RECORDED_WITH_LOOPS)
def test_the_estimate_is_derived_from_the_folder_and_the_ratio(name):
    """The recommended pipeline's step, item, collate and pinning, from the folder's own files and the ratio."""
    raw, ratio = _raw(name), 0.45
    estimate = feeding.estimate_recommended(load_readings(name), ratio)
    rec, float_bytes, uint8_bytes = estimate.recommended, 64 * 3 * 160 * 160 * 4, 64 * 3 * 160 * 160
    saved = _median_at(raw, "h2d_pinned", float_bytes) - _median_at(raw, "h2d_pinned", uint8_bytes)
    assert 0 < saved < 1e-3, f"{name}: a pinned copy of 15 MB less takes well under a millisecond: {saved}"
    assert rec.step_s == pytest.approx(raw["stall_free_step_s"] - saved, rel=1e-9)
    assert rec.item_s == pytest.approx(raw["item_cost_s"]["one_thread"] * ratio, rel=1e-9)
    assert rec.batch_bytes == uint8_bytes
    assert rec.collate_s == pytest.approx(_median_at(raw, "host_copy_1thread", uint8_bytes), rel=1e-9)
    pin_kind = "pin_memory_1thread" if any("pin_memory_1thread" in r for r in raw["copies"]) else "host_copy_1thread"
    assert rec.pin_s == pytest.approx(_median_at(raw, pin_kind, uint8_bytes), rel=1e-9)
    assert rec.cores == raw["cpus"] == 16
    assert any("estimate" in note for note in rec.notes), "it says it is an estimate"
    # the busy share at the count it recommends, computed here from the five stages
    w = estimate.workers
    assert 1 <= w <= 14
    work = 64 * rec.item_s * feeding.slowdown_at(rec.slowdown, w)
    pace = max(rec.step_s, (work + rec.collate_s) / w, rec.pin_s, rec.main_s,
               (work + rec.collate_s + rec.pin_s + rec.main_s) / 16)
    assert estimate.busy_share == pytest.approx(rec.step_s / pace, rel=1e-9)
    # and the plain loop, as recorded: its best count's busy share, the stall-free step over its pace
    loops: dict[int, list[float]] = {}
    for row in raw["loops"]:
        loops.setdefault(row["num_workers"], []).append(row["s_per_batch"])
    best = min(loops, key=lambda k: sum(loops[k]) / len(loops[k]))
    assert estimate.plain_best == (best, pytest.approx(raw["stall_free_step_s"] * len(loops[best]) / sum(loops[best])))


@pytest.mark.parametrize("name", RECORDED_WITH_LOOPS)
def test_the_model_predicts_worker_counts_its_sweep_left_out(name):
    """Each inner count of the recorded plain sweep, its own row left out: within 0.85-1.15 of what it measured."""
    plain = feeding.plain_costs(load_readings(name))
    loo = feeding.leave_one_out(plain, load_readings(name).steady_loop_s())
    assert len(loo) >= 4, loo
    assert all(0.85 <= r <= 1.15 for r in loo.values()), f"{name}: measured / predicted by count {loo}"


def test_a_sweep_the_gpu_paced_throughout_says_the_slowdown_is_not_measured():
    """A folder whose every loop ran at its step's pace tells nothing of the workers: no slowdown, and a note."""
    from dataclasses import replace as with_

    readings = load_readings("h200-2026-11-26")
    paced = feeding.plain_costs(with_(readings, stall_free_step_s=1.0))
    assert paced.slowdown == {}, paced.slowdown
    assert any("not measured" in note for note in paced.notes), paced.notes
    assert not any("not measured" in note for note in feeding.plain_costs(readings).notes)


def test_a_recorded_recommended_loop_is_within_the_prediction():
    """Every folder that recorded the recommended loop: the busy share at the predicted count within 0.9-1.1
    of the prediction made before the loop ran (none is recorded yet: the next GPU records one)."""
    checked = 0
    for name in available_readings():
        recorded = load_readings(name).recommended
        if not recorded or "failed" in recorded:
            continue
        predicted = recorded["predicted_busy_share"]
        measured = recorded["busy_share"][str(predicted["workers"])]
        assert 0.9 <= measured / predicted["best"] <= 1.1, (name, measured, predicted)
        checked += 1
    if not checked:
        pytest.skip("no readings folder holds recommended_loop.json yet")


# --------------------------------------------------------------------------- the pipeline on a CPU


@pytest.fixture
def few_faces(tmp_path):
    """Three people of the course's faces, two images each, in an ImageFolder's layout."""
    from feedgpu.workloads.faces_on_gpu import faces_root

    people = sorted(p for p in faces_root().iterdir() if p.is_dir() and len(list(p.glob("*.jpg"))) >= 2)[:3]
    for person in people:
        (tmp_path / person.name).mkdir()
        for image in sorted(person.glob("*.jpg"))[:2]:
            (tmp_path / person.name / image.name).write_bytes(image.read_bytes())
    return tmp_path


def test_recommended_batches_are_uint8_and_the_gpu_input_equals_the_plain_normalisation(few_faces):
    from torchvision.transforms import functional as F

    from feedgpu.workloads import faces_on_gpu as faces

    loader = faces.recommended_loader(few_faces, num_workers=0, batch_size=3)
    images, labels = next(iter(loader))
    assert images.dtype == torch.uint8 and tuple(images.shape) == (3, 3, 160, 160), (images.dtype, images.shape)
    assert images.numel() * images.element_size() * 4 == 3 * 3 * 160 * 160 * 4, "a quarter of the float batch"
    before = images.clone()
    x = faces.model_input(images, "cpu")
    assert torch.equal(images, before), "the batch is left unchanged"
    plain = torch.stack([F.normalize(F.to_tensor(F.to_pil_image(im)), faces.MEAN, faces.STD) for im in images])
    assert x.dtype == torch.float32 and torch.allclose(x, plain, atol=1e-5), (x - plain).abs().max()
    with pytest.raises(ValueError, match="uint8"):
        faces.model_input(x, "cpu")
    # its constants are made once per device, not per batch: on a GPU, a tensor built from
    # Python numbers is a blocking copy that waits for the last step
    made, tensor = [], torch.tensor
    faces._CONSTANTS.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(faces.torch, "tensor", lambda *a, **k: made.append(k.get("device")) or tensor(*a, **k))
        for _ in range(3):
            again = faces.model_input(images, "cpu")
    assert torch.equal(again, x) and len(made) == 2, f"tensors built over 3 batches: {made}"
    small = images[:2, :, :32, :32].contiguous()  # the step on a CPU: small crops keep it quick
    loss = faces.ResNetStep(device="cpu", input="uint8", num_classes=10)((small, labels[:2] % 10))
    assert loss.dim() == 0 and math.isfinite(loss.item())
    assert [faces.workers_for(cores) for cores in (2, 4, 8, 16)] == [1, 2, 6, 14], "a core each for main and pin"


class Sleepy(torch.utils.data.Dataset):
    """Items that wait (no CPU), or spin (all CPU), for ``seconds`` each."""

    def __init__(self, seconds: float, spin: bool) -> None:
        self.seconds, self.spin = seconds, spin

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> int:
        end = time.perf_counter() + self.seconds
        if self.spin:
            while time.perf_counter() < end:
                pass
        else:
            time.sleep(self.seconds)
        return index


def test_slowdown_is_none_for_items_that_wait_and_shows_more_processes_than_cores():
    cores = usable_cores()
    waiting = measure_slowdown(Sleepy(0.004, spin=False), [2 * cores], items=8)
    assert 0.7 <= waiting[2 * cores] <= 1.6, f"items that sleep do not slow each other: {waiting}"
    spinning = measure_slowdown(Sleepy(0.004, spin=True), [2 * cores], items=8)
    assert spinning[2 * cores] >= 1.5, f"{2 * cores} spinning processes on {cores} cores: {spinning}"


def test_feed_costs_are_probed_before_the_loop_and_predict_it():
    """measure_feed_costs on a loader of items that wait 3 ms and a step that waits 12 ms: the step, the item and
    the slowdown as they are (waits do not slow each other), and a model that says 1 worker cannot keep up
    (4 x 3 ms a batch: 12 ms, no headroom) while 2 can."""
    from feedgpu.measure.feeding import measure_feed_costs

    loader = torch.utils.data.DataLoader(Sleepy(0.003, spin=False), batch_size=4)
    steps = []

    def step(batch):
        steps.append(len(batch))
        time.sleep(0.012)

    costs = measure_feed_costs(loader, step, lambda: None, counts=[2], steps=5, items=8)
    assert steps and set(steps) == {4}, "the step ran on the loader's own batches"
    assert 0.012 <= costs.step_s < 0.05 and 0.003 <= costs.item_s < 0.02, (costs.step_s, costs.item_s)
    assert costs.batch_size == 4 and costs.batch_bytes == 4 * 8, "a batch of four int64 indices"
    assert set(costs.slowdown) == {2} and 0.6 <= costs.slowdown[2] <= 1.7, costs.slowdown
    assert 0.012 <= costs.main_s < 0.05, "the main thread's launch is the whole step here: the step waits on the host"
    assert workers_needed(replace(costs, cores=8)) == 2, "on 8 cores: 2 workers, and no more"


def test_the_recommended_recording_predicts_before_it_runs_a_loop(few_faces):
    """record_recommended on a CPU with a step that only counts: the probes, then the prediction, then the loops
    (the recommended one at the recorder's counts and the model's, the plain one at the same), in that order."""
    from feedgpu.workflows.bench import record
    from feedgpu.workflows.bench.recommended import record_recommended

    events = []

    def make_step(kind):
        def step(batch):
            events.append(("step", kind, batch[0].dtype))
        return step

    def measure_loop(loader, step, synchronize, **kwargs):
        events.append(("loop", kwargs["num_workers"]))
        return record.measure_loop(loader, step, synchronize, **kwargs)

    doc = record_recommended([0, 1], lambda: None, measure_loop, batches=2, steps=1, root=few_faces, batch_size=2,
                             make_step=make_step, say=lambda line: events.append(("say", line)))
    predicted = next(i for i, e in enumerate(events) if e[0] == "say" and e[1].startswith("predicted"))
    first_loop = next(i for i, e in enumerate(events) if e[0] == "loop")
    assert predicted < first_loop, "the prediction is made before any loop runs"
    counts = sorted({0, 1, doc["predicted_busy_share"]["workers"]})
    assert [row["num_workers"] for row in doc["loops"]] == counts
    assert [row["num_workers"] for row in doc["plain"]["loops"]] == counts, "the plain loop at the same counts"
    assert doc["batch_bytes"] == 2 * 3 * 160 * 160 and doc["plain"]["batch_bytes"] == 4 * doc["batch_bytes"]
    assert {("uint8", torch.uint8), ("float", torch.float32)} == {(e[1], e[2]) for e in events if e[0] == "step"}
    for w in map(str, counts):
        assert doc["busy_share"][w] == pytest.approx(
            doc["stall_free_step_s"] / next(r["s_per_batch"] for r in doc["loops"] if str(r["num_workers"]) == w))
        assert 0 < doc["predicted_busy_share"]["by_workers"][w] <= 1
    json.dumps(doc)  # what the recorder writes
