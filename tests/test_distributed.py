"""feedgpu.distributed: sharding by rank and worker, torchrun for real, what each rank saw.

The quick tests check the functions in this process (sampler arithmetic, sharding with a
made-up rank and real DataLoader workers, a one-process evaluation, the command lines).
The tests marked ``notebook`` read what 4 ``torchrun`` processes did (each start costs
several seconds on 2 cores, mostly importing torch in torchrun and in every rank):

* two torchrun agents, two "machines" on one host with one rank each, whose ranks run the
  course's epoch script several times over in the same processes: coverage per epoch with
  and without ``set_epoch``, exact evaluation, IterableDataset sharding over 2 ranks x 2
  workers (the course's and a student's, imported by name), uneven shards with Join and
  with truncation, and last the hang of uneven shards without a fix, ended by the gloo
  timeout;
* side by side, a 2-rank launch where one rank crashes, and one whose ranks ignore SIGTERM
  and leave a child behind, stopped by the launcher's time limit.
"""

from __future__ import annotations

import collections
import json
import multiprocessing
import random
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

from feedgpu.distributed import epoch_script, launch, seen, shards
from feedgpu.distributed.launch import LaunchError, marked_processes, run_torchrun, torchrun_command

N_ITEMS = 11  # odd, so DistributedSampler pads 2 ranks with one duplicate
WORLD = 2
LAUNCH_S = 180.0  # a backstop for a stuck launch on a busy 2-core machine, not a measurement


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie is not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def assert_nothing_left(result: launch.LaunchResult, outdir: Path | None = None) -> None:
    """No process of the launch is running: none carries its marker, no rank's pid lives."""
    left = marked_processes(result.launch_id)
    assert not left, f"processes of the launch still running: {[p.pid for p in left]}"
    if outdir is not None and any(outdir.glob("rank-*.json")):
        pids = [r["pid"] for r in seen.read_ranks(outdir)]
        assert not any(alive(p) for p in pids), f"a rank's process survived: {pids}"


def load_ids(shard_fn, rank: int, world_size: int, num_workers: int) -> list[tuple[int, int]]:
    """``(worker, sample_id)`` for every item one rank's DataLoader yields from an IdStream."""
    loader = DataLoader(shards.IdStream(N_ITEMS, rank, world_size, shard_fn), batch_size=2,
                        num_workers=num_workers)
    return [(w, i) for ids, workers in loader for i, w in zip(ids.tolist(), workers.tolist())]


# ---------------------------------------------------------------- quick: in this process


@pytest.mark.unit
@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("drop_last", [True, False])
def test_padded_indices_match_distributed_sampler(shuffle, drop_last):
    """padded_indices gives each rank exactly DistributedSampler's indices, epoch by epoch."""
    for n_items in (1, 2, 5, 11, 12):
        for world_size in (1, 2, 3, 4):
            if drop_last and n_items < world_size:
                continue  # DistributedSampler would give nothing to anyone
            for rank in range(world_size):
                sampler = DistributedSampler(range(n_items), num_replicas=world_size, rank=rank,
                                             shuffle=shuffle, seed=7, drop_last=drop_last)
                for epoch in (0, 1):
                    sampler.set_epoch(epoch)
                    ours = shards.padded_indices(n_items, rank, world_size, epoch=epoch, seed=7,
                                                 shuffle=shuffle, drop_last=drop_last)
                    assert ours == list(sampler), (
                        f"n={n_items} world={world_size} rank={rank} epoch={epoch}: "
                        f"{ours} != {list(sampler)}")


@pytest.mark.unit
def test_padding_adds_the_missing_duplicates():
    """Without drop_last, 2 ranks over 11 ids see 12 samples: every id, one of them twice."""
    seen_ids = [i for r in range(WORLD) for i in shards.padded_indices(N_ITEMS, r, WORLD)]
    counts = collections.Counter(seen_ids)
    assert set(counts) == set(range(N_ITEMS)), f"ids missing: {set(range(N_ITEMS)) - set(counts)}"
    assert sum(c - 1 for c in counts.values()) == 1, f"expected one padded duplicate: {counts}"


