"""feedgpu.distributed.phases: several runs of the epoch script in one torchrun launch.

The quick tests check, in this process, the module of functions written for the ranks, the
plan, what a run reports, and that a phase runs once per source (torchrun replaced by a
stand-in that writes what the ranks would). The test marked ``notebook`` starts torchrun
for real, once: a phase that fails on both ranks at different moments (one raises, the
other is left waiting until the collective timeout), then phases that must still run,
one of them with a function of "a student" imported by name in every rank.
"""

from __future__ import annotations

import collections
import importlib
import json

import pytest

from feedgpu.base.files import write_json_atomically

from feedgpu.distributed import launch, phases, shards
from feedgpu.distributed.launch import marked_processes
from feedgpu.distributed.phases import PhaseRunner, PhasesRun, function_module, phase_status, write_plan


def student_indices(n_items, rank, world_size, *, epoch=0, seed=0, shuffle=True, drop_last=False):
    g = torch.Generator()  # noqa: F821 (the module written for the ranks imports torch)
    g.manual_seed(seed + epoch)
    order = torch.randperm(n_items, generator=g).tolist() if shuffle else list(range(n_items))  # noqa: F821
    total = math.ceil(n_items / world_size) * world_size  # noqa: F821
    order = (order * 2)[:total]
    return order[rank:total:world_size]


def other_function(ids, rank, world_size, worker_id, num_workers):
    return list(ids)[rank::world_size]


# ---------------------------------------------------------------- quick: in this process


@pytest.mark.unit
def test_function_module_is_importable_and_named_by_its_source(tmp_path, monkeypatch):
    """The module holds the functions' source with math and torch; its name follows the source."""
    name = function_module(tmp_path, [student_indices, other_function])
    assert name.startswith("mine_"), name
    assert function_module(tmp_path, [student_indices, other_function]) == name, "same source, same module"
    assert function_module(tmp_path, [student_indices]) != name, "other source, other module"
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(name)
    for n_items, epoch in [(11, 0), (5, 3)]:
        for rank in range(2):
            assert module.student_indices(n_items, rank, 2, epoch=epoch) == shards.padded_indices(
                n_items, rank, 2, epoch=epoch), f"n={n_items} epoch={epoch} rank={rank}"
    assert not list(tmp_path.glob("*.tmp")), "a temporary file was left behind"


@pytest.mark.unit
def test_function_module_refuses_what_has_no_source(tmp_path):
    """A function without Python source (a builtin) raises TypeError naming it."""
    with pytest.raises(TypeError, match="len"):
        function_module(tmp_path, [len])


def stub_indices(n_items, rank, world_size):
    """The indices of rank.

    Raises:
        ValueError: a bad rank.
    """
    # YOUR CODE HERE
    raise NotImplementedError()


def stub_then_work(n_items, rank, world_size):
    """Raises where it has nothing to do, else works."""
    if n_items == 0:
        raise NotImplementedError("no items")
    return list(range(rank, n_items, world_size))


@pytest.mark.unit
def test_a_stub_is_refused_before_anything_is_launched(tmp_path):
    """A release's stub (its body raises NotImplementedError, after its docstring) is refused
    here, naming it, and no module is written; a function that raises it only sometimes is not."""
    with pytest.raises(NotImplementedError, match="stub_indices"):
        function_module(tmp_path, [other_function, stub_indices])
    assert not list(tmp_path.glob("*.py")), "nothing is written for a launch that does not happen"
    with pytest.raises(NotImplementedError, match="stub_indices"):
        PhaseRunner(tmp_path / "runs").run({"mine": ["--indices-fn", "{module}:stub_indices"]}, [stub_indices])
    assert function_module(tmp_path, [stub_then_work]).startswith("mine_")


@pytest.mark.unit
def test_write_plan_gives_every_phase_its_own_port(tmp_path):
    """The plan lists the phases in order, each with its own port, and one for the lobby."""
    plan = json.loads(write_plan(tmp_path / "plan.json", [("a", ["--out", "x"]), ("b", ["--out", "y", 3])]).read_text())
    assert [p["name"] for p in plan["phases"]] == ["a", "b"], plan
    assert plan["phases"][1]["args"] == ["--out", "y", "3"], "arguments are passed as text"
    ports = [plan["lobby_port"]] + [p["port"] for p in plan["phases"]]
    assert len(set(ports)) == 3 and all(0 < p < 65536 for p in ports), f"ports: {ports}"


@pytest.mark.unit
def test_phases_run_reports_finished_failed_and_missing_phases(tmp_path):
    """ok() needs every rank's status ok; problem() quotes the failing rank's error."""
    for phase, statuses in {"good": [True, True], "bad": [True, False], "half": [True]}.items():
        for rank, ok in enumerate(statuses):
            write_json_atomically(tmp_path / phase / f"phase-rank-{rank}.json",
                                       {"phase": phase, "rank": rank, "ok": ok,
                                        "error": None if ok else "Traceback\nRuntimeError: boom"})
    run = PhasesRun({p: tmp_path / p for p in ("good", "bad", "half")}, world_size=2)
    assert run.ok("good") and run.problem("good") == "", run.problem("good")
    assert not run.ok("bad") and "rank 1" in run.problem("bad") and "boom" in run.problem("bad"), run.problem("bad")
    assert not run.ok("half") and "1 of 2 ranks" in run.problem("half"), run.problem("half")
    assert [s["rank"] for s in phase_status(tmp_path / "bad")] == [0, 1], "statuses sorted by rank"


