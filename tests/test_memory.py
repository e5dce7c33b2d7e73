"""The memory probe: RSS, USS and PSS per process, the roles of a DataLoader's processes,
the background thread, the summaries and the plot."""

from __future__ import annotations

import gc
import math
import mmap
import os
import multiprocessing
import subprocess
import sys
import threading
import time

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from feedgpu.measure import memory  # noqa: E402
from feedgpu.measure.memory import (  # noqa: E402
    COLUMNS,
    EXTRA_KINDS,
    MB,
    MemoryProbe,
    MetricUnavailable,
    available_kinds,
    memory_of,
    object_regions,
    page_use,
    peak_total_mb,
    probe_overhead,
    process_roles,
    read_memory,
    sample_totals_mb,
    summarize,
    worker_growth_mb,
)
from feedgpu.plots import plot_memory  # noqa: E402
from feedgpu.workloads.records import (  # noqa: E402
    PidDataset,
    RecordArrayDataset,
    RecordListDataset,
    make_python_records,
)

pytestmark = pytest.mark.unit

needs_uss = pytest.mark.skipif("uss" not in available_kinds(), reason="no USS on this platform")
needs_pss = pytest.mark.skipif("pss" not in available_kinds(), reason="no PSS on this platform")
needs_fork = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                                reason="no fork on this platform")
needs_pagemap = pytest.mark.skipif(not os.path.exists("/proc/self/pagemap"), reason="no /proc/<pid>/pagemap here")

# A plain Python (no torch: it starts fast and small) that allocates and touches N MB
# when told to, and answers each step on stdout.
ALLOCATE = """
import sys
print("ready", flush=True)
sys.stdin.readline()
block = bytearray(b"\\x01") * (int(sys.argv[1]) * 2**20)   # every page written
print("allocated", flush=True)
sys.stdin.readline()
"""

# A parent that touches N MB, then forks two children that only wait: the three share
# the block's pages until the test closes their stdin.
SHARE = """
import os, sys
block = bytearray(b"\\x01") * (int(sys.argv[1]) * 2**20)
children = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        sys.stdin.read()
        os._exit(0)
    children.append(pid)
print(*children, flush=True)
sys.stdin.read()
for pid in children:
    os.waitpid(pid, 0)
"""


def _start(script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def _stop(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    proc.wait(timeout=60)
    proc.stdout.close()


def _probe_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "feedgpu-memory-probe"]


@needs_uss
def test_memory_of_uss_grows_by_what_a_process_touches():
    """A process that allocates and writes N MB grows its USS by about N MB."""
    n_mb = 64
    proc = _start(ALLOCATE, str(n_mb))
    try:
        assert proc.stdout.readline().strip() == "ready", "the child did not start"
        before = memory_of(proc.pid, "uss")
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "allocated", "the child did not allocate"
        after = memory_of(proc.pid, "uss")
    finally:
        _stop(proc)
    growth_mb = (after - before) / MB
    assert 0.8 * n_mb <= growth_mb <= 1.25 * n_mb, (
        f"USS grew by {growth_mb:.1f} MB after touching {n_mb} MB (expected about {n_mb})")


@needs_pss
@needs_fork
def test_rss_counts_a_shared_block_per_process_pss_splits_it():
    """Forked children sharing a block: RSS counts it in each, PSS once across the family."""
    n_mb = 96
    proc = _start(SHARE, str(n_mb))
    try:
        children = [int(p) for p in proc.stdout.readline().split()]
        assert len(children) == 2, f"expected two children, the parent printed {children}"
        family = [proc.pid, *children]
        rss_mb = [read_memory(pid).rss / MB for pid in family]
        pss_mb = [read_memory(pid).pss / MB for pid in family]
        summed_pss_mb = memory_of(family, "pss") / MB
    finally:
        _stop(proc)
    for pid, rss, pss in zip(family, rss_mb, pss_mb):
        assert rss >= 0.9 * n_mb, f"process {pid}: RSS {rss:.1f} MB should count the {n_mb} MB block"
        assert pss <= 0.5 * n_mb, f"process {pid}: PSS {pss:.1f} MB should count a third of the block"
    assert 0.9 * n_mb <= summed_pss_mb <= 1.5 * n_mb, (
        f"the family's PSS sums to {summed_pss_mb:.1f} MB; one copy of the block is {n_mb} MB "
        "(plus three small interpreters)")
    assert sum(rss_mb) >= 2.5 * summed_pss_mb, f"RSS sum {sum(rss_mb):.1f} MB should count the block thrice"


def test_memory_of_sums_and_skips_processes_that_are_gone():
    """memory_of adds up processes (pids or psutil processes); an ended process counts 0."""
    import psutil

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=60)
    me = psutil.Process()
    alone = memory_of(me, "rss")
    assert alone > 0, "this process should have some resident memory"
    with_gone = memory_of([me.pid, proc.pid], "rss")
    assert 0.5 * alone <= with_gone <= 2 * alone, (
        f"an ended process should count 0: {with_gone} bytes vs {alone} for this process alone")
    with pytest.raises(ValueError, match="kind must be one of"):
        memory_of(me, "vms")