@pytest.mark.unit
@pytest.mark.parametrize("world_size,num_workers", [(1, 1), (2, 1), (2, 2), (3, 2), (2, 4)])
def test_shard_by_rank_and_worker_takes_every_id_once(world_size, num_workers):
    """Across all ranks and workers, every id is yielded exactly once, shards within one of each other."""
    ids = range(23)
    parts = [shards.shard_by_rank_and_worker(ids, r, world_size, w, num_workers)
             for r in range(world_size) for w in range(num_workers)]
    flat = sorted(i for p in parts for i in p)
    assert flat == list(ids), f"ids not covered exactly once: {flat}"
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1, f"shard sizes too uneven: {sizes}"


@pytest.mark.unit
def test_incomplete_sharding_repeats_ids():
    """Sharding by rank only repeats a rank's ids once per worker; no sharding repeats all of them."""
    ids = range(10)
    by_rank = [i for r in range(2) for w in range(3) for i in shards.shard_by_rank(ids, r, 2, w, 3)]
    assert collections.Counter(by_rank) == {i: 3 for i in ids}, "each id once per worker expected"
    nothing = [i for r in range(2) for w in range(3) for i in shards.no_shard(ids, r, 2, w, 3)]
    assert collections.Counter(nothing) == {i: 6 for i in ids}, "each id once per copy expected"


@pytest.mark.unit
@pytest.mark.parametrize("shard,copies_per_id", [("rank-and-worker", 1), ("rank", 2), ("none", 4)])
def test_iterable_sharding_for_each_rank_through_two_real_workers(shard, copies_per_id):
    """2 ranks (told their rank, as the script tells them) x 2 real DataLoader workers:
    sharded by rank and worker each id is loaded once; by rank only, once per worker;
    unsharded, once per rank per worker. The real 2-rank run is in the torchrun tests."""
    loaded = [(rank, w, i) for rank in range(WORLD)
              for w, i in load_ids(shards.SHARDINGS[shard], rank, WORLD, num_workers=2)]
    counts = collections.Counter(i for _, _, i in loaded)
    assert counts == {i: copies_per_id for i in range(N_ITEMS)}, f"--shard {shard}: {counts}"
    pairs = {(r, w) for r, w, _ in loaded}
    assert pairs == {(r, w) for r in range(WORLD) for w in range(2)}, f"who loaded: {pairs}"


@pytest.mark.unit
def test_id_stream_with_two_workers_in_one_process():
    """An IdStream sharded by worker yields each id once through 2 real DataLoader workers."""
    loader = DataLoader(shards.IdStream(9, rank=0, world_size=1), batch_size=2, num_workers=2)
    ids, workers = [], []
    for sample_ids, worker_ids in loader:
        ids += sample_ids.tolist()
        workers += worker_ids.tolist()
    assert sorted(ids) == list(range(9)), f"ids not covered exactly once: {ids}"
    assert set(workers) == {0, 1}, f"both workers should have loaded items: {workers}"


@pytest.mark.unit
def test_function_sampler_runs_a_named_function():
    """A sampler built from 'module:function' gives the function's indices and follows set_epoch."""
    fn = shards.load_function("feedgpu.distributed.shards:padded_indices")
    sampler = shards.FunctionSampler(fn, 11, rank=1, world_size=2, seed=3)
    reference = DistributedSampler(range(11), num_replicas=2, rank=1, seed=3)
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        reference.set_epoch(epoch)
        assert list(sampler) == list(reference), f"epoch {epoch}: indices differ"
        assert len(sampler) == len(reference), f"epoch {epoch}: lengths differ"


@pytest.mark.unit
@pytest.mark.parametrize("dotted,error", [("no_colon", ValueError),
                                          ("feedgpu.distributed.shards:nope", ValueError),
                                          ("no_such_module_xyz:f", ModuleNotFoundError)])
def test_load_function_errors_name_what_is_wrong(dotted, error):
    """A bad 'module:function' raises an error that quotes it."""
    with pytest.raises(error) as info:
        shards.load_function(dotted)
    assert dotted.split(":")[-1] in str(info.value) or dotted.split(":")[0] in str(info.value), (
        f"the message should name what was asked for: {info.value}")


