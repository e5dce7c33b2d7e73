"""The diagnosis's model held to a real GPU machine, and every diagnosis replayable (issue 30).

No GPU is needed: the recorded diagnoses of an H200 with 16 cores
(``readings/h200-2026-11-26``) are replayed with the loop's stall-free step, and the
model's seconds per batch are compared with the loop's steady speed recorded there.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest

from feedgpu.diagnosis import diagnose, replay
from feedgpu.diagnosis.causes import find_causes
from feedgpu.diagnosis.evidence import Evidence
from feedgpu.diagnosis.sensing.probes import Reading
from feedgpu.diagnosis.modes.live import _Diagnosis
from feedgpu.diagnosis.command import main
from feedgpu.diagnosis.sensing.runs import MemoryGrowth
from feedgpu.diagnosis.whatif import Costs
from feedgpu.models.pipeline import steady_state_time_per_batch
from feedgpu.readings import load_readings
from feedgpu.workflows.bench.planted import PLANTED

H200 = load_readings("h200-2026-11-26")
STALL_FREE_STEP_MS = 8.04  # the loop's step on a batch held in memory (``stall_free_step_s``: 8.043 ms)
WARM = ("diagnosis_nw0", "diagnosis_nw2", "diagnosis_nw6", "diagnosis_nw15")


def test_the_recorded_stall_free_step_is_the_one_replayed():
    assert H200.stall_free_step_s == pytest.approx(STALL_FREE_STEP_MS / 1e3, abs=5e-6)


@pytest.mark.parametrize("name", WARM)
def test_replayed_h200_diagnoses_hold_to_the_steady_loop(name, tmp_path, capsys):
    out = tmp_path / "replay.json"
    assert main(["--replay", str(H200.folder / f"{name}.json"), "--step-ms", str(STALL_FREE_STEP_MS),
                 "--cores", "16", "--json", str(out)]) == 0
    capsys.readouterr()
    model = json.loads(out.read_text())["model_s_per_batch"]
    assert set(model) == {str(w) for w in range(17)}, "every count from 0 to the largest considered"
    ratios = {w: steady / model[str(w)] for w, steady in H200.steady_loop_s().items()}
    assert set(ratios) == {0, 1, 2, 4, 6, 8, 12, 15}
    bad = {w: round(r, 2) for w, r in ratios.items() if not 0.8 <= r <= 1.25}
    assert not bad, f"{name}: steady loop / model outside 0.8-1.25 at {bad}"


def test_without_the_main_process_term_the_model_misses_many_workers():
    """The control: the course's formula alone (no main-process CPU, no shared cores) puts
    12 and 15 workers out of the band, which is why the term exists."""
    data = H200.diagnoses["diagnosis_nw15"]
    b = data["breakdown"]
    load = b["fetch_s"] + b["collate_s"]
    steady = H200.steady_loop_s()
    plain = steady_state_time_per_batch(15, load, STALL_FREE_STEP_MS / 1e3, b["send_s"], cores=16,
                                        receive_s=b["receive_s"])
    assert steady[15] / plain > 1.25


def test_the_main_process_term_by_hand():
    """Main 10 ms alone, 4 ms of it CPU, 16 cores, the workers 90 ms of CPU per batch:
    p = 10 + 4/16 * min(15, 90/p) ms, whose root (p^2 - 10p - 22.5 = 0) is 11.89 ms."""
    costs = Costs(load_s=0.090, step_s=0.008, send_s=0.0, receive_s=0.0, cpu_share=1.0, cores=16,
                  step_cpu_share=0.25, pin_s=0.002)
    p = costs.main_s(15)
    assert p == pytest.approx(0.010 + 0.004 / 16 * min(15, 0.090 / p), rel=1e-9), "the fixed point"
    assert p == pytest.approx(11.89e-3, abs=0.01e-3)
    assert costs.main_s(2) == pytest.approx(0.010 + 0.004 * 2 / 16, rel=1e-9), "2 busy workers at most"
    assert costs.s_per_batch(15) == pytest.approx(p, rel=1e-9)
    assert costs.s_per_batch(0) == pytest.approx(0.090 + 0.008 + 0.002, rel=1e-9), "0 workers: load, step, pin"
    assert replace(costs, sharing=0.0).main_s(15) == pytest.approx(0.010), "a core shared at no cost"
    idle = Costs(load_s=0.090, step_s=0.008, send_s=0.0, receive_s=0.0, cpu_share=0.0, cores=16)
    assert idle.s_per_batch(15) == pytest.approx(steady_state_time_per_batch(15, 0.090, 0.008)), (
        "no CPU in the main process: the course's formula")


def test_the_step_is_taken_without_the_sharing_its_baseline_paid():
    """A CPU step of 12 ms alone measured 13.2 ms beside 2 workers keeping 1 of 2 cores busy
    (12 ms of CPU a batch, 12 ms a batch): sharing 0.2, the step alone 12 ms, and the model
    at the baseline's 2 workers gives back what was measured (13.1 ms, not 14.3)."""
    baseline = SimpleNamespace(measured=True, gpu_busy_s=None, cpu={"workers_per_s": 1.0},
                               timing=SimpleNamespace(n_batches=[20]))
    state = SimpleNamespace(baseline=baseline, step_alone=Reading([0.012, 0.012, 0.012], threads=1), step_cpu=1.0,
                            cores=2, sharing_source="")
    ev = SimpleNamespace(step_s=0.0132)
    step, cpu, sharing = _Diagnosis.model_step(state, ev)
    assert (step, cpu) == (pytest.approx(0.012), 1.0) and sharing == pytest.approx(0.2)
    assert state.sharing_source.startswith("measured")
    costs = Costs(load_s=0.012, step_s=step, send_s=0.0, receive_s=0.0, cpu_share=1.0, cores=2,
                  step_cpu_share=cpu, sharing=sharing)
    assert costs.main_s(2) == pytest.approx(0.0131, abs=0.0001)
    alone = SimpleNamespace(**{**vars(state), "step_alone": None})
    assert _Diagnosis.model_step(alone, ev) == (0.0132, 1.0, 1.0), "nothing to measure it by: sharing 1"