def test_memory_of_without_pss_raises_or_falls_back(monkeypatch):
    """Where a platform has no PSS (macOS, Windows), memory_of says so or uses the fallback."""
    monkeypatch.setattr(memory, "_AVAILABLE", ("rss", "uss"))
    with pytest.raises(MetricUnavailable, match="fallback='rss'"):
        memory_of(1, "pss")
    rss = memory_of([], "pss", fallback="rss")
    assert rss == 0, f"no processes should sum to 0 bytes, got {rss}"


@needs_pss
def test_read_memory_is_consistent():
    """One reading of this process: 0 < USS <= PSS <= RSS."""
    m = read_memory(os.getpid())
    assert m is not None and 0 < m.uss <= m.pss <= m.rss, f"expected 0 < USS <= PSS <= RSS, got {m}"


@pytest.mark.skipif("pss_anon" not in available_kinds(extra=True), reason="no Pss_Anon in smaps_rollup here")
def test_pss_anon_is_the_anonymous_part_of_pss():
    """Pss_Anon: at most PSS, and it counts a block this process writes (anonymous memory)."""
    assert "pss_anon" not in available_kinds(), "extra kinds only when asked for"
    before = read_memory(os.getpid(), ("pss_anon",))
    block = bytearray(b"\x01") * (64 * 2**20)  # every page written: 64 MB of anonymous memory
    after = read_memory(os.getpid(), ("pss_anon",))
    assert 0 < before.pss_anon <= before.pss, f"expected 0 < Pss_Anon <= PSS, got {before}"
    grew = (after.pss_anon - before.pss_anon) / MB
    assert 56 <= grew <= 72, f"64 MB written should add about 64 MB of Pss_Anon, got {grew:.1f}"
    assert memory_of(os.getpid(), "pss_anon") > 0, "memory_of knows the extra kind"
    del block


@pytest.mark.skipif("pss_anon" not in available_kinds(extra=True), reason="no Pss_Anon in smaps_rollup here")
def test_probe_adds_a_column_for_each_extra_kind():
    """kinds with 'pss_anon': its column follows COLUMNS, at most pss_mb; without it, COLUMNS only."""
    assert EXTRA_KINDS == ("pss_anon",), EXTRA_KINDS
    with MemoryProbe(interval_s=0.01, kinds=("rss", "uss", "pss", "pss_anon")) as probe:
        time.sleep(0.03)
    table = probe.table()
    assert tuple(table.columns) == COLUMNS + ("pss_anon_mb",), f"columns {tuple(table.columns)}"
    assert table["pss_anon_mb"].notna().all() and (table["pss_anon_mb"] <= table["pss_mb"]).all(), (
        f"pss_anon_mb should be read, and at most pss_mb: {table[['pss_mb', 'pss_anon_mb']]}")
    assert summarize(table, "pss_anon")["peak_mb"].gt(0).all(), "summarize knows the extra column"
    with pytest.raises(ValueError, match="kind must be one of"):
        MemoryProbe(kinds=("rss", "pss_file"))