@pytest.mark.unit
def test_exact_accuracy_counts_each_id_once():
    """A padded duplicate changes the naive mean but not the exact one; a conflict raises."""
    pairs = [(i, shards.is_correct(i)) for i in [0, 1, 2, 3, 4, 0]]  # id 0 (wrong) padded twice
    naive = sum(c for _, c in pairs) / len(pairs)
    exact, distinct = shards.exact_accuracy(pairs)
    assert distinct == 5, f"expected 5 distinct ids, got {distinct}"
    assert exact == pytest.approx(3 / 5), f"ids 1, 2, 4 of 0..4 are right: got {exact}"
    assert naive == pytest.approx(3 / 6), f"the naive mean counts id 0 twice: got {naive}"
    with pytest.raises(ValueError, match="sample 1"):
        shards.exact_accuracy([(1, True), (1, False)])


@pytest.mark.unit
def test_read_seen_builds_one_row_per_sample(tmp_path):
    """read_seen turns rank records into rank, epoch, position, sample_id, worker rows."""
    seen.write_rank(tmp_path, {"rank": 1, "epochs": [{"epoch": 0, "ids": [5, 3], "workers": [1, 0]}]})
    seen.write_rank(tmp_path, {"rank": 0, "epochs": [{"epoch": 0, "ids": [2], "workers": [0]},
                                                     {"epoch": 1, "ids": [4], "workers": [0]}]})
    df = seen.read_seen(tmp_path)
    assert list(df.columns) == ["rank", "epoch", "position", "sample_id", "worker"], list(df.columns)
    assert df.values.tolist() == [[0, 0, 0, 2, 0], [0, 1, 0, 4, 0], [1, 0, 0, 5, 1], [1, 0, 1, 3, 0]], (
        f"rows out of order or wrong:\n{df}")
    assert not list(tmp_path.glob("*.tmp")), "a temporary file was left behind"


@pytest.mark.unit
def test_read_ranks_without_records_says_so(tmp_path):
    """An empty run folder raises FileNotFoundError naming the folder."""
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        seen.read_ranks(tmp_path)


@pytest.mark.unit
def test_torchrun_command_for_one_and_several_machines():
    """One machine: --standalone. Several: one identical c10d command, or a static rank each."""
    one = torchrun_command(args=["--out", "runs/a"])
    assert "--standalone" in one and one[-4:] == ["-m", launch.SCRIPT, "--out", "runs/a"], one
    elastic = [torchrun_command(args=["--out", "o"], nnodes=2, rdzv_endpoint="10.0.0.1:29400")
               for _ in range(2)]
    assert elastic[0] == elastic[1], "every machine runs the same elastic command"
    assert "--rdzv-endpoint=10.0.0.1:29400" in elastic[0] and "--nnodes=2" in elastic[0], elastic[0]
    static = torchrun_command(nnodes=2, node_rank=1, rdzv_endpoint="10.0.0.1:29400")
    assert {"--node-rank=1", "--master-addr=10.0.0.1", "--master-port=29400"} <= set(static), static
    assert torchrun_command("train.py")[-1] == "train.py", "a .py file runs as a script"
    with pytest.raises(ValueError, match="rdzv_endpoint"):
        torchrun_command(nnodes=2)
    with pytest.raises(ValueError, match="node_rank"):
        torchrun_command(nnodes=2, node_rank=2, rdzv_endpoint="h:1")


