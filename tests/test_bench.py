"""`make bench`'s bookkeeping: figures are kept when one measurement fails or is re-run."""

from __future__ import annotations

import json

import pytest

from feedgpu.workflows import bench


@pytest.fixture
def fake_benches(monkeypatch):
    """Two quick benches in place of the real ones, and one that fails."""
    calls = {"a": 0}

    def bench_a():
        calls["a"] += 1
        return [bench.figure("a figure", float(calls["a"]), "x")]

    def bench_b():
        return [bench.figure("b figure", 10.0, "s")]

    def bench_broken():
        raise RuntimeError("no data")

    monkeypatch.setattr(bench, "BENCHES", {"a": bench_a, "b": bench_b})
    monkeypatch.setattr(bench, "EXTRA", {"broken": bench_broken})
    return calls


def values(path):
    return {f["name"]: f["value"] for f in json.loads(path.read_text())["figures"]}


def test_only_replaces_its_own_figures_and_keeps_the_others(fake_benches, tmp_path):
    out = tmp_path / "bench.json"
    assert bench.main(["--output", str(out)]) == 0, "every bench ran"
    assert values(out) == {"a figure": 1.0, "b figure": 10.0}, values(out)
    assert bench.main(["--output", str(out), "--only", "a"]) == 0, "bench a ran again"
    assert values(out) == {"a figure": 2.0, "b figure": 10.0}, f"a replaced, b kept: {values(out)}"