@needs_fork
def test_probe_finds_exactly_the_loaders_workers():
    """With num_workers=2 the table has exactly the two worker pids the batches name."""
    loader = DataLoader(PidDataset(24), batch_size=2, num_workers=2,
                        multiprocessing_context="fork")
    built_by: set[int] = set()
    with MemoryProbe(interval_s=0.02) as probe:
        for batch in probe.watch(loader):
            built_by.update(int(p) for p in batch)
            time.sleep(0.01)
    table = probe.table()
    workers = set(table.loc[table["role"] == "worker", "process"])
    assert workers == built_by, f"probe's workers {workers} != pids that built the batches {built_by}"
    mains = set(table.loc[table["role"] == "main", "process"])
    assert mains == {os.getpid()}, f"the main rows should be this process, got {mains}"


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_process_roles_tells_helpers_from_workers(method):
    """With spawn or forkserver, multiprocessing's children are workers; its resource
    tracker and forkserver are 'other'."""
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} here")
    context = multiprocessing.get_context(method)
    # time.sleep as the target: the children start without importing torch
    children = [context.Process(target=time.sleep, args=(60,)) for _ in range(2)]
    for child in children:
        child.start()
    try:
        for _ in range(200):  # until both run their own program (spawn's exec is not instant)
            roles = process_roles()
            if all(roles.get(child.pid) == "worker" for child in children):
                break
            time.sleep(0.05)
    finally:
        for child in children:
            child.terminate()
            child.join(timeout=30)
    workers = {pid for pid, role in roles.items() if role == "worker"}
    assert workers == {child.pid for child in children}, f"{method}: workers should be the children: {roles}"
    others = [pid for pid, role in roles.items() if role == "other"]
    assert others, f"{method}: the resource tracker (and forkserver) should be 'other': {roles}"
    assert roles[os.getpid()] == "main", f"this process should be 'main': {roles}"


def test_probe_stops_its_thread_and_lets_exceptions_through():
    """Leaving the with-block stops the thread, also when the block raises (and the error goes on)."""
    before = len(_probe_threads())
    with MemoryProbe(interval_s=0.01) as probe:
        assert probe.running, "the probe's thread should run inside the with-block"
        time.sleep(0.05)
    assert not probe.running and len(_probe_threads()) == before, "the thread should be gone after the block"
    with pytest.raises(KeyError, match="from the loop"):
        with MemoryProbe(interval_s=0.01) as probe:
            raise KeyError("from the loop")
    assert not probe.running and len(_probe_threads()) == before, "the thread should be gone after an error"


def test_probe_reports_a_failure_of_its_thread(monkeypatch):
    """If sampling fails in the background, stop() raises it (chained) and the thread is gone."""
    probe = MemoryProbe(interval_s=0.005).start()

    def broken(pid=None):
        raise OSError("no /proc today")

    monkeypatch.setattr(memory, "process_roles", broken)
    time.sleep(0.05)
    with pytest.raises(RuntimeError, match="no /proc today") as caught:
        probe.stop(final_sample=False)
    assert isinstance(caught.value.__cause__, OSError), "the thread's error should be the cause"
    assert not probe.running, "the thread should have ended"


def test_watch_passes_batches_through():
    """probe.watch yields the loader's batches unchanged, with or without len()."""
    with MemoryProbe(interval_s=60) as probe:  # the thread stays asleep: only start and watch sample
        with_len = list(probe.watch([1, 2, 3]))
        after_len = probe.samples
        without_len = list(probe.watch(iter([4, 5])))
        after_iter = probe.samples
    assert with_len == [1, 2, 3] and without_len == [4, 5], "watch should not change the batches"
    assert after_len == 2, f"start and the last batch should make 2 samples, got {after_len}"
    assert after_iter == 2, f"without len() watch cannot know the last batch, yet sampled ({after_iter})"


def test_probe_table_has_the_documented_columns():
    """The table: the columns of COLUMNS, one main process, non-decreasing time, values in MB."""
    with MemoryProbe(interval_s=0.01, max_overhead=1.0) as probe:
        time.sleep(0.1)
    table = probe.table()
    assert tuple(table.columns) == COLUMNS, f"columns {tuple(table.columns)} != {COLUMNS}"
    assert len(table) >= 2, f"expected a sample at start and at stop, got {len(table)} rows"
    assert table["time_s"].is_monotonic_increasing, "time_s should not decrease down the table"
    assert set(table["role"]) <= {"main", "worker", "other"}, f"unknown roles {set(table['role'])}"
    main = table[table["role"] == "main"]
    rss_mb = memory_of(os.getpid(), "rss") / MB
    assert main["rss_mb"].between(0.5 * rss_mb, 2 * rss_mb).all(), (
        f"rss_mb should be in MB (this process has {rss_mb:.0f} MB): {main['rss_mb'].tolist()}")