@pytest.mark.unit
@pytest.mark.skipif(sys.platform == "win32", reason="one start method only")
def test_worker_start_method_is_a_new_process_default_whatever_this_one_set():
    """The ranks are new processes: their workers start as a fresh Python's would, even after
    this process chose another start method (as a notebook's spawn cell does)."""
    script = (
        "import multiprocessing as mp, subprocess, sys\n"
        "fresh = subprocess.run([sys.executable, '-c', 'import multiprocessing as m; print(m.get_start_method())'],\n"
        "                       capture_output=True, text=True, check=True).stdout.strip()\n"
        "mp.set_start_method(next(m for m in mp.get_all_start_methods() if m != fresh), force=True)\n"
        "from feedgpu.distributed.launch import worker_start_method\n"
        "print(fresh, mp.get_start_method(), worker_start_method())\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    fresh, here, ranks = out
    assert here != fresh, f"the test should have changed this process's start method: {out}"
    assert ranks == fresh, f"a fresh process starts workers with {fresh}, worker_start_method says {ranks}"


@pytest.mark.unit
@pytest.mark.skipif(not Path("/proc/sys/net/ipv4/ip_local_port_range").is_file(), reason="Linux's port range")
def test_a_free_port_is_one_the_system_never_hands_out_itself(monkeypatch, tmp_path):
    """A plan's phases bind their ports long after they are chosen: a port outside the range
    Linux gives every outgoing connection is one no other connection can take meanwhile
    (one in that range was, while the course was graded two notebooks at a time). Drawn
    anew after ``random.seed``, as every notebook calls it; where no such port is free, one
    the system chooses, never a port in use."""
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    drawn = []
    for _ in range(20):
        random.seed(0)
        drawn.append(launch.free_port())
    assert all(not low <= port <= high and port >= 1024 for port in drawn), (low, high, drawn)
    assert len(set(drawn)) > 1, f"the same port after each random.seed(0): {drawn}"

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", drawn[0]))
        monkeypatch.setattr(launch, "QUIET_PORTS", range(drawn[0], drawn[0] + 1))
        port = launch.free_port()
        assert port != drawn[0], "the only quiet port is in use"
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free indeed
    everything = tmp_path / "ip_local_port_range"
    everything.write_text("1024\t65535\n")
    monkeypatch.setattr(launch, "EPHEMERAL_RANGE", everything)
    monkeypatch.setattr(launch, "QUIET_PORTS", range(20000, 32768))
    assert launch._quiet_ports() == range(20000, 1024) and launch.free_port() > 0


@pytest.mark.unit
def test_launch_time_limit_allows_for_every_worker_that_imports_torch_again():
    """Each re-importing worker adds the same allowance on top of the base; bad counts raise."""
    base = launch.launch_time_limit_s(0)
    one, five = launch.launch_time_limit_s(1) - base, launch.launch_time_limit_s(5) - base
    assert base > 0 and one > 0, f"a base and an allowance per worker: {base}, {one}"
    assert five == pytest.approx(5 * one), f"5 workers should add 5 allowances: {five} vs {one}"
    assert launch.launch_time_limit_s(2, base_s=0) == pytest.approx(2 * one), "base_s replaces the base"
    with pytest.raises(ValueError):
        launch.launch_time_limit_s(-1)
    with pytest.raises(ValueError):
        launch.launch_time_limit_s(1, base_s=-5.0)


@pytest.mark.unit
@pytest.mark.parametrize("method,workers", [("spawn", 2), (None, 0)])
def test_the_epoch_script_starts_its_workers_as_asked(method, workers):
    """--worker-start-method reaches the DataLoader (which has no context without workers)."""
    if method is not None and method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{method} is not available here")
    argv = ["--out", "unused", "--num-workers", str(workers), "--dataset", "iterable"]
    args = epoch_script.parse_args(argv + (["--worker-start-method", method] if method else []))
    loader, _ = epoch_script.make_loader(args, 0, 1)
    context = loader.multiprocessing_context
    got = context.get_start_method() if context is not None else None
    assert got == method, f"the loader's start method: {got}, asked {method}"


@pytest.mark.unit
def test_report_names_wsl_when_torchrun_lacks_libuv():
    """On native Windows the rendezvous store fails for want of libuv: the report says what to do."""
    stderr = "RuntimeError: use_libuv was requested but PyTorch was built without libuv support, run with USE_LIBUV=0"
    report = launch.LaunchResult(["torchrun"], 1, 2.0, False, stderr=stderr).report()
    assert "WSL" in report and "libuv" in report, report
    assert "WSL" not in launch.LaunchResult(["torchrun"], 1, 2.0, False, stderr="boom").report(), "only then"


SUMMARY = """\
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-01-01_00:00:00
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 101)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 101
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-01-01_00:00:00
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 102)
  error_file: <N/A>
============================================================
"""


@pytest.mark.unit
def test_failed_rank_from_error_files_or_torchrun_summary():
    """The first error file names the failed rank; without any, the rank torchrun did not stop."""
    assert launch._exit_codes(SUMMARY) == {0: -15, 1: 1}, launch._exit_codes(SUMMARY)
    assert launch._failed_rank(SUMMARY, {}) == 1, "rank 0 was only stopped by SIGTERM"
    assert launch._failed_rank("", {0: 10.5, 1: 10.2}) == 1, "rank 1 recorded its error first"
    assert launch._failed_rank("", {}) is None, "no failure, no failed rank"




def evaluate_on_one_process(n_items: int) -> dict[str, float]:
    """The epoch script's evaluation in this process, as the only rank of a gloo group."""
    assert not dist.is_initialized(), "a process group is already open in the test process"
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        args = epoch_script.parse_args(["--out", "unused", "--n-items", str(n_items)])
        return epoch_script.evaluate(args, rank=0, world_size=1)
    finally:
        dist.destroy_process_group()


@pytest.mark.unit
def test_evaluation_on_one_process_is_the_truth():
    """On one rank nothing is padded: the naive and the exact accuracy are both the truth."""
    metrics = evaluate_on_one_process(N_ITEMS)
    truth = sum(shards.is_correct(i) for i in range(N_ITEMS)) / N_ITEMS
    assert metrics["exact_accuracy"] == pytest.approx(truth), metrics
    assert metrics["naive_accuracy"] == pytest.approx(truth), metrics
    assert metrics["exact_count"] == metrics["naive_count"] == N_ITEMS, metrics


# ---------------------------------------------------------------- torchrun, for real
#
# Each launch of torchrun costs seconds (torchrun and every rank import torch), so the
# 2-rank runs of the epoch script share one launch: in each rank, DRIVER runs the script's
# main() once per phase, in order, each writing to its own folder. The last phase hangs
# on purpose, so that launch ends with a failure; the tests of the other phases check that
# theirs finished on every rank.

DRIVER = '''\
"""Run the course's epoch script several times in this rank's process (torch imported once).

argv[1]: JSON list of [name, port, script arguments]. Each run joins its own process group
and destroys it at the end. The first uses the store torchrun set up; a later one cannot
(the previous group's keys are still in it), so rank 0 hosts a fresh store on ``port``.
"""
import json, os, sys

from feedgpu.distributed import epoch_script

for name, port, args in json.loads(sys.argv[1]):
    if port is not None:
        os.environ["MASTER_PORT"] = str(port)
        os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"  # rank 0 hosts the store
    print(f"== phase {name} started", flush=True)
    epoch_script.main(args)
    print(f"== phase {name} finished", flush=True)
'''

STUDENT_SHARDS = '''\
def by_copy(ids, rank, world_size, worker_id, num_workers):
    copy, copies = rank * num_workers + worker_id, world_size * num_workers
    return [i for i in ids if i % copies == copy]
'''

UNEVEN = ["--dataset", "iterable", "--batch-size", "1", "--sync", "ddp", "--epochs", "1"]
HANG_TIMEOUT_S = 8  # gloo: how long the rank with an extra batch waits for the other one
PHASES = {  # name: the epoch script's arguments (--out added); run in this order
    "set_epoch": ["--epochs", "2", "--evaluate"],
    "no_set_epoch": ["--epochs", "2", "--no-set-epoch"],
    "iterable": ["--dataset", "iterable", "--shard", "rank-and-worker", "--num-workers", "2",
                 "--epochs", "1"],
    "student": ["--dataset", "iterable", "--shard-fn", "my_shards:by_copy", "--num-workers", "2",
                "--epochs", "1"],
    "join": [*UNEVEN, "--uneven-fix", "join"],
    "truncate": [*UNEVEN, "--uneven-fix", "truncate"],
    "hang": [*UNEVEN, "--uneven-fix", "none", "--timeout-s", str(HANG_TIMEOUT_S)],  # last: it fails
}


class Run:
    """The shared launch: two torchrun agents ("machines"), one rank each, every phase."""

    def __init__(self, folder: Path, results: list[launch.LaunchResult]):
        self.folder = folder
        self.results = results

    def out(self, phase: str) -> Path:
        return self.folder / "out" / phase

    def report(self) -> str:
        return "\n".join(f"agent {k}: {r.report(40)}" for k, r in enumerate(self.results))

    def rank_stdout(self) -> dict[int, str]:
        """What each global rank printed (each agent runs one rank, its local rank 0)."""
        texts = [text for r in self.results for text in r.rank_stdout.values()]
        by_rank = {}
        for text in texts:
            for rank in range(WORLD):
                if f"rank {rank}: epoch" in text:
                    by_rank[rank] = text
        assert sorted(by_rank) == list(range(WORLD)), f"ranks' output not found:\n{self.report()}"
        return by_rank

    def phase_stdout(self, phase: str, rank: int) -> str:
        """What ``rank`` printed during ``phase``."""
        text = self.rank_stdout()[rank]
        start = f"== phase {phase} started"
        assert start in text, f"rank {rank} never started phase {phase}:\n{self.report()}"
        return text.split(start, 1)[1].split("== phase", 1)[0]

    def finished(self, phase: str) -> Path:
        """Check that every rank finished ``phase``; return its folder."""
        for rank, text in self.rank_stdout().items():
            assert f"== phase {phase} finished" in text, (
                f"rank {rank} did not finish phase {phase}:\n{self.report()}")
        records = seen.read_ranks(self.out(phase))
        assert [r["rank"] for r in records] == list(range(WORLD)), f"{phase}: records {records}"
        assert all("finished_at" in r for r in records), f"{phase}: a rank's record is incomplete"
        return self.out(phase)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    """Launch the phases once: two agents meet at one endpoint, each starts one rank."""
    folder = tmp_path_factory.mktemp("torchrun")
    (folder / "driver.py").write_text(DRIVER)
    (folder / "my_shards.py").write_text(STUDENT_SHARDS)  # imported by name from the run's folder
    phases = [[name, None if k == 0 else launch.free_port(),
               ["--out", str(folder / "out" / name), "--n-items", str(N_ITEMS), *args]]
              for k, (name, args) in enumerate(PHASES.items())]
    endpoint = f"127.0.0.1:{launch.free_port()}"
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: run_torchrun(
            folder / "driver.py", [json.dumps(phases)], nproc_per_node=1, nnodes=2,
            rdzv_endpoint=endpoint, rdzv_id="test", workdir=folder, timeout_s=LAUNCH_S),
            range(2)))
    return Run(folder, results)


