"""The diagnosis agrees with its own measurements (issue 37).

* its model is checked against every point it measured, each predicted without itself
  (leave one out), and corrected where it misses (:mod:`feedgpu.diagnosis.fitting`);
* a resource the workers share is named (``serialised``) and no worker count is advised
  for a gain the points do not support;
* the main process's floor is measured at a high batch rate, not added up from probes;
* one conclusion (:mod:`feedgpu.diagnosis.conclusion`) ends every mode.

The loaders are of known cost (:mod:`feedgpu.workloads.cost`): sleeps under one lock that
every process shares, a service limited to so many requests a second, pickled batches that
cost more to receive than to make. Timing expectations are ratios with the issue's bands.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace

import pytest
from torch.utils.data import DataLoader

from feedgpu.diagnosis import diagnose, fitting, replay, watch
from feedgpu.diagnosis.causes import find_causes
from feedgpu.diagnosis.evidence import Evidence
from feedgpu.diagnosis.conclusion import Conclusion, Model, conclude
from feedgpu.diagnosis.fitting import BAND, check_model
from feedgpu.diagnosis.modes.live import Budget, _Diagnosis
from feedgpu.diagnosis.whatif import Costs, choose_workers, max_workers, predicted_tries, shared_resource_s
from feedgpu.workloads.arrays import SleepArrayDataset, collate_list
from feedgpu.workflows.bench.planted import PLANTED, SHARED

pytestmark = pytest.mark.unit

WHAT_IF = (0.75, 1.25)  # the try-first's measured / predicted speed-up
FLOOR = (0.8, 1.25)  # the steady loop / the model, where the issue asks it of the floor


def loo_ratios(result) -> dict[int, float]:
    """Measured over predicted seconds per batch at each measured count (leave one out)."""
    return {p["num_workers"]: p["s_per_batch"] / p["predicted_s_per_batch"]
            for p in result.to_dict()["scaling"] if p["s_per_batch"]}


# --------------------------------------------------------------------------- the pieces, by hand


def test_a_shared_resource_queues_the_workers_by_mean_value_analysis():
    """Two workers, a batch of 1 s, a quarter of it on a shared resource: with one queued the
    resource's residence is 0.25 * (1 + 0.25) = 0.3125 s, the throughput 2 / 1.0625, so one
    batch every 0.53125 s; never faster than the resource, and the course's formula without it."""
    assert shared_resource_s(2, 1.0, 0.25) == pytest.approx(0.53125, rel=1e-12)
    assert shared_resource_s(1, 1.0, 0.25) == pytest.approx(1.0), "one worker never queues"
    assert shared_resource_s(50, 1.0, 0.25) == pytest.approx(0.25, rel=0.01), "the resource always busy"
    assert shared_resource_s(4, 1.0, 0.0) == pytest.approx(0.25), "nothing shared: cycle / workers"
    assert shared_resource_s(3, 1.0, 1.0) == pytest.approx(1.0), "everything shared: no worker helps"


def test_holds_of_equal_length_queue_only_once_the_workers_ask_more_than_the_resource_serves():
    """A batch of 1 s, a quarter of it under a lock held the same time every batch: the
    workers fall into step, one batch every 1/w s until 4 of them keep the lock always busy,
    then every 0.25 s (exact for holds and thinking of fixed length); holds as irregular as
    random ones queue before (0.53125 s at 2 workers); in between lies between."""
    for w in range(1, 9):
        assert shared_resource_s(w, 1.0, 0.25, serial_cv2=0.0) == pytest.approx(max(1.0 / w, 0.25), rel=1e-12)
        assert (shared_resource_s(w, 1.0, 0.25, serial_cv2=0.0) <= shared_resource_s(w, 1.0, 0.25, serial_cv2=0.5)
                <= shared_resource_s(w, 1.0, 0.25, serial_cv2=1.0))
    assert shared_resource_s(2, 1.0, 0.25, serial_cv2=1.0) == pytest.approx(0.53125, rel=1e-12)