def test_probe_with_rss_only_leaves_uss_and_pss_empty():
    """kinds=('rss',) reads only RSS: the other columns are NaN."""
    with MemoryProbe(interval_s=0.01, kinds=("rss",)) as probe:
        time.sleep(0.03)
    table = probe.table()
    assert table["rss_mb"].notna().all(), "rss_mb should always be read"
    assert table["uss_mb"].isna().all() and table["pss_mb"].isna().all(), "uss/pss should not be read"


def test_probe_keeps_its_cpu_within_its_share():
    """Asked for a sample every 5 ms, the probe stretches its interval to stay near max_overhead."""
    before = time.thread_time()
    read_memory(os.getpid())
    sample_cpu_s = time.thread_time() - before  # one sample of this process (torch is imported)
    start = time.perf_counter()
    with MemoryProbe(interval_s=0.005, max_overhead=0.05) as probe:
        time.sleep(1.0)
    elapsed = time.perf_counter() - start
    allowed = 0.05 * elapsed + 2 * sample_cpu_s
    assert probe.cpu_s <= 1.5 * allowed, (
        f"the probe's thread used {probe.cpu_s * 1e3:.1f} ms of CPU in {elapsed:.2f} s; "
        f"its share is {allowed * 1e3:.1f} ms")
    assert probe.samples < 0.5 * elapsed / 0.005, f"{probe.samples} samples: the interval was not stretched"


def test_probe_rejects_bad_settings():
    """interval_s must be positive, kinds known, max_overhead a share of one core."""
    with pytest.raises(ValueError, match="interval_s"):
        MemoryProbe(interval_s=0)
    with pytest.raises(ValueError, match="kind must be one of"):
        MemoryProbe(kinds=("heap",))
    with pytest.raises(ValueError, match="max_overhead"):
        MemoryProbe(max_overhead=0)


def _table() -> pd.DataFrame:
    """Two samples of a main process and two workers, and one of a helper."""
    rows = [
        (10, "main", 0.0, 500.0, 300.0, 320.0),
        (11, "worker", 0.0, 400.0, 10.0, 60.0),
        (12, "worker", 0.0, 400.0, 12.0, 61.0),
        (13, "other", 0.0, 12.0, 6.0, 7.0),
        (10, "main", 1.0, 500.0, 290.0, 300.0),
        (11, "worker", 1.0, 420.0, 50.0, 90.0),
        (12, "worker", 1.0, 430.0, 42.0, 85.0),
    ]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def test_summaries_of_a_known_table():
    """Growth is last minus first per worker; peak total sums one sample's processes."""
    table = _table()
    summary = summarize(table, "uss")
    assert summary.loc[11, "growth_mb"] == 40.0 and summary.loc[12, "growth_mb"] == 30.0, (
        f"worker growth should be 40 and 30 MB, got {summary['growth_mb'].to_dict()}")
    assert summary.loc[13, "samples"] == 1, "the helper was sampled once"
    assert worker_growth_mb(table) == 70.0, f"summed worker USS growth {worker_growth_mb(table)} != 70"
    assert peak_total_mb(table, "pss") == 475.0, f"peak summed PSS {peak_total_mb(table, 'pss')} != 475"
    assert peak_total_mb(table, "pss_mb", roles=("other",)) == 7.0, "the helper alone peaks at 7 MB"
    totals = sample_totals_mb(table, "pss")
    assert totals.to_dict() == {0.0: 441.0, 1.0: 475.0}, f"main + workers at each sample: {totals.to_dict()}"
    gappy = table.assign(pss_mb=table["pss_mb"].where(table["process"] != 12))  # worker 12 unread
    assert sample_totals_mb(gappy, "pss").to_dict() == {0.0: 380.0, 1.0: 390.0}, "NaN left out of the sums"
    assert sample_totals_mb(gappy, "pss", complete=3).empty, "no sample read all three processes"
    assert sample_totals_mb(table, "rss", ["worker"], complete=2).to_dict() == {0.0: 800.0, 1.0: 850.0}
    assert peak_total_mb(table.assign(pss_mb=math.nan)) == 0.0, "no values: 0.0"


