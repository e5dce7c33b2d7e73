"""``feedgpu-diagnose run`` on the training scripts people write (issue 39).

``tests/scripts/`` holds small scripts in the styles public repositories use (its README
lists them). Each runs here under ``feedgpu-diagnose run`` as a user would run it; the
runs share the module's fixture, one at a time. What is asserted does not depend on speed
(the bench weighs the speed-ups): the loop is found where the script built its loader, a
loader made again every epoch gets the setting every time, another loader's passes are
kept out of the step, the report starts on a line of its own after a progress bar, a
per-worker cache is named as one, and the try's JSON says how many batches its speed-up
rests on. The unit tests below hold the pieces to cases small enough to write down.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from pathlib import Path

import pytest

from diagnose_runs import advised_budget, diagnose_run
from feedgpu.diagnosis.sensing.steps import ReplayedStep
from feedgpu.diagnosis.report import Diagnosis
from feedgpu.diagnosis.modes.script import _compare, _not_measured, _warmed_note, steady_batches
from feedgpu.diagnosis.modes.script_hooks import TOO_FEW, _matches, loop_figures, parallel_share

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "scripts"

#: script, its arguments, feedgpu-diagnose's options, its budget (--max-seconds)
RUNS = {
    "bucketing": (["--epochs", "50"], ["--no-try"], "6"),
    "hf_style": (["--epochs", "50"], ["--no-try"], "5"),
    "streaming": (["--epochs", "50"], ["--no-try"], "5"),
    "prefetch_wrapper": (["--epochs", "50"], ["--no-try"], "5"),
    "blas_items": (["--epochs", "50", "--workers", "2"], ["--no-try"], "5"),
    "train_val": (["--epochs", "50"], ["--no-try"], "8"),
    "tqdm_cache": (["--epochs", "50", "--workers", "2", "--batch-size", "4"], ["--no-try"], "12"),
    "rebuilt": (["--epochs", "50"], [], "12"),
}


def _diagnose(name: str, tmp: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """The script's run, with its budget (the advised one where that is refused: :mod:`diagnose_runs`)."""
    args, options, budget = RUNS[name]
    out = tmp / f"{name}.json"
    done = diagnose_run(budget, options, out, ["python", str(SCRIPTS / f"{name}.py"), *args])
    found = json.loads(out.read_text()) if out.is_file() else {}
    return done, found


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every run, one after the other: two at a time on a 2-core machine, each script's torch
    threads and workers took the cores from the other's, and a 1.2 ms step measured 100 ms
    (the rebuilt script found compute-bound, nothing to try) or a baseline timed 7 batches
    (the cache's growth too small to read), in about 1 of 4 runs of the fixture."""
    tmp = tmp_path_factory.mktemp("styles")
    return {name: _diagnose(name, tmp) for name in RUNS}


def _run(runs, name):
    done, found = runs[name]
    assert done.returncode == 0 and found, f"{name}: exit {done.returncode}\n{done.stdout[-3000:]}{done.stderr[-2000:]}"
    return done, found


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_loop_is_found_where_the_script_built_its_loader(runs, name):
    """Every style: a diagnosis, and the loop timed is the one over the loader built in the
    script (not the wrapper's, not torch's), with its figures."""
    done, found = _run(runs, name)
    loop = found["model"]["script"]["loop"]
    assert f"tests/scripts/{name}.py:" in loop["site"], loop["site"]
    assert loop["timed_batches"] >= 3 and loop["s_per_batch"] > 0, loop
    assert "diagnosis of the script's loader failed" not in " ".join(found["notes"]), found["notes"]


def test_a_bucketing_batch_sampler_is_diagnosed_from_its_own_batches(runs):
    """Buckets of one shape each, stacked by the default collate: the item probe draws the
    sampler's batches, so the diagnosis runs to its end (it crashed with 'stack expects
    each tensor to be equal size' when it drew random indices)."""
    done, found = _run(runs, "bucketing")
    assert found["model"].get("costs") and found["breakdown"]["fetch_s"] > 0, "the probes and the baseline ran"
    assert found["scaling"], "and the scaling runs after them"


def test_a_validation_pass_inside_the_loop_is_kept_out_of_the_step(runs):
    """The validation loader's passes, every 10 steps, are measured apart, named by their
    site in a note, and not counted in the training step."""
    done, found = _run(runs, "train_val")
    loop = found["model"]["script"]["loop"]
    assert loop["other_s"] > 0 and loop["interrupted"] >= 1, loop
    # a pass reads 200 items (13 batches) at the training loader's cost per item: longer than a step
    assert loop["other_s"] / loop["interrupted"] > loop["step_s"], loop
    notes = " ".join(found["notes"])
    assert "other loaders iterated inside the training loop" in notes, notes
    assert "train_val.py:26 (" in notes and "train_val.py:25 (" in notes, notes


def test_a_per_worker_cache_is_named_as_a_cache_and_the_report_starts_its_own_line(runs):
    """tqdm around the loader: the report's first line starts a line, not the progress bar's
    last; the dataset's cache of decoded items in each worker is named memory-growth with
    the cache's explanation (not copy-on-write), and its advice."""
    done, found = _run(runs, "tqdm_cache")
    lines = done.stdout.splitlines()
    assert any(line.startswith("Diagnosis of a DataLoader") for line in lines), done.stdout[-2000:]
    assert not any("Diagnosis of a DataLoader" in line and not line.startswith("Diagnosis") for line in lines)
    assert "memory-growth" in found["causes"], (found["causes"], found["memory"])
    (sentence,) = [f["sentence"] + " " + f["advice"] for f in found["findings"] if f["cause"] == "memory-growth"]
    assert "cache" in sentence and "persistent_workers" in sentence, sentence
    assert "numpy arrays" not in sentence, "the copy-on-write advice is for shared Python objects"


def test_a_loader_made_again_every_epoch_gets_the_setting_every_time(runs):
    """make_loader(epoch) builds a new loader, with larger images, every epoch: the second run
    gives the setting to each loader built at that line, and says which loaders it measured;
    the try's JSON says how many batches its speed-up rests on, or why it was not measured."""
    done, found = _run(runs, "rebuilt")
    tried = found["try_first"]
    assert tried["setting"] == "num_workers" and tried["value"] > 0, tried
    assert tried["script_warmup_batches"] == max(2, 2 * tried["value"]), tried
    site = found["model"]["script"]["loop"]["site"]
    second = [n for n in found["notes"] if n.startswith("the loaders the script built") and
              f"{tried['value']} workers" in n]
    assert second and site in second[0], found["notes"]
    passes = int(second[0].split(f"{tried['value']} workers): ")[1].split(" pass")[0])
    assert passes >= 2, f"the setting reached every epoch's loader: {second[0]}"
    if "script_measured_speedup" in tried:
        assert tried["script_timed_batches"] >= steady_batches(tried["value"]), tried
    else:
        assert tried["script_note"].startswith("not measured") and "--max-seconds" in tried["script_note"], tried


# ---------------------------------------------------------------------------- the pieces


def test_a_speed_up_is_reported_only_from_a_steady_second_run():
    """Fewer timed batches than max(10, 2 x workers): no speed-up, but how many were timed,
    the time needed and the --max-seconds that would do; enough: the speed-up, with its count."""
    def compared(timed):
        result = Diagnosis("input-bound", [], 0.9, 0.1, try_first={"setting": "num_workers", "value": 8,
                                                                      "predicted_speedup": 4.0}, max_seconds=40)
        target = {"dataset": "d", "length": 10, "batch_size": 32, "site": "train.py:9"}
        second = {"applied": 1, "loader": target, "loop": {"s_per_batch": 0.02, "timed_batches": timed, "step_s": 0.01}}
        _compare(result, {"s_per_batch": 0.08, "timed_batches": 60, "step_s": 0.01}, second, target, 12.0)
        return result.try_first

    few = compared(3)
    assert "script_measured_speedup" not in few and few["script_timed_batches"] == 3, few
    assert few["script_warmup_batches"] == 16 and few["script_note"].startswith("not measured"), few
    wanted = float(few["script_note"].split("--max-seconds ")[1])
    assert wanted > 40, few["script_note"]
    enough = compared(16)
    assert enough["script_measured_speedup"] == pytest.approx(4.0) and enough["script_timed_batches"] == 16
    assert steady_batches(2) == 10 and steady_batches(16) == 32


def test_a_run_out_of_budget_says_what_it_measured_and_the_budget_that_would_do():
    record = {"reason": "the script ended, or its budget ran out, before a loop took enough batches",
              "loaders": [{"site": "train.py:40", "batches": 5, "timed": 1}], "partial": {"timed": 1}}
    said = _not_measured(record, 20)
    assert "train.py:40: 5 batches, 1 timed" in said and "--max-seconds 50" in said, said
    assert "--max-seconds" not in _not_measured({"reason": "nothing ran"}, 20)


def test_the_tests_rerun_a_refused_run_with_the_budget_its_error_advises():
    """What ``feedgpu-diagnose run`` prints when the loop took too few batches, as the
    command prints it (``command.py``: the program, ``error:``, the reason), gives the budget
    the tests run again with; any other error gives none."""
    record = {"reason": TOO_FEW, "loaders": [{"site": "train.py:61", "batches": 1, "timed": 0}], "partial": {"timed": 0}}
    printed = "[script] a line of the script's\nfeedgpu-diagnose run: error: " + _not_measured(record, 4) + "\n"
    assert advised_budget(printed) == "34"
    assert advised_budget("feedgpu-diagnose run: error: " + _not_measured(record, 0.5)) == "30.5"
    assert advised_budget("feedgpu-diagnose run: error: " + _not_measured({"reason": TOO_FEW}, 4)) is None
    assert advised_budget("feedgpu-diagnose run: error: --max-seconds must be a finite number > 0, got 0") is None
    assert advised_budget("") is None


def test_a_loader_is_the_training_loop_s_by_where_it_was_built():
    target = {"dataset": "m.Images", "length": 100, "batch_size": 32, "site": "train.py:12"}
    assert _matches({"dataset": object(), "batch_size": 64}, "train.py:12", target), "any dataset, any batch size"
    assert not _matches({"dataset": object(), "batch_size": 32}, "train.py:30", target), "another line"
    assert not _matches({}, "train.py:12", None)


def test_a_step_far_longer_than_the_others_is_left_out_and_counted():
    """A checkpoint every so often: 1 s among 10 ms steps, left out with its wait."""
    waits, steps = [0.02] * 30, [0.01] * 29 + [1.0]
    figures = loop_figures(waits, steps, [0.005] * 30)
    assert figures["outliers"] == 1 and figures["timed_batches"] == 29, figures
    assert figures["step_s"] == pytest.approx(0.01) and figures["outlier_s"] == pytest.approx(0.99)
    assert loop_figures([0.02] * 30, [0.01] * 30, [0.005] * 30)["outliers"] == 0


class _Loader:
    def __init__(self, workers=0, pin=False):
        self.num_workers, self.pin_memory = workers, pin


def test_the_share_played_on_torch_s_threads_follows_the_step_s_other_threads(monkeypatch):
    """Other threads busy for half the step's CPU on 3 torch threads: a quarter of the step in
    parallel regions; spinning only while the loop waited: the least share; with one torch
    thread, or a pin thread that could be what ran: none."""
    import torch

    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    assert parallel_share(_Loader(), {"step_threads": 1.5, "wait_helper_s": 0.0}) == pytest.approx(0.25)
    assert parallel_share(_Loader(), {"step_threads": 1.0, "wait_helper_s": 0.008}) > 0
    assert parallel_share(_Loader(2, pin=True), {"step_threads": 1.0, "wait_helper_s": 0.008}) == 0
    assert parallel_share(_Loader(), {"step_threads": 1.0, "wait_helper_s": 0.0}) == 0
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert parallel_share(_Loader(), {"step_threads": 2.0, "wait_helper_s": 0.01}) == 0


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores for torch's threads")
def test_a_replayed_step_on_torch_s_threads_keeps_them_busy():
    """The parallel share is played on torch's threads: the process's CPU exceeds this
    thread's (CPU clocks, not wall time: true on a loaded machine too); without it, not."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        def cpu(step):
            step(None)  # calibrates
            proc, mine = time.process_time(), time.thread_time()
            for _ in range(5):
                step(None)
            return time.process_time() - proc, time.thread_time() - mine

        proc, mine = cpu(ReplayedStep(0.02, 0.0, parallel_share=1.0))
        assert proc > 1.3 * mine, (proc, mine)
        proc, mine = cpu(ReplayedStep(0.02, 0.0))
        assert proc < 1.2 * mine, (proc, mine)
    finally:
        torch.set_num_threads(threads)
    with pytest.raises(ValueError):
        ReplayedStep(0.01, 0.0, parallel_share=1.5)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores for torch's threads")
def test_a_replayed_step_plays_its_parallel_share_as_a_step_s_few_products():
    """A 12.6 ms step, 90% of it on torch's 2 threads, is played as tens of regions a step's
    matrix products would be, not thousands of tiny ones (each waits for its last thread to
    get a core: 2,000 replayed a 26 ms step in 1.3 s beside busy workers). Counted from the
    fastest region timed, a busy machine can only make them fewer (its threads' spinning
    counts as CPU), never more: this holds on a loaded machine too."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        step = ReplayedStep(0.0126, 0.0, parallel_share=0.9)
        step(None)
        assert 1 <= step._regions <= 60, f"{step._regions} regions for 11 ms of parallel CPU"
    finally:
        torch.set_num_threads(threads)


def test_a_baseline_far_faster_than_the_script_s_loop_says_the_items_were_warm():
    result = Diagnosis("input-bound", [], 0.9, 0.1, breakdown={"s_per_batch": 0.010})
    note = _warmed_note({"s_per_batch": 0.021}, result)
    assert note and "2.1x slower" in note and "cache" in note, note
    assert _warmed_note({"s_per_batch": 0.012}, result) is None, "within the noise of two runs"


def test_a_verdict_on_a_busy_machine_says_so_and_what_it_rests_on():
    from feedgpu.diagnosis.evidence import Evidence
    from feedgpu.diagnosis.modes.live import disturbed_sentence

    ev = Evidence(num_workers=0, persistent_workers=False, cores=2, data_wait_share=0.06, s_per_batch=0.316,
                  wait_s=0.019, step_s=0.297, startup_s=math.nan, one_batch_s=math.nan, batches_per_epoch=None)
    said = disturbed_sentence(["load average 3.4 on 2 cores"], ev)
    assert "load average 3.4" in said and "19 ms" in said and "297 ms" in said, said
    result = Diagnosis("compute-bound", [], 0.06, 0.94, disturbed=said)
    assert "on disturbed readings: load average 3.4" in str(result)
    assert Diagnosis.from_dict(result.to_dict()).disturbed == said
    assert "disturbed" not in str(Diagnosis("compute-bound", [], 0.06, 0.94))


def test_the_what_if_borrows_from_the_spare_seconds_only_what_it_needs():
    from feedgpu.diagnosis.modes.live import Budget

    budget = Budget(1.0, progress=False, spare_s=5.0)
    end = budget.end
    assert budget.borrow(0.1) == 0.0, "it fits: nothing borrowed"
    got = budget.borrow(3.0)
    assert 2.0 < got <= 5.0 and budget.end == pytest.approx(end + got)
    assert budget.borrow(100.0) <= 5.0 - got + 1e-9, "never more than the spare seconds in all"


def test_a_pass_nested_in_another_loader_s_is_never_the_training_loop():
    """A validation pass that reaches its warm-up inside the training loop's pass (the training
    loader's warm-up is longer: more workers) is not taken for the training loop; in the
    second run only the first run's site may be."""
    from types import SimpleNamespace

    from feedgpu.diagnosis.modes.script_hooks import _State

    state = _State(Path(os.devnull), 10.0, None, None, False)
    train = SimpleNamespace(loop=SimpleNamespace(site="train.py:25"), open=True, pass_start=1.0)
    val = SimpleNamespace(loop=SimpleNamespace(site="train.py:26"), open=True, pass_start=2.0)
    state.iterators = [train, val]
    assert not state.may_train(val) and state.may_train(train)
    train.open = False  # the training pass ended: a pass after it is no longer nested
    assert state.may_train(val)
    second = _State(Path(os.devnull), 10.0, {"setting": "num_workers", "value": 4}, {"site": "train.py:25"}, False)
    second.iterators = [val]
    assert not second.may_train(val) and second.may_train(train)


def test_warm_items_give_the_script_s_second_run_a_cold_prediction():
    """A baseline twice as fast as the script's own loop with 0 workers: the second run's
    prediction takes the loop's wait as the workers' load (cold items), and the measured
    speed-up is held to it, not to the warm one."""
    from feedgpu.diagnosis.modes.script import _cold_prediction
    from feedgpu.diagnosis.whatif import Costs

    costs = Costs(load_s=0.009, step_s=0.002, send_s=0.0, receive_s=0.0005, cpu_share=1.0, cores=2,
                  step_cpu_share=1.0)
    result = Diagnosis("input-bound", [], 0.8, 0.2, breakdown={"s_per_batch": 0.011},
                       settings={"num_workers": 0}, model={"costs": costs.to_dict()})
    t = {"setting": "num_workers", "value": 1, "predicted_speedup": 0.011 / costs.s_per_batch(1)}
    loop = {"s_per_batch": 0.022, "wait_s": 0.020}
    _cold_prediction(t, loop, result)
    cold = t["script_predicted_speedup"]
    assert 0.9 < cold < 1.25, cold  # one worker builds a cold batch in 20 ms: little to gain over 22 ms
    assert cold < t["predicted_speedup"] * 2, t
    untouched = {"setting": "num_workers", "value": 1}
    _cold_prediction(untouched, loop, Diagnosis("input-bound", [], 0.8, 0.2, settings={"num_workers": 2},
                                                model={"costs": costs.to_dict()}))
    assert "script_predicted_speedup" not in untouched, "with workers, the loop's wait is not the load"
    measured = {"setting": "num_workers", "value": 1}
    _cold_prediction(measured, loop, Diagnosis("input-bound", [], 0.8, 0.2, settings={"num_workers": 0},
                                               model={"costs": costs.to_dict(), "check": {"trusted": False}}))
    assert "script_predicted_speedup" not in measured, "a measured count's gain is no model's to rescale"