PROBES = Costs(load_s=0.120, step_s=0.020, send_s=0.001, receive_s=0.001, cpu_share=0.05, cores=2)

#: The failing CI run's loader (a lock over a quarter of 4.5 ms items, batches of 8, 5 ms
#: steps), as its probes saw it: a worker's batch 36 ms, nothing of the lock.
LOCKED = Costs(load_s=0.0345, step_s=0.0051, send_s=0.0014, receive_s=0.0011, cpu_share=0.03, cores=2,
               main_floor_s=0.0057)


@pytest.mark.parametrize("cores", [2, 4, 8, 16])
def test_a_lock_held_the_same_time_every_batch_is_fitted_as_such_and_predicts_the_counts_beyond(monkeypatch, cores):
    """Points of a lock held 9 ms a batch, every hold the same (the workers never queue until
    together they ask more than it serves: max(36 ms / w, 9 ms)): fitted as random holds, the
    resource comes out too fast from the points either side of the knee and 8 workers are
    predicted 19% too fast; fitted with how regular its holds are, every count is predicted
    from the others within 10%, and the count advised asks for the lock a quarter more often
    than it serves, past the knee at 4."""
    probes = replace(LOCKED, cores=cores)
    cycle = probes.load_s + probes.send_s
    truth = {w: max(cycle / w, 0.009) if w else probes.s_per_batch(0) for w in (0, 1, 2, 5, 8)}
    check = check_model(probes, truth)
    assert check.correction and check.correction["fitted"] == ["serial_s", "serial_cv2"], check.notes
    assert check.correction["serial_cv2"] == 0.0 and check.correction["serial_s"] == pytest.approx(0.009, rel=0.1)
    assert all(0.9 <= r <= 1.1 for r in check.ratios().values()), check.ratios()
    assert "the same time every batch" in " ".join(check.notes)
    chosen, why = choose_workers(check.costs, 1, max_workers(cores))
    assert chosen == 5 and "more often than it serves" in why, (chosen, why)
    monkeypatch.setattr(fitting, "FAMILIES", tuple(f for f in fitting.FAMILIES if "serial_cv2" not in f))
    random_only = check_model(probes, truth)
    assert random_only.ratios()[8] > 1.15, "holds taken as random: the counts beyond come out too fast"


def test_a_resource_the_probes_cannot_see_is_fitted_from_the_points():
    """Points made by a loop whose workers hold a lock 100 ms a batch (the probes know
    nothing of it): the check corrects the model by that resource, and predicts each point
    from the others within the band."""
    truth = replace(PROBES, serial_s=0.100)
    measured = {w: truth.s_per_batch(w) * (1 + 0.04 * (-1) ** w) for w in (0, 1, 2, 3, 5)}
    check = check_model(PROBES, measured)
    assert check.correction and check.correction["fitted"] == ["serial_s"], check.notes
    assert check.correction["serial_s"] == pytest.approx(0.100, rel=0.2)
    assert check.trusted and all(BAND[0] <= r <= BAND[1] for r in check.ratios().values()), check.ratios()
    assert not all(BAND[0] <= r <= BAND[1] for r in check.ratios(check.probes).values()), "the probes missed"
    assert any("a resource the workers share" in n for n in check.notes)
    assert all(fitting.is_check_note(n) for n in check.notes), "a replay knows the check's notes for its own"


def test_a_model_that_holds_is_left_alone_and_close_points_correct_nothing():
    measured = {w: PROBES.s_per_batch(w) * 1.1 for w in (0, 1, 2)}
    assert check_model(PROBES, measured).correction is None, "within the band: the probes' model stands"
    far = {14: PROBES.s_per_batch(14) * 0.6, 15: PROBES.s_per_batch(15) * 0.6, 16: PROBES.s_per_batch(16) * 0.6}
    close = check_model(PROBES, far)
    assert close.correction is None and any("too close together" in n for n in close.notes), close.notes
    assert all(fitting.is_check_note(n) for n in close.notes), close.notes