@pytest.mark.notebook
def test_same_script_spans_two_machines(run):
    """Two torchrun agents (two "machines" on this host, 1 process each) form one group of 2."""
    out = run.finished("set_epoch")
    records = seen.read_ranks(out)
    assert [(r["rank"], r["world_size"]) for r in records] == [(0, 2), (1, 2)], "one rank per machine"
    assert [r["local_rank"] for r in records] == [0, 0], "each rank is local rank 0 of its machine"


@pytest.mark.notebook
def test_distributed_sampler_covers_every_id_once_per_epoch(run):
    """Each epoch, the ranks see every id, with exactly (W - N mod W) mod W padded duplicates."""
    df = seen.read_seen(run.finished("set_epoch"))
    padding = (WORLD - N_ITEMS % WORLD) % WORLD
    assert sorted(df.epoch.unique()) == [0, 1], f"two epochs expected: {df.epoch.unique()}"
    for epoch, rows in df.groupby("epoch"):
        counts = collections.Counter(rows.sample_id)
        assert set(counts) == set(range(N_ITEMS)), f"epoch {epoch}: ids missing"
        assert sum(c - 1 for c in counts.values()) == padding, f"epoch {epoch}: {counts}"
        for rank, mine in rows.groupby("rank"):
            expected = shards.padded_indices(N_ITEMS, rank, WORLD, epoch=epoch)
            assert mine.sample_id.tolist() == expected, f"rank {rank} epoch {epoch}: not its shard"