@needs_fork
@needs_uss
def test_probe_sees_copy_on_write_of_a_list_but_not_of_an_array():
    """Forked workers reading a list of Python objects copy it; reading a numpy array does not."""
    n = 2_000_000  # ~61 MB of int objects: a worker's own few MB of noise stay small beside it
    records = make_python_records(n)
    array = np.asarray(records, dtype=np.int64)
    growth = {}
    # The collector of a forked worker writes to every object of the test process it visits,
    # copying their pages whatever the dataset (the more of them, the more: the tests before
    # this one leave many): frozen, it leaves them alone, and only the reads are counted.
    gc.collect()
    gc.freeze()
    try:
        for name, dataset in (("list", RecordListDataset(records)), ("array", RecordArrayDataset(array))):
            loader = DataLoader(dataset, batch_size=25_000, num_workers=2, collate_fn=len,
                                multiprocessing_context="fork")
            with MemoryProbe(interval_s=0.02) as probe:
                for _ in probe.watch(loader):
                    pass
            growth[name] = worker_growth_mb(probe.table())
    finally:
        gc.unfreeze()
    objects_mb = n * 32 / MB  # an int object takes 32 bytes of the allocator's memory
    assert growth["list"] >= 0.5 * objects_mb, (
        f"workers reading the list should copy much of its {objects_mb:.0f} MB, grew {growth['list']:.1f} MB")
    assert growth["array"] <= 0.25 * growth["list"], (
        f"workers reading the array grew {growth['array']:.1f} MB, the list version {growth['list']:.1f} MB")


def test_object_regions_lists_objects_and_array_data():
    """Each object of a container's tree at its address, an array's or tensor's data, shared singletons left out."""
    import torch

    array, tensor = np.arange(1000, dtype=np.int64), torch.arange(500, dtype=torch.int64)
    caption, box = "a dog " * 20, [12.5, 40.25]
    record = {"caption": caption, "bbox": box, "small": 7, "none": None}
    regions = dict(object_regions([record, array, tensor, record]))
    assert regions[array.__array_interface__["data"][0]] == 8000, "the array's data, all 8000 bytes"
    assert regions[tensor.untyped_storage().data_ptr()] == 4000, "the tensor's storage"
    assert regions[id(caption)] == sys.getsizeof(caption), "a string: its whole object"
    assert all(id(v) in regions for v in box), "the floats in the list"
    assert sum(address <= id(record) < address + size for address, size in regions.items()) == 1, (
        "the dict once (it appears twice in the list), with the collector's header before it")
    assert id(7) not in regions and id(None) not in regions, "small ints and None belong to no dataset"