def test_one_point_that_shows_a_slower_main_process_corrects_it_in_sample_and_says_so():
    """The H200's case: the model charged the main process a full share of every busy core
    (sharing 1, assumed at 0 workers), the loop at 9 workers ran faster. Only that point
    shows it: the correction is fitted to it and said not to be checked out of sample."""
    costs = Costs(load_s=0.150, step_s=0.010, send_s=0.0005, receive_s=0.0002, cpu_share=1.0, cores=16,
                  step_cpu_share=1.0, pin_s=0.0015, sharing=1.0)
    truth = replace(costs, sharing=0.0)
    measured = {w: truth.s_per_batch(w) for w in (0, 1, 2, 12)}
    assert measured[12] / costs.s_per_batch(12) < BAND[0], "the probes' model misses 12 workers"
    check = check_model(costs, measured)
    assert check.correction is not None and check.correction["fitted"] == ["sharing"], check.notes
    assert check.correction["checked"] is False and any("not checked out of sample" in n for n in check.notes)
    assert all(fitting.is_check_note(n) for n in check.notes), check.notes
    assert check.costs.s_per_batch(15) == pytest.approx(truth.s_per_batch(15), rel=0.1), "corrected where unmeasured"
    measured_sharing = check_model(costs, measured, fit_sharing=False).correction or {"fitted": []}
    assert "sharing" not in measured_sharing["fitted"], "sharing measured: never refitted"


def test_no_worker_count_is_advised_for_a_gain_the_points_do_not_support():
    flat = {1: 0.120, 2: 0.118, 3: 0.121}
    model_says = predicted_tries(PROBES, 1, 2, {"too-few-workers"})
    assert model_says and model_says[0]["predicted_speedup"] > 3, "the probes alone promise a gain"
    assert predicted_tries(PROBES, 1, 2, {"too-few-workers"}, measured=flat) == [], "every count beyond gained nothing"
    untrusted = predicted_tries(PROBES, 1, 2, {"too-few-workers"}, measured={1: 0.12, 2: 0.06, 3: 0.061},
                                trusted=False)
    assert untrusted[0]["value"] == 2 and untrusted[0]["predicted_speedup"] == pytest.approx(2.0), (
        "a model that does not explain its points: the fewest measured within 2% of the fastest, its measured gain")


def _evidence(points, **changes):
    base = dict(num_workers=2, persistent_workers=True, cores=2, data_wait_share=0.8, s_per_batch=0.12,
                wait_s=0.1, step_s=0.02, startup_s=0.2, one_batch_s=0.12, batches_per_epoch=500,
                main_next_cpu_s=0.0005, main_cpu_per_s=0.05, workers_cpu_per_s=0.04, idle_share=0.95,
                item_read_bytes=0.0, points=points)
    return Evidence(**{**base, **changes})


def _point(w, s, wait=0.8, cpu=0.04, idle=0.95, receive=0.0005):
    return {"num_workers": w, "s_per_batch": s, "wait_share": wait, "workers_cpu_per_s": cpu, "idle_share": idle,
            "main_next_s": receive}


def test_a_correction_one_point_shows_advises_a_count_beyond_it_to_check_it():
    """Only the run at 5 workers shows the lock (the run at 8 was lost to the budget): the
    correction is fitted to that point alone and cannot be checked on another. The count
    advised is then the corrected model's, one not measured, so that the what-if checks it
    out of sample; not a measured count, which would check nothing."""
    cycle = LOCKED.load_s + LOCKED.send_s
    measured = {0: LOCKED.s_per_batch(0), 1: cycle, 2: cycle / 2, 5: 0.0125}
    rows = [_point(w, s, wait=0.8) for w, s in measured.items() if w]
    ev = _evidence(rows, num_workers=1, s_per_batch=cycle, step_s=LOCKED.step_s, wait_s=cycle - LOCKED.step_s)
    c = conclude(ev, Model(LOCKED, measured=measured))
    assert c.check.correction and c.check.correction["checked"] is False, c.notes
    tried = [t for t in c.tries if t["setting"] == "num_workers"]
    assert tried and tried[0]["value"] not in measured, tried
    assert "checks it out of sample" in tried[0]["why"] and "checks it" in c.notes[-1], c.notes
    assert c.costs.s_per_batch(tried[0]["value"]) >= 0.0125 * 0.95, "never faster than the lock the point showed"