@pytest.mark.notebook
def test_startup_of_two_processes_is_measured(run, record_property):
    """Start-up (torchrun to every rank in the process group) is recorded, and comes first."""
    records = seen.read_ranks(run.finished("set_epoch"))
    started_at = min(r.started_at for r in run.results)
    stage_s = {stage: max(r[f"{stage}_at"] for r in records) - started_at
               for stage in ("started", "imported", "ready", "finished")}
    record_property("torchrun_2proc_startup_s", round(stage_s["ready"], 2))
    print(f"\n2-process torchrun start-up: ranks started {stage_s['started']:.2f} s, imported "
          f"{stage_s['imported']:.2f} s, in the process group {stage_s['ready']:.2f} s "
          f"(first run finished {stage_s['finished']:.2f} s)")
    assert 0 < stage_s["started"] <= stage_s["imported"] <= stage_s["ready"] < stage_s["finished"], (
        f"start-up stages out of order: {stage_s}")


@pytest.mark.notebook
def test_order_changes_between_epochs_only_with_set_epoch(run):
    """With set_epoch each epoch has a new order; without it every epoch repeats epoch 0."""
    for phase, should_change in (("set_epoch", True), ("no_set_epoch", False)):
        df = seen.read_seen(run.finished(phase))
        for rank, rows in df.groupby("rank"):
            orders = [e.sample_id.tolist() for _, e in rows.groupby("epoch")]
            assert len(orders) == 2, f"{phase}, rank {rank}: two epochs expected: {orders}"
            assert (orders[0] != orders[1]) == should_change, (
                f"rank {rank}, {phase}: epochs {orders}")