def test_a_failed_bench_is_reported_and_loses_no_other_figure(fake_benches, tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert bench.main(["--output", str(out)]) == 0, "every bench ran"
    assert bench.main(["--output", str(out), "--only", "a", "broken"]) == 1, "a failed bench exits 1"
    data = json.loads(out.read_text())
    assert {f["name"] for f in data["figures"]} == {"a figure", "b figure"}, f"no figure lost: {data}"
    assert len(data["failed"]) == 1 and "no data" in data["failed"][0], f"the failure is recorded: {data}"
    err = capsys.readouterr().err
    assert "FAILED broken" in err, f"the failure is reported: {err!r}"
    assert not out.with_suffix(".tmp").exists(), "no temporary file is left behind"


def test_when_every_bench_asked_for_fails_the_failures_are_still_reported(fake_benches, tmp_path, capsys):
    """As on a GPU machine whose PyTorch lacked a call the gpu section makes: nothing measured."""
    out = tmp_path / "bench.json"
    assert bench.main(["--output", str(out), "--only", "broken"]) == 1, "a failed bench exits 1"
    assert "no data" in json.loads(out.read_text())["failed"][0], "the failure is recorded"
    assert "FAILED broken" in capsys.readouterr().err, "the failure is reported"


def test_every_notebook_from_05_has_its_bench():
    """Notebooks 05 to 09 each have a section: gpu, memory, remote, distributed, capstone."""
    assert {"gpu", "memory", "remote", "distributed", "capstone"} <= set(bench.BENCHES), sorted(bench.BENCHES)


def test_gpu_bench_says_why_it_measured_nothing_without_cuda():
    """Without CUDA the GPU section is one figure, 0, with the reason (never silently absent)."""
    from feedgpu.measure.pinning import cuda_skip_reason
    from feedgpu.workflows.bench.gpu import bench_gpu

    reason = cuda_skip_reason()
    if reason is None:
        pytest.skip("this machine has a CUDA GPU: the GPU bench measures for real")
    figures = bench_gpu()
    assert [(f["name"], f["value"]) for f in figures] == [("gpu available", 0.0)], figures
    assert reason in figures[0]["note"], figures[0]["note"]


def test_gpu_bench_replays_a_recorded_machine(tmp_path, capsys):
    """--only gpu --readings: the gpu section's figures from the H200's readings, named as that machine's."""
    out = tmp_path / "bench.json"
    assert bench.main(["--only", "gpu", "--readings", "h200-2026-11-26", "--output", str(out)]) == 0
    written = json.loads(out.read_text())
    figures = {f["name"]: f for f in written["figures"]}
    assert written["readings"] == "h200-2026-11-26" and not written["failed"]
    assert "NVIDIA H200" in figures["gpu available"]["note"] and "not this machine" in figures["gpu available"]["note"]
    assert all("h200-2026-11-26" in f["note"] for f in figures.values()), "every figure names the machine"
    # the recorded loops stand as measured; the model of the copies predicts them within the budget
    assert figures["gpu loop, plain copies"]["value"] == pytest.approx(0.2175, rel=1e-3)
    for name in ("gpu model / measured, plain loop", "gpu model / measured, overlapped loop"):
        assert 0.75 <= figures[name]["value"] <= 1.25, (name, figures[name]["value"])
    live_names = {"gpu available", "gpu H2D bandwidth, pageable", "gpu H2D bandwidth, pinned",
                  "gpu pinned / pageable bandwidth", "gpu pinning speed", "gpu pinning latency",
                  "gpu first pin / later pins", "gpu loop, plain copies", "gpu loop, pinned + non_blocking + prefetch",
                  "gpu overlap gain", "gpu model / measured, plain loop", "gpu model / measured, overlapped loop"}
    assert live_names <= set(figures), f"the live section's names: missing {live_names - set(figures)}"
    capsys.readouterr()
    assert bench.main(["--only", "gpu", "model", "--readings", "h200-2026-11-26", "--output", str(out)]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert said == ["feedgpu-bench: error: --readings replays the gpu section only: use it with --only gpu"], said


def test_serialised_records_come_back_equal():
    """The memory bench's layouts of the records (its buffer, and the buffer in tensors) hold
    exactly the records of the list, in order."""
    from feedgpu.workflows.bench.memory import layouts
    from feedgpu.workloads.annotations import make_annotations

    records = make_annotations(50, seed=3)
    found = layouts(records)
    assert sorted(found) == ["buffer", "list", "tensors"], sorted(found)
    for name, dataset in found.items():
        assert [dataset[i] for i in range(len(dataset))] == records, f"{name}: records differ"


def test_memory_bench_counts_copies_of_the_list_not_of_the_buffer():
    """Under fork, the workers hold alone (copied on write) most of the list's pages they read, and
    none of the buffer's: each a count of pages, never below zero."""
    import multiprocessing as mp

    from feedgpu.measure.memory import available_kinds
    from feedgpu.workflows.bench.memory import WORKERS, held_alone, layouts
    from feedgpu.workloads.annotations import make_annotations

    if "fork" not in mp.get_all_start_methods() or "pss" not in available_kinds():
        pytest.skip("needs fork and Linux's /proc")
    found = layouts(make_annotations(3_000, seed=2))
    reports = {name: held_alone(found[name], "fork") for name in ("list", "buffer")}
    assert all(len(r) == WORKERS for r in reports.values()), f"one report per worker: {reports}"
    copied = sum(r.alone for r in reports["list"])
    assert copied >= 0.5 * reports["list"][0].total, f"the list's workers copied what they read: {reports['list']}"
    assert sum(r.alone for r in reports["buffer"]) <= 0.02 * copied, f"the buffer stays shared: {reports['buffer']}"


@pytest.mark.slow
def test_the_grading_bench_splits_a_notebook_by_what_its_cells_are(tmp_path):
    """The fixture's solution: its tests (one starts two DataLoader workers) take longer
    than its answers (two def statements); the parts and the kernel's start add up."""
    import shutil

    from feedgpu.workflows.bench.grading import ROLES, execute_by_role
    from grading_fixtures import FIXTURE_SOURCE, TINY

    shutil.copy(FIXTURE_SOURCE / TINY / f"{TINY}.ipynb", tmp_path)
    took = execute_by_role(tmp_path / f"{TINY}.ipynb")
    assert took["tests"] > took["answers"] >= 0, took
    assert took["kernel start and stop"] > 0 and all(took[role] >= 0 for role in ROLES), took
    assert sum(took[role] for role in (*ROLES, "kernel start and stop")) == pytest.approx(took["total"]), took