@pytest.mark.unit
def test_runner_launches_each_phase_once_per_source(tmp_path, monkeypatch):
    """A phase asked for again is read from its folder; a changed function runs it again;
    {module} names the module of the functions."""
    launched = []

    def fake_torchrun(module, args, **kw):  # writes what every rank of a good run writes
        plan = json.loads(open(args[0]).read())
        launched.append([p["name"] for p in plan["phases"]])
        for p in plan["phases"]:
            out = p["args"][p["args"].index("--out") + 1]
            for rank in range(kw["nproc_per_node"]):
                write_json_atomically(phases.Path(out) / f"phase-rank-{rank}.json",
                                           {"rank": rank, "ok": True, "error": None, "args": p["args"]})
        assert kw["workdir"] == tmp_path.resolve(), "the ranks run in the work folder"
        return launch.LaunchResult([], 0, 0.1, False)

    monkeypatch.setattr(phases, "run_torchrun", fake_torchrun)
    runner = PhaseRunner(tmp_path, timeout_s=5)
    asked = {"ref": ["--n-items", 11], "mine": ["--indices-fn", "{module}:student_indices"]}
    first = runner.run(asked, [student_indices])
    assert launched == [["ref", "mine"]] and first.launched == ["ref", "mine"], launched
    module = function_module(tmp_path, [student_indices])
    args = phase_status(first.out("mine"))[0]["args"]
    assert f"{module}:student_indices" in args, f"{{module}} not replaced: {args}"
    again = runner.run(asked, [student_indices])
    assert launched == [["ref", "mine"]] and again.launch is None, "nothing new: no launch"
    assert again.ok("mine") and again.out("mine") == first.out("mine"), "the same folders"
    runner.run(asked, [other_function])
    assert launched[-1] == ["mine"], f"only the phase whose module changed runs again: {launched}"


@pytest.mark.unit
def test_time_limit_counts_the_workers_that_import_torch_again(tmp_path, monkeypatch):
    """Under spawn or forkserver each worker of each rank and epoch adds to a launch's limit;
    under fork none does; a phase's own --worker-start-method counts; timeout_s wins."""
    monkeypatch.setattr(phases, "worker_start_method", lambda: "fork")
    runner = PhaseRunner(tmp_path, nproc_per_node=2)
    base = runner.time_limit_s({"a": ["--num-workers", 2, "--epochs", 3]})
    assert base == launch.launch_time_limit_s(0), "under fork no worker imports torch again"
    spawned = {"a": ["--num-workers", 2, "--epochs", 1, "--worker-start-method", "spawn"]}
    assert runner.time_limit_s(spawned) == launch.launch_time_limit_s(2 * 2), "2 ranks x 2 workers"
    monkeypatch.setattr(phases, "worker_start_method", lambda: "forkserver")
    asked = {"a": ["--num-workers", 2, "--epochs", 3], "b": ["--epochs", 2], "c": ["--num-workers", 1]}
    assert runner.time_limit_s(asked) == launch.launch_time_limit_s(2 * (2 * 3 + 0 + 1 * 2)), (
        "workers start anew every epoch (the script's default is 2), in each rank")
    assert PhaseRunner(tmp_path, timeout_s=7).time_limit_s(asked) == 7, "an explicit limit wins"


# ---------------------------------------------------------------- torchrun, for real


@pytest.mark.notebook
def test_one_launch_runs_every_phase_even_after_a_failed_one(tmp_path):
    """A phase where rank 1 raises and rank 0 waits for it until the collective timeout fails
    on both ranks; the lobby then starts the next phases together, and they finish, a
    student's function imported by name included. Nothing of the launch is left running."""
    runner = PhaseRunner(tmp_path, timeout_s=180)
    asked = {
        "broken": ["--n-items", 11, "--crash-rank", 1, "--timeout-s", 3, "--epochs", 1],
        "after": ["--n-items", 11, "--epochs", 2],
        "student": ["--n-items", 11, "--epochs", 2, "--indices-fn", "{module}:student_indices"],
    }
    run = runner.run(asked, [student_indices])
    assert run.launch is not None and run.launch.ok, run.launch.report(40) if run.launch else "no launch"
    assert not run.ok("broken"), "the broken phase should have failed"
    errors = {s["rank"]: s["error"] for s in phase_status(run.out("broken"))}
    assert "planned failure on rank 1" in errors[1], errors[1]
    assert "Timed out" in errors[0] or "Connection" in errors[0], f"rank 0 should have waited for rank 1: {errors[0]}"
    for name in ("after", "student"):
        assert run.ok(name), run.problem(name)
        df = run.seen(name)
        for epoch, rows in df.groupby("epoch"):
            counts = collections.Counter(rows.sample_id)
            assert set(counts) == set(range(11)) and len(rows) == 12, f"{name} epoch {epoch}: {dict(counts)}"
        for rank, rows in df.groupby("rank"):
            for epoch, mine in rows.groupby("epoch"):
                assert mine.sample_id.tolist() == shards.padded_indices(11, rank, 2, epoch=epoch), (
                    f"{name}: rank {rank}, epoch {epoch} is not DistributedSampler's shard")
    assert not marked_processes(run.launch.launch_id), "a process of the launch is still running"
    assert [(r["rank"], r["world_size"]) for r in run.records("student")] == [(0, 2), (1, 2)], "2 ranks"