@pytest.mark.notebook
def test_exact_evaluation_is_the_same_on_one_and_two_ranks(run):
    """Padding changes the naive accuracy on 2 ranks; the exact one equals the 1-rank answer."""
    two = [r["metrics"] for r in seen.read_ranks(run.finished("set_epoch"))]
    one = evaluate_on_one_process(N_ITEMS)
    truth = sum(shards.is_correct(i) for i in range(N_ITEMS)) / N_ITEMS
    assert one["exact_accuracy"] == pytest.approx(truth) == one["naive_accuracy"], one
    assert two[0] == two[1], f"the ranks disagree: {two}"
    assert two[0]["exact_accuracy"] == pytest.approx(one["exact_accuracy"]), (
        f"exact on 2 ranks {two[0]} vs 1 rank {one}")
    assert two[0]["exact_count"] == one["exact_count"] == N_ITEMS, f"distinct ids: {two[0]}"
    assert two[0]["naive_count"] == N_ITEMS + 1, f"padding should add one sample: {two[0]}"
    assert two[0]["naive_accuracy"] != pytest.approx(truth), f"padding should move it: {two[0]}"


@pytest.mark.notebook
@pytest.mark.parametrize("phase", ["iterable", "student"])
def test_iterable_dataset_on_two_ranks_and_two_workers(run, phase):
    """Sharded by rank and worker (the course's function, or a student's imported by name in
    every rank and worker), each id is seen once, and every worker of every rank loaded some."""
    df = seen.read_seen(run.finished(phase))
    counts = collections.Counter(df.sample_id)
    assert counts == {i: 1 for i in range(N_ITEMS)}, f"{phase}: {counts}"
    pairs = set(zip(df["rank"], df.worker))
    assert pairs == {(r, w) for r in range(WORLD) for w in range(2)}, f"who loaded: {pairs}"


@pytest.mark.notebook
@pytest.mark.parametrize("fix,steps,ids_seen", [("join", [6, 5], N_ITEMS), ("truncate", [5, 5], 10)])
def test_uneven_shards_fixed(run, fix, steps, ids_seen):
    """11 ids on 2 ranks, a DDP step per batch: Join runs every batch, truncation stops together."""
    out = run.finished(fix)
    records = seen.read_ranks(out)
    assert [r["epochs"][0]["steps"] for r in records] == steps, f"--uneven-fix {fix}: steps per rank"
    assert seen.read_seen(out).sample_id.nunique() == ids_seen, f"--uneven-fix {fix}"