@needs_pagemap
@needs_fork
def test_page_use_counts_what_a_forked_child_shares_and_copies():
    """After a fork every page of a block is shared; the pages the child writes become its own."""
    page = os.sysconf("SC_PAGE_SIZE")
    # a mapping of its own: page-aligned, so no page of it is shared with a neighbour on the
    # heap that another thread of this process might write meanwhile (which would make the
    # child's copy of that page its own too)
    mapping = mmap.mmap(-1, 4 * 2**20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    block = np.frombuffer(mapping, dtype=np.int64)
    block[:] = 1  # every page written
    regions = [(block.__array_interface__["data"][0], block.nbytes)]
    mine = page_use(regions)
    assert mine.present == mine.total >= block.nbytes, f"every page of the block is in memory here: {mine}"
    read, write = os.pipe()
    answer, report = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: writes one value in each of the first 100 pages, then waits
        try:
            os.read(read, 1)
            block[: 100 * page // 8: page // 8] = 2
            os.write(report, b"x")
            os.read(read, 1)
        finally:
            os._exit(0)
    try:
        shared = page_use(regions, pid)
        os.write(write, b"w")
        os.read(answer, 1)
        copied = page_use(regions, pid)
    finally:
        os.write(write, b"q")
        os.waitpid(pid, 0)
    assert shared.present >= block.nbytes and shared.alone == 0, f"right after the fork, all shared: {shared}"
    assert copied.alone == 100 * page, f"the 100 pages the child wrote are its own copies: {copied}"
    assert page_use([]) == (0, 0, 0), "no regions, no pages"


def test_plot_memory_draws_one_line_per_process():
    """plot_memory: one labelled line per process, axes labelled, an Axes returned."""
    ax = plot_memory(_table(), metric="uss")
    try:
        labels = [line.get_label() for line in ax.get_lines()]
        assert labels == ["main 10", "worker 11", "worker 12", "other 13"], f"lines: {labels}"
        assert ax.get_legend() is not None, "the plot should have a legend"
        assert ax.get_ylabel() == "USS (MB)" and "(s)" in ax.get_xlabel(), "axes should be labelled"
    finally:
        plt.close(ax.figure)
    no_pss = _table().assign(pss_mb=math.nan)
    with pytest.raises(ValueError, match="no PSS values"):
        plot_memory(no_pss, metric="pss")


def test_plot_memory_grid_writes_each_value_in_its_cell():
    """plot_memory_grid: the table's rows and columns as ticks, each value written, one colour scale."""
    from feedgpu.plots import plot_memory_grid

    cells = pd.DataFrame([[57.4, 2.0], [-0.3, 19.0]], index=["fork", "spawn"], columns=["list of dicts", "one buffer"])
    ax = plot_memory_grid(cells, vmax=100, title="held")
    try:
        assert [t.get_text() for t in ax.texts] == ["57", "2", "0", "19"], "values row by row, no '-0'"
        assert [t.get_text() for t in ax.get_yticklabels()] == ["fork", "spawn"], "rows as y ticks"
        assert [t.get_text() for t in ax.get_xticklabels()] == ["list\nof dicts", "one\nbuffer"], "columns as x ticks"
        assert ax.images[0].get_clim() == (0, 100), "the colour scale asked for"
        assert ax.get_title() == "held"
    finally:
        plt.close(ax.figure)


def test_probe_overhead_reports_paired_rounds():
    """probe_overhead returns one ratio per round and the median overhead (no time limit checked)."""
    found = probe_overhead(1, items=16, seconds_per_item=0.002, num_workers=1)
    assert len(found["ratios"]) == 1 and len(found["with_s"]) == len(found["without_s"]) == 1, (
        f"one round should give one pair: {found}")
    assert math.isclose(found["overhead"], found["ratios"][0] - 1), "overhead = median ratio - 1"
    assert found["samples"] >= 2, f"a probed epoch has a first and a last sample, got {found['samples']}"


def test_a_family_without_pss_counts_its_shared_pages_once(monkeypatch):
    """macOS and Windows have no PSS. A kernel with 300 MB its 2 forked workers share: RSS
    says 1,150 MB, the family uses 550 (what each holds alone, and the 300 MB once); the
    grader's sandbox must judge by the second."""
    from feedgpu.workflows.grading import sandbox

    mb = 2**20
    fake = {1: memory.Memory(rss=500 * mb, uss=200 * mb, pss=None),
            2: memory.Memory(rss=320 * mb, uss=20 * mb, pss=None),
            3: memory.Memory(rss=330 * mb, uss=30 * mb, pss=None)}
    monkeypatch.setattr(memory, "available_kinds", lambda extra=False: ("rss", "uss"))
    monkeypatch.setattr(memory, "read_memory", lambda pid, kinds=("rss",): fake.get(int(pid)))
    assert memory.memory_of([1, 2, 3], "rss") == 1150 * mb
    assert memory.family_memory_of([1, 2, 3, 4]) == 550 * mb, "a process gone counts nothing"
    assert sandbox._memory_mb([1, 2, 3], proportional=True) == 550
    monkeypatch.setattr(memory, "available_kinds", lambda extra=False: ("rss",))
    assert memory.family_memory_of([1, 2, 3]) == 1150 * mb, "nothing better than RSS: the upper bound"