def test_a_scaling_run_that_overruns_its_share_costs_the_half_way_count_not_the_farthest():
    """The scaling runs of 2, 0, 5 and 8 workers (nearest, half-way, farthest), the first
    run beyond the nearest overrunning its share to the end of the phase (a loaded machine):
    the farthest is measured, since it shows a resource the workers share, and the half-way
    is the one left out."""

    class Scaling(_Diagnosis):
        def scaling_counts(self):
            return [2, 0, 5, 8]

        def run_need_s(self, num_workers, timed):
            return 0.05

        def estimate_s(self, num_workers):
            return 0.005

        def run(self, label, estimate_s, soft_deadline, **changes):
            w, measured = changes["num_workers"], soft_deadline - time.perf_counter() > 0.02
            ran.append((w, measured))
            if measured and w not in (0, 2):  # overruns: to the end of the phase
                time.sleep(max(self.budget.deadline("scaling") - time.perf_counter(), 0.0))

    ran: list[tuple[int, bool]] = []
    Scaling(DataLoader(list(range(8))), None, 0.005, Budget(1.0, progress=False), try_fix=False).scale()
    assert [w for w, measured in ran if measured] == [2, 0, 8], ran
    assert (5, False) in ran, ran


@pytest.mark.parametrize("cores", [2, 4, 8, 16])
def test_serialised_is_named_from_points_that_gain_nothing_on_idle_cores(cores):
    flat = [_point(1, 0.122), _point(2, 0.120), _point(3, 0.121)]
    found = find_causes(_evidence(flat, cores=cores))
    assert [f.cause for f in found] == ["serialised"], found
    assert "8.2, 8.33, 8.26 batches/s" in found[0].sentence and "a resource of its own" in found[0].advice
    assert [f.cause for f in find_causes(_evidence(flat, cores=cores, item_read_bytes=262144.0))] == ["storage-bound"]
    scaling = [_point(1, 0.122), _point(2, 0.062), _point(3, 0.042)]
    assert [f.cause for f in find_causes(_evidence(scaling, cores=cores))] == ["too-few-workers"], "workers helped"
    full = [_point(1, 0.122), _point(2, 0.120, idle=0.02), _point(3, 0.121, idle=0.02)]
    assert "serialised" not in [f.cause for f in find_causes(_evidence(full, cores=cores))], "cores full"
    busier = [_point(1, 0.122, cpu=0.5), _point(2, 0.120, cpu=0.8), _point(3, 0.121, cpu=1.1)]
    assert "serialised" not in [f.cause for f in find_causes(_evidence(busier, cores=cores))], "CPU grew: contention"
    receiving = [_point(1, 0.122, receive=0.06), _point(2, 0.120, receive=0.06), _point(3, 0.121, receive=0.06)]
    assert "serialised" not in [f.cause for f in find_causes(_evidence(receiving, cores=cores))], "main receiving"


# --------------------------------------------------------------------------- measured loaders


def _held_to_its_points(result) -> None:
    ratios = loo_ratios(result)
    assert len([w for w in ratios if w > 0]) >= 3, f"too few points measured:\n{result}"
    bad = {w: round(r, 2) for w, r in ratios.items() if w > 0 and not BAND[0] <= r <= BAND[1]}
    assert not bad, f"measured / leave-one-out prediction outside {BAND} at {bad}:\n{result}"


@pytest.mark.parametrize("name", ["a service of 400 requests a second"])
def test_workers_that_share_one_resource_are_serialised_and_no_more_workers_are_advised(name):
    """2 workers over items that each take one resource every process shares (20 ms a batch
    of 8, however many workers): the diagnosis names it and advises no worker count for a
    gain the points do not show, where the probes alone promised 4x and more. (The lock
    over every item is the planted ``serialised``, named in tests/test_diagnosis.py.)"""
    case = SHARED[name]
    result = diagnose(case.factory(), step_s=case.step_s, max_seconds=4, progress=False)
    assert "serialised" in result.causes and "too-few-workers" not in result.causes, str(result)
    _held_to_its_points(result)
    tried = result.try_first
    assert tried is None or tried["setting"] != "num_workers" or tried["predicted_speedup"] < 1.3, str(result)
    check = result.model["check"]
    assert check["correction"] and "serial_s" in check["correction"]["fitted"], check