@pytest.mark.notebook
def test_uneven_shards_without_fix_hang_until_the_timeout(run):
    """Rank 0's extra batch waits for a rank that is at the barrier: the gloo timeout ends it,
    every rank's process stops, and nothing of the launch is left running."""
    for phase in PHASES:
        if phase != "hang":
            run.finished(phase)  # every phase before it ran to its end
    assert "5 samples in 5 steps; waiting" in run.phase_stdout("hang", 1), (
        f"rank 1 should have finished its 5 batches:\n{run.report()}")
    for rank in range(WORLD):
        assert "== phase hang finished" not in run.rank_stdout()[rank], f"rank {rank} did not hang"
    assert all(not r.ok and not r.timed_out for r in run.results), (
        f"a rank should have failed before the launcher's time limit:\n{run.report()}")
    assert all(r.failed_rank is not None for r in run.results), run.report()
    errors = [e for r in run.results for e in r.rank_errors.values()]
    assert any("Timed out" in e for e in errors), f"no gloo timeout:\n{run.report()}"
    pids = [r["pid"] for r in seen.read_ranks(run.out("set_epoch"))]
    for result in run.results:
        left = marked_processes(result.launch_id)
        assert not left, f"processes of the launch still running: {[p.pid for p in left]}"
    assert not any(alive(p) for p in pids), f"a rank's process survived: {pids}"


STUBBORN_RANK = """\
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL stops this rank
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                         start_new_session=True)  # a helper that escaped into its own session
print(f"rank {os.environ['RANK']} child {child.pid} at {time.time()}", flush=True)
time.sleep(300)
"""
STUBBORN_LIMIT_S = 20  # the launcher's time limit: torchrun must have started both ranks by then


@pytest.fixture(scope="module")
def failed_launches(tmp_path_factory) -> dict[str, launch.LaunchResult]:
    """The two launches that fail, side by side: a rank that crashes, and ranks that ignore
    SIGTERM until the launcher's time limit (they sleep: the crash has the cores to itself
    once torchrun has started them)."""
    folder = tmp_path_factory.mktemp("failures")
    (folder / "stubborn.py").write_text(STUBBORN_RANK)
    with ThreadPoolExecutor(2) as pool:
        stubborn = (None if sys.platform == "win32" else  # POSIX signals
                    pool.submit(run_torchrun, folder / "stubborn.py",
                                timeout_s=STUBBORN_LIMIT_S, grace_s=1))
        crash = pool.submit(run_torchrun, args=["--out", str(folder / "crash"), "--crash-rank", "1",
                                                "--num-workers", "2"],
                            nproc_per_node=WORLD, timeout_s=LAUNCH_S)
        results = {"crash": crash.result(), "crash_out": folder / "crash"}
        if stubborn is not None:
            results["stubborn"] = stubborn.result()
    return results


@pytest.mark.notebook
def test_crashing_rank_is_named_with_its_error(failed_launches):
    """A rank that raises is reported by number with its exception; check() raises; nothing stays."""
    result = failed_launches["crash"]
    assert result.returncode not in (0, None) and not result.timed_out, result.report()
    assert result.failed_rank == 1, f"rank 1 failed first:\n{result.report()}"
    assert "planned failure on rank 1" in result.report(), result.report()
    assert "planned failure on rank 1" in result.rank_stderr[1], result.rank_stderr
    assert result.rank_exitcodes.get(1) == 1, f"rank 1 exits with status 1: {result.rank_exitcodes}"
    with pytest.raises(LaunchError, match="rank 1"):
        result.check()
    assert_nothing_left(result, failed_launches["crash_out"])


@pytest.mark.notebook
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_time_limit_stops_every_process_of_the_launch(failed_launches):
    """Past timeout_s, ranks that ignore SIGTERM and their escaped children are all killed."""
    result = failed_launches["stubborn"]
    assert result.timed_out and not result.ok, result.report()
    started = {int(line.split()[1]): (int(line.split()[3]), float(line.split()[-1]) - result.started_at)
               for text in result.rank_stdout.values() for line in text.splitlines()}
    assert sorted(started) == list(range(WORLD)), (
        f"both ranks should have started within the {STUBBORN_LIMIT_S} s limit: {result.rank_stdout}")
    children = [pid for pid, _ in started.values()]
    print(f"\nstubborn ranks started {max(s for _, s in started.values()):.1f} s after the launch")
    assert not any(alive(pid) for pid in children), f"a rank's child survived: {children}"
    assert result.leftovers >= WORLD, f"ranks and children should have been stopped: {result.leftovers}"
    assert_nothing_left(result)