def test_a_replay_without_inputs_names_what_it_assumed():
    again = replay(H200.diagnoses["diagnosis_nw0"])
    text = " ".join(again.notes)
    assert "16, estimated from its runs' CPU readings" in text
    assert "pinning is not charged" in text and again.breakdown["pin_s"] is None
    assert again.verdict == "input-bound" and again.causes == ["main-process-loading"]
    assert again.try_first["setting"] == "num_workers" and again.try_first["measured_speedup"] is None


def test_what_if_the_step_or_the_cores_change():
    slow = replay(H200.diagnoses["diagnosis_nw2"], step_s=0.5, cores=16)
    assert slow.verdict == "compute-bound" and slow.causes == [], "a 500 ms step: 2 workers keep up"
    small = replay(H200.diagnoses["diagnosis_nw2"], step_s=0.00804, cores=2)
    assert small.causes == ["cpu-saturated"], "2 workers computing 100 ms a batch on 2 cores: no core left"
    assert replay(H200.diagnoses["diagnosis_nw2"], step_s=0.00804, cores=16).causes == ["too-few-workers"]
    assert any("what if" in n for n in small.notes) and small.gpu_busy_share is None


def test_replay_refuses_what_is_not_a_diagnosis(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hello": 1}))
    for argv, reason in ((["--replay", str(bad)], "not a diagnosis"),
                         (["--replay", str(tmp_path / "none.json")], "no such file"),
                         (["--replay", str(bad), "--step", "m:f"], "--replay takes no factory"),
                         (["mytraining:make", "--step-ms", "5", "--cores", "4"], "--cores is for --replay"),
                         (["--replay", str(bad), "--cores", "0"], "--cores must be")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and reason in err, (argv, err)


@pytest.fixture(scope="module")
def fresh():
    case = PLANTED["too-few-workers"]
    return diagnose(case.factory(), step_s=case.step_s, max_seconds=15, progress=False)


def test_a_fresh_diagnosis_keeps_every_input_and_replays_the_same(fresh):
    data = json.loads(json.dumps(fresh.to_dict()))
    for key in ("load_s", "step_s", "send_s", "receive_s", "cpu_share", "cores", "step_cpu_share", "pin_s"):
        assert key in data["model"]["costs"], key
    assert data["model"]["probes"]["load"]["readings_s"], "the load probe's readings"
    stale = "the model does not explain the measured points (drawn by an older version): only measured counts"
    data["notes"].append(stale)
    again = replay(data)
    assert stale not in again.notes and len(set(again.notes)) == len(again.notes), "the check's notes drawn again, once"
    assert (again.verdict, again.causes) == (fresh.verdict, fresh.causes)
    assert again.try_first["value"] == fresh.try_first["value"]
    assert again.try_first["predicted_speedup"] == pytest.approx(fresh.try_first["predicted_speedup"], rel=1e-9)
    assert again.model_s_per_batch == pytest.approx(data["model_s_per_batch"], rel=1e-9)
    assert again.explanation == fresh.explanation
    assert not any("estimated" in n or "assumed" in n for n in again.notes), "nothing is missing"


def test_what_ifs_are_timed_at_a_steady_state(fresh):
    rows = {r["label"]: r for r in fresh.runs}
    base = rows["baseline"]
    for row in fresh.runs:
        if row["timed_batches"]:
            assert row["warmup"] >= 2 * row["num_workers"], f"{row['label']}: every worker warmed up"
            assert row["timed_batches"] <= base["timed_batches"], f"{row['label']}: no more than the baseline's"
    tried = rows[f"num_workers={fresh.try_first['value']}"]
    assert tried["timed_batches"] >= min(base["timed_batches"], 4), "the what-if counts (about) the baseline's"
    assert all("spread" in point for point in fresh.scaling)
    w0 = fresh.settings["num_workers"]
    ratio = fresh.model_s_per_batch[str(w0)] / base["s_per_batch"]
    assert 0.8 <= ratio <= 1.25, f"the model at the loader's own setting / its baseline: {ratio:.2f}"


def evidence(**changes):
    base = dict(num_workers=2, persistent_workers=True, cores=2, data_wait_share=0.0, s_per_batch=0.05,
                wait_s=0.0, step_s=0.05, startup_s=0.2, one_batch_s=0.05, batches_per_epoch=1000,
                memory_mb=24 * 1024)
    return Evidence(**{**base, **changes})


def test_memory_growth_is_named_from_an_epoch_s_projection():
    """Notebook 06's case: +9 MB per worker over about 1,300 items (7 KB each), which a
    fixed 8 KB per item missed; over 300,000 items that is about 1 GB per worker."""
    growth = MemoryGrowth([9.0, 9.0], items_per_worker=1300)
    big = find_causes(evidence(memory=growth, dataset_items=300_000))
    assert [f.cause for f in big] == ["memory-growth"]
    assert "1.0 GB" in big[0].sentence and "of this machine's memory" in big[0].sentence
    assert find_causes(evidence(memory=growth, dataset_items=2_600)) == [], "an epoch of 2,600 items: 9 MB"
    assert find_causes(evidence(memory=growth)) == [], "no length: 7 KB per item is under the rate"


def test_a_step_alone_keeps_the_cores_and_says_the_figures_are_modelled():
    plain = replay(H200.diagnoses["diagnosis_nw2"])
    faster = replay(H200.diagnoses["diagnosis_nw2"], step_s=0.004)
    assert faster.evidence["cores"] == plain.evidence["cores"] == 16
    assert "modelled per batch" in str(faster) and "measured per batch" in str(plain)


def test_a_watched_loop_replays_its_causes_and_predicts_nothing():
    watched = diagnose.watch(PLANTED["main-process-loading"].factory())
    for count, _ in enumerate(watched):
        time.sleep(0.005)
        if count == 12:
            break
    report = watched.report()
    again = replay(report.to_dict())
    assert (again.verdict, again.causes) == (report.verdict, report.causes) == ("input-bound",
                                                                                  ["main-process-loading"])
    assert again.try_first is None and again.model_s_per_batch == {}
    assert any("watched loop" in n for n in again.notes)