def test_a_lock_over_a_quarter_of_each_item_is_predicted_from_its_points_and_its_what_if_lands():
    case = SHARED["a lock over a quarter of each item"]
    result = diagnose(case.factory(), step_s=case.step_s, max_seconds=7, progress=False)
    _held_to_its_points(result)
    tried = result.try_first
    assert tried and tried["setting"] == "num_workers" and tried["measured_speedup"], str(result)
    ratio = tried["measured_speedup"] / tried["predicted_speedup"]
    assert WHAT_IF[0] <= ratio <= WHAT_IF[1], f"what-if measured / predicted {ratio:.2f}:\n{result}"
    again = replay(json.loads(json.dumps(result.to_dict())))
    assert again.try_first["value"] == tried["value"], "the replay concludes as the diagnosis did"
    assert again.model["check"]["correction"] == result.model["check"]["correction"]


def test_the_main_process_s_floor_is_measured_and_predicts_the_loops_with_workers():
    """Batches cheap to make, heavy to receive (8 MB of pickled float64 numpy a batch):
    diagnosed at 0 workers, the main process's floor is measured at a high batch rate, and
    the model predicts the steady 1- and 2-worker loops the diagnosis timed, each without
    its own measurement, within 0.8-1.25. (Its own runs, not loops timed afterwards: on a
    shared 2-core machine a loop of 8 MB pipes measured 45 ms a batch in one minute and
    66 ms in the next, more than the band.) Outside the band, the diagnosis must say that its
    readings were disturbed and trust only the counts it measured."""
    loader = DataLoader(SleepArrayDataset(2048, 0.0, shape=(1000, 125), dtype="float64"), batch_size=8,
                        collate_fn=collate_list)
    step_s = 0.025
    result = diagnose(loader, step_s=step_s, max_seconds=6, progress=False)
    costs = Costs.from_dict(result.model["costs"])
    assert costs.main_floor_s is not None and costs.main_floor_s >= step_s, (result.model["costs"], result.notes)
    assert any(r["label"] == "main process's floor" and r["timed_batches"] >= 3 for r in result.runs)
    ratios = loo_ratios(result)
    for w in (1, 2):
        assert w in ratios, f"{w} workers not measured:\n{result}"
    outside = {w: round(ratios[w], 2) for w in (1, 2) if not FLOOR[0] <= ratios[w] <= FLOOR[1]}
    if outside:
        # Where a busy machine moved the pipes (the docstring), the diagnosis must have seen it
        # and said so: readings it calls disturbed, and a model it no longer trusts beyond the
        # measured counts. Seen in two full runs of the suite on a 2-core machine (the load
        # probe's readings 149% apart, 1 worker at 1.51-1.55), never in this test alone.
        check = result.model["check"]
        assert result.disturbed and not check["trusted"], (
            f"steady loop / model {outside}, outside {FLOOR}, on readings the diagnosis took as sound:\n{result}")
    assert result.model_s_per_batch["2"] >= costs.main_floor_s, "no count runs faster than the main process's floor"


# --------------------------------------------------------------------------- one conclusion


#: The planted thread-oversubscription loader with a 10 ms step, diagnosed here: its probes'
#: costs and its points (1, 2 and 3 workers), the third worker's BLAS pool making each item
#: four times dearer (3 x 2 threads on 2 cores).
OVERSUBSCRIBED = Costs(load_s=0.002875, step_s=0.010075, send_s=5.34e-05, receive_s=0.000439, cpu_share=1.0,
                       cores=1.997, main_floor_s=0.010508)
OVERSUBSCRIBED_POINTS = {1: 0.011622, 2: 0.012120, 3: 0.051809}


def test_a_correction_that_misses_its_own_points_is_not_taken():
    """No family explains a loop whose third worker runs four times slower than its second:
    fitted to all three points, the workers' load and a shared resource together leave each
    of them outside the band (0.60, 0.62, 2.67), where the probes' model missed one. The
    probes' model stands, untrusted, and its explanation holds the count that was measured."""
    check = check_model(OVERSUBSCRIBED, OVERSUBSCRIBED_POINTS)
    assert check.correction is None, f"a correction that explains none of its points: {check.correction}"
    assert not check.trusted and check.costs == OVERSUBSCRIBED
    assert any(n.startswith("the model does not explain the measured points (3 workers") for n in check.notes), (
        check.notes)
    ratio = OVERSUBSCRIBED_POINTS[2] / check.costs.s_per_batch(2)
    assert BAND[0] <= ratio <= BAND[1], f"the measured count's own point: {ratio:.2f}"


def test_a_fed_model_says_so_when_the_loop_measured_waiting_anyway():
    """The CI run of the planted thread-oversubscription loader: the model's workers deliver a
    batch every 6 ms for a 10 ms step (fed: 'the loop never waits'), but the loop measured
    12.9 ms a batch, 2.58 ms of it waiting (0.74 ms of that receiving). The explanation says
    what was measured against the model's mean; where the loop barely waited, or where the
    model's workers set the pace, it adds nothing."""
    costs = Costs(load_s=0.012, step_s=0.010, send_s=0.00005, receive_s=0.00074, cpu_share=1.0, cores=2)
    assert costs.fed(2) and not costs.fed(1) and not costs.fed(0), "2 workers keep the step fed; 1 does not"
    waited = _evidence([], s_per_batch=0.0129, wait_s=0.00258, main_next_cpu_s=0.00074, data_wait_share=0.2)
    explanation = conclude(waited, Model(costs)).diagnosis().explanation
    assert "never waits" in explanation and "Measured, though, the loop waited 1.84 ms a batch" in explanation, explanation
    assert "(14% of its time)" in explanation, "the wait besides receiving, over the measured batch"
    barely = _evidence([], s_per_batch=0.0111, wait_s=0.0012, main_next_cpu_s=0.00074, data_wait_share=0.11)
    assert "Measured, though" not in conclude(barely, Model(costs)).diagnosis().explanation, (
        "0.46 ms of 11.1 ms besides receiving: within the model's means")
    one = _evidence([], num_workers=1, s_per_batch=0.0129, wait_s=0.00258, main_next_cpu_s=0.00074)
    assert "Measured, though" not in conclude(one, Model(costs)).diagnosis().explanation, (
        "1 worker sets the pace in the model: its loop waits, as measured")


def test_every_mode_ends_in_one_conclusion(monkeypatch, tmp_path):
    """diagnose, watch and replay each make their report through Conclusion.diagnosis."""
    made = []
    original = Conclusion.diagnosis

    def spy(self, **fields):
        made.append(fields.get("source", "diagnose"))
        return original(self, **fields)

    monkeypatch.setattr(Conclusion, "diagnosis", spy)
    case = PLANTED["main-process-loading"]
    live = diagnose(case.factory(), step_s=case.step_s, max_seconds=2, try_fix=False, progress=False)
    watched = watch(case.factory())
    for count, _ in enumerate(watched):
        if count == 8:
            break
    watched.report()
    replay(live.to_dict())
    replay(watched.report().to_dict())
    assert made == ["diagnose", "watch", "replay", "watch", "replay"], made


def test_a_json_written_before_the_floor_says_which_term_it_lacks():
    case = PLANTED["too-few-workers"]
    data = diagnose(case.factory(), step_s=case.step_s, max_seconds=2, try_fix=False, progress=False).to_dict()
    del data["model"]["costs"]["main_floor_s"]
    again = replay(data)
    assert any("written before the main process's floor was measured" in n for n in again.notes), again.notes
    assert math.isfinite(again.model_s_per_batch["2"])
