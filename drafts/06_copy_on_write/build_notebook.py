"""Build solutions/06_copy_on_write/06_copy_on_write.ipynb (the nbgrader source)."""
import pathlib

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = []


def nbg(grade_id, *, grade=False, solution=False, locked=False, points=None):
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3,
            "solution": solution, "task": False}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def md(text, **kw):
    cells.append(new_markdown_cell(text.strip("\n"), metadata=nbg(**kw) if kw else {}))


def code(text, **kw):
    cells.append(new_code_cell(text.strip("\n"), metadata=nbg(**kw) if kw else {}))


def answer(grade_id, text):
    code(text, grade_id=grade_id, solution=True)


def test(grade_id, points, text):
    code(text, grade_id=grade_id, grade=True, locked=True, points=points)


md("""
# 06 · Copy-on-write: why DataLoader workers seem to eat memory

**Time needed:** about 45 minutes. Running every cell takes about a minute on 2 cores
(under 2 minutes when the kernel's default start method is *spawn*), and at most ~2.5 GB
of memory.

A classic bug report (PyTorch issue #13246, and Yuxin Wu's post *Demystify RAM usage in
multi-process data loaders*): a detection model loads its annotations into a Python list,
training starts with 8 workers, and memory climbs all epoch until the machine swaps.
Nothing leaks. Each forked worker slowly takes its own copy of the list, because in
Python even *reading* an object writes to it. In this notebook you

1. watch a 300 MB list of COCO-like annotations being copied into 2 workers over one
   epoch, and see why the usual number, **RSS**, misleads, while **USS** and **PSS** tell
   the truth;
2. write the function that gives a family of processes' true memory from a probe table;
3. write the fix that detectron2 uses, every record pickled into **one** numpy buffer with
   an offsets array, and prove with the probe that it stops the copying;
4. fill a 3 × 3 grid {fork, spawn, forkserver} × {list, numpy arrays, one buffer} and see
   what changes when workers are not forked (the default on macOS, Windows, and on Linux
   from Python 3.14).

**Grading.** Parts B and C are graded automatically (16 points: the tests you see, and
hidden ones). The reflection at the end is read by a person (3 points). Cells headed
*Your prediction* are not graded: write in them before you run the experiment that
follows, then compare.
""", grade_id="header", locked=True)

md("""
## Setup

One cell imports everything; the next sets every number you might want to change and
prints it, so a saved notebook records the settings of its run.
""")

code("""
import gc
import multiprocessing as mp
import pickle
import sys
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import psutil
from torch.utils.data import DataLoader

from feedgpu.measure.memory import MB, MemoryProbe, available_kinds, read_memory, summarize
from feedgpu.plots import plot_memory
from feedgpu.workloads.annotations import AnnotationArrayDataset, annotations_to_arrays, make_annotations
from feedgpu.workloads.records import (RecordListDataset, SerializedRecordDataset, collate_touch,
                                       make_python_records)
""", grade_id="imports", locked=True)

code("""
SEED = 0                   # the annotations are made from it: the same records on every machine
N_RECORDS = 200_000        # main experiment: ~300 MB of Python objects
GRID_RECORDS = 50_000      # the 3 x 3 grid: ~80 MB, so nine epochs stay cheap
WORKERS = 2
BATCH_SIZE = 1_000
CONTEXTS = ["fork", "spawn", "forkserver"]
FORK = "fork" if "fork" in mp.get_all_start_methods() else None   # None on native Windows
INTERVAL_S = 0.05          # the probe's sampling interval; it stretches it to keep its CPU share
MAX_OVERHEAD = 0.2         # the probe may use 20% of a core: denser curves (we time nothing here)
KINDS = available_kinds()  # ("rss", "uss", "pss") on Linux; no PSS on macOS and Windows

print("python:               ", sys.version.split()[0])
print("cores:                ", psutil.cpu_count(), "| memory (GB):", round(psutil.virtual_memory().total / 2**30, 1))
print("default start method: ", mp.get_start_method(allow_none=True) or mp.get_context().get_start_method())
print("start methods here:   ", mp.get_all_start_methods(), "| main experiment uses:", FORK)
print("memory numbers here:  ", KINDS)
print(f"records: {N_RECORDS:,} (grid {GRID_RECORDS:,}), seed {SEED}, {WORKERS} workers, batches of {BATCH_SIZE}")
""", grade_id="config", locked=True)

md("""
### The measuring helper

Every experiment below runs one epoch of a DataLoader under the course's `MemoryProbe`,
which samples RSS, USS and PSS of the main process and of each worker in a background
thread. The collate function `collate_touch` reads every value of every record, as
`default_collate` would, but sends back only a count, so that the batches cost nothing to
send and the only memory that moves is the dataset's.

Two details, both explained later: the loader's start method is always passed explicitly
(`multiprocessing_context=`), so the notebook means the same thing on every machine; and
before each epoch the helper calls `gc.freeze()` (Part C says why).
""")

code('''
def epoch_memory(dataset, context, batch_size=BATCH_SIZE):
    """One epoch of `dataset` with WORKERS workers started by `context`, under the probe: its table."""
    gc.collect()
    gc.freeze()  # the garbage collector's writes would blur the picture: see Part C
    try:
        with warnings.catch_warnings():
            # on a 1-core machine DataLoader warns that 2 workers are more than its cores: known, and meant
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            loader = DataLoader(dataset, batch_size=batch_size, num_workers=WORKERS,
                                collate_fn=collate_touch, multiprocessing_context=context)
            with MemoryProbe(interval_s=INTERVAL_S, max_overhead=MAX_OVERHEAD) as probe:
                for _ in probe.watch(loader):
                    pass
    finally:
        gc.unfreeze()
    return probe.table()


def steady_family_mb(table, kind="pss"):
    """The summed memory of main + workers, median over the samples that read all 1 + WORKERS of them.

    Not the peak: the probe reads one process after another, and a sample taken while a worker
    exits can count the shared pages twice (once in main, once more in the surviving worker).
    """
    rows = table[table["role"].isin(["main", "worker"])].dropna(subset=[f"{kind}_mb"])
    full = rows.groupby("time_s")["process"].count() == 1 + WORKERS
    return float(rows.groupby("time_s")[f"{kind}_mb"].sum()[full].median())


def main_mb(kind="uss"):
    """This process's memory now, in MB."""
    memory = read_memory(psutil.Process(), (kind,))
    return getattr(memory, kind) / MB


def empty_loader_table(context=FORK):
    """The same loader over 1,000 small ints: what the workers cost with (almost) no data."""
    return epoch_memory(RecordListDataset(make_python_records(1_000)), context)
''', grade_id="helpers", locked=True)

md("""
## Part A · Three ways to count memory

* **RSS** (resident set size) counts every page a process can touch now. After a `fork`
  the child shares *all* of its parent's pages, so its RSS is the parent's size from its
  first instant, and the RSS of a family of processes adds shared pages once per process.
* **USS** (unique set size) counts only the pages no other process holds. A forked
  worker's USS starts near zero, and every page it copies on write adds to it.
* **PSS** (proportional set size) splits each shared page between its sharers: a page
  shared by three processes counts a third in each. Summed over a family, PSS is what the
  family really uses.

The copying itself: a forked worker shares its parent's memory until someone writes to a
page; then the kernel copies that 4 KB page for the writer. A Python object starts with
its *reference count*, and taking a reference to it (indexing a list, passing it to a
function, iterating a dict) writes that count. So a worker that merely reads a record
copies the page the record lives on. A list of 200,000 dicts of strings, lists and floats
is several million objects, spread over the whole heap.

First, what two workers cost with no data to speak of: the baseline for later.
""")

code("""
empty_table = empty_loader_table()
_kind = "pss" if "pss" in KINDS else "uss"
_main_first = summarize(empty_table, _kind).query("role == 'main'")["first_mb"].iloc[0]
EMPTY_EXTRA_MB = steady_family_mb(empty_table, _kind) - _main_first  # what 2 empty workers add
print(summarize(empty_table, "uss")[["role", "first_mb", "last_mb", "peak_mb"]].round(1))
print(f"{_kind.upper()} two empty workers add to the family: {EMPTY_EXTRA_MB:.1f} MB")
""", grade_id="baseline", locked=True)

md("""
Now the annotations: a seeded, COCO-like list of dicts (ids, a file name, the image
size, a category, one to six boxes, a caption), built as `json.load` would build it.
""")

code("""
before_mb = main_mb()
records = make_annotations(N_RECORDS, seed=SEED)
RECORDS_MB = main_mb() - before_mb
print(f"{len(records):,} records, {RECORDS_MB:.0f} MB of Python objects in this process")
print(records[0])
""", grade_id="records", locked=True)

md("""
**Your prediction** (not graded). Two forked workers each read half of the records once.
By the end of the epoch, what will the summed **RSS** of main + workers say? The summed
**USS** of the workers? The summed **PSS** of the family? (Compare each with the list's
size printed above.)

*My prediction:*
""")

code("""
list_table = epoch_memory(RecordListDataset(records), FORK)
print(f"{list_table['time_s'].max():.1f} s, {list_table['time_s'].nunique()} samples")
""", grade_id="list_epoch", locked=True)

code("""
shown = [k for k in ("rss", "uss", "pss") if k in KINDS]
fig, axes = plt.subplots(1, len(shown), figsize=(5 * len(shown), 3.6), layout="constrained")
for ax, kind in zip(np.atleast_1d(axes), shown):
    plot_memory(list_table, metric=kind, ax=ax, title=f"{kind.upper()}: list of dicts, fork")
plt.show()
""")

code("""
def family_totals(table):
    \"\"\"At the last sample with main and every worker: each number, and its sum over the family.\"\"\"
    rows = table[table["role"].isin(["main", "worker"])]
    full = rows.groupby("time_s")["process"].count()
    last = rows[rows["time_s"] == full[full == 1 + WORKERS].index.max()]
    out = {}
    for kind in shown:
        growth = summarize(table, kind).query("role == 'worker'")["growth_mb"].sum()
        out[kind.upper()] = {"main (MB)": last.loc[last["role"] == "main", f"{kind}_mb"].sum(),
                             "workers (MB)": last.loc[last["role"] == "worker", f"{kind}_mb"].sum(),
                             "main + workers (MB)": last[f"{kind}_mb"].sum(),
                             "workers' growth (MB)": growth}
    return pd.DataFrame(out).T.round(0)

family_totals(list_table)
""")

md(f"""
What the three rows say about the same moment:

* **RSS** counts each worker as if it held a full copy of the main process from the
  start (torch included): summed, it claims several times the memory in use. A
  monitoring tool that adds RSS, as many do, raises a false alarm at the first batch.
* **USS** shows what each worker really made its own: small at the start, then growing
  batch by batch as it reads records. That growth is the copy-on-write. (The main
  process's USS drops when the workers fork, because its pages become shared, and jumps
  back when they exit.)
* **PSS** summed over the family is the truth the machine sees: the list once, plus what
  the workers copied.

On a 2-core machine without a GPU we saw each worker's USS grow by about 110 MB (each
read half of a 300 MB list): by the end of the epoch the family held the list about
twice over. With 8 workers, a full pass each (several epochs) and a 10 GB list,
that is how the bug report's machine ran out of memory. Compare with your prediction.
""")

md("""
## Part B · Which number to add up (4 points)

1. Set `METRIC_TO_SUM` to the memory number (`"rss"`, `"uss"` or `"pss"`) whose sum
   over the main process and its workers is the memory the family really uses.
2. Write `true_peak_mb(table)`: given a probe table (columns `process`, `role`,
   `time_s`, `rss_mb`, `uss_mb`, `pss_mb`; one row per process per sample, all rows of
   one sample share `time_s`), return the most memory the family used **at one moment**:
   for each sample, add up the `pss_mb` of the rows whose role is `"main"` or `"worker"`
   (helpers such as the forkserver, role `"other"`, are not the loader's), and return the
   largest of these sums as a float. Skip NaN values. Raise `ValueError` if no such row
   has a PSS value (macOS and Windows cannot read PSS).
""", grade_id="task_true_total", locked=True)

answer("metric_to_sum", '''
### BEGIN SOLUTION
METRIC_TO_SUM = "pss"
### END SOLUTION
''')

test("test_metric_to_sum", 1, '''
"""The number to add up over a family of processes is PSS."""
# fails for "rss" (shared pages counted once per process) and "uss" (shared pages counted nowhere)
assert isinstance(METRIC_TO_SUM, str), f"METRIC_TO_SUM should be a string, got {type(METRIC_TO_SUM).__name__}"
assert METRIC_TO_SUM.strip().lower() == "pss", (
    f"{METRIC_TO_SUM!r} does not add up to the family's memory: which number splits a shared page between its sharers?")
''')

answer("true_peak_mb", '''
def true_peak_mb(table: pd.DataFrame) -> float:
    """The largest summed PSS of the main process and its workers in one sample, in MB.

    Raises:
        ValueError: no main or worker row has a PSS value.
    """
    ### BEGIN SOLUTION
    rows = table[table["role"].isin(["main", "worker"])].dropna(subset=["pss_mb"])
    if rows.empty:
        raise ValueError("the table has no PSS values for the main process or its workers "
                         "(PSS cannot be read on macOS and Windows)")
    return float(rows.groupby("time_s")["pss_mb"].sum().max())
    ### END SOLUTION
''')

md("""
Check: on the list epoch above, this should print a number a little above the list's
size plus the main process's own few hundred MB (and far below the summed RSS).
""")

code("""
if "pss" in KINDS:
    print(f"true peak: {true_peak_mb(list_table):.0f} MB")
""")

code('''
def _sample_table():
    """Three samples; the processes peak at different moments; a forkserver ('other') too."""
    rows = [  # process, role, time_s, rss, uss, pss
        (10, "main", 0.0, 900.0, 400.0, 500.0), (99, "other", 0.0, 300.0, 20.0, 60.0),
        (10, "main", 1.0, 900.0, 300.0, 350.0), (11, "worker", 1.0, 880.0, 40.0, 150.0),
        (12, "worker", 1.0, 880.0, 90.0, 200.0), (99, "other", 1.0, 300.0, 20.0, 60.0),
        (10, "main", 2.0, 950.0, 300.0, 380.0), (11, "worker", 2.0, 900.0, 120.0, 210.0),
        (12, "worker", 2.0, 900.0, 30.0, 110.0), (99, "other", 2.0, 300.0, 20.0, float("nan")),
    ]
    return pd.DataFrame(rows, columns=["process", "role", "time_s", "rss_mb", "uss_mb", "pss_mb"])
''', grade_id="test_helpers_b", locked=True)

test("test_true_peak_values", 2, '''
"""true_peak_mb adds PSS over main and workers per sample and returns the largest sum."""
_t = _sample_table()
_got = true_peak_mb(_t)
assert isinstance(_got, float), f"return a float, got {type(_got).__name__}"
# fails for RSS (2750), USS (510), including the forkserver (760), per-process peaks added (880),
# the last sample (700) or the first (500)
assert abs(_got - 700.0) < 1e-6, f"expected 700.0 MB (sample at t=1 s: 350 + 150 + 200), got {_got}"
### BEGIN HIDDEN TESTS
from feedgpu.measure.memory import peak_total_mb as _peak_total_mb
_rng = np.random.default_rng(6)
for _ in range(5):
    _n = int(_rng.integers(3, 9))
    _rows = []
    for _s in range(_n):
        for _pid, _role in ((1, "main"), (2, "worker"), (3, "worker"), (4, "other")):
            if _role == "worker" and _rng.random() < 0.2:
                continue  # a worker not started yet, or gone
            _pss = float(_rng.uniform(5, 500)) if _rng.random() > 0.1 else float("nan")
            _rows.append((_pid, _role, 0.5 * _s, _pss * 3, _pss / 2, _pss))
    _t = pd.DataFrame(_rows, columns=["process", "role", "time_s", "rss_mb", "uss_mb", "pss_mb"])
    _want = _peak_total_mb(_t, "pss")
    assert abs(true_peak_mb(_t) - _want) < 1e-6, f"expected {_want} on a random table, got {true_peak_mb(_t)}"
### END HIDDEN TESTS
''')

test("test_true_peak_needs_pss", 1, '''
"""true_peak_mb raises ValueError on a table without PSS (macOS, Windows)."""
_t = _sample_table()
_t["pss_mb"] = float("nan")
try:
    _got = true_peak_mb(_t)
except ValueError:
    pass
else:  # fails for an answer that returns 0.0 or NaN, or quietly falls back to RSS
    raise AssertionError(f"expected ValueError for a table without PSS values, got {_got!r}")
''')

md("""
## Part C · The fix: one buffer, one offsets array (12 points)

Reading a record copies its page because the record is a Python object with a reference
count. So keep the records out of Python objects until a worker asks for one: pickle
each record to bytes, lay all the bytes end to end in **one** `uint8` numpy array, and
keep where each record starts in an `int64` array of offsets. That is two objects,
whatever the number of records, and reading record `i` only *reads* their memory:
`pickle.loads(buffer[offsets[i]:offsets[i + 1]])` builds a fresh dict in the worker,
which the worker throws away after the batch. (detectron2's `DatasetFromList` does this
when `serialize=True`, its default.)

**Where your code runs.** A DataLoader worker started by *spawn* or *forkserver* imports
the dataset's class by name, and cannot import anything defined in this notebook. So you
write two plain functions, and the course's dataset class
`feedgpu.workloads.records.SerializedRecordDataset(buffer, offsets)`, which any worker can
import, carries your buffer to the workers:

1. `deserialize(buffer, offsets, i)`: record `i` (negative `i` counts from the end, as
   in a list). Raise `IndexError` if `i` is out of range. You test it here, in the main
   process; the course's class does the same in the workers.
2. `serialize(records)`: return `(buffer, offsets)`: `buffer` a 1-d `np.uint8` array of
   every record pickled (protocol `pickle.HIGHEST_PROTOCOL`) one after another, and
   `offsets` a 1-d `np.int64` array of `len(records) + 1` positions: `offsets[0] == 0`,
   record `i` is `buffer[offsets[i]:offsets[i + 1]]`, `offsets[-1] == len(buffer)`.
   Raise `TypeError` if `records` is not a list or a tuple.

**The garbage collector writes too.** Reference counts are not the only writer. Every
few thousand allocations Python's cyclic garbage collector runs, and a full collection
walks *every* container object (dict, list) the process holds and writes a field in each
one's header. A worker that never touches the list, but makes new objects (unpickling
records does), copies the list's pages anyway while the list exists in its parent: on our
2-core machine, the buffer's workers copied about 100 MB without the freeze and under
10 MB with it. `gc.freeze()` (Python 3.7+), called just before the fork, moves every object
that exists into a generation the collector never visits again: the Python documentation
recommends it for exactly this. The helper above freezes before each epoch; in your own
training script, freeze once after building the dataset and before the loader starts its
workers, and drop the Python list once you have the buffer.
""", grade_id="task_serialize", locked=True)

answer("deserialize", '''
def deserialize(buffer: np.ndarray, offsets: np.ndarray, i: int):
    """Record i of a buffer made by serialize: pickle.loads of buffer[offsets[i]:offsets[i + 1]].

    Raises:
        IndexError: i is not in range(-n, n), where n = len(offsets) - 1.
    """
    ### BEGIN SOLUTION
    n = len(offsets) - 1
    if not -n <= i < n:
        raise IndexError(f"record {i} out of range for {n} records")
    if i < 0:
        i += n
    return pickle.loads(buffer[offsets[i]:offsets[i + 1]])
    ### END SOLUTION
''')

md("""
Check: should print `{'id': 7, 'tags': ['b']} ['c', 3.5]`.
""")

code("""
_parts = [pickle.dumps(r) for r in ({"id": 1}, {"id": 7, "tags": ["b"]}, ["c", 3.5])]
_buf = np.frombuffer(b"".join(_parts), dtype=np.uint8)
_off = np.cumsum([0] + [len(p) for p in _parts]).astype(np.int64)
print(deserialize(_buf, _off, 1), deserialize(_buf, _off, -1))
""")

code('''
def _pickled(records):
    """A buffer and offsets made with pickle directly (independent of serialize)."""
    parts = [pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL) for r in records]
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    return np.frombuffer(b"".join(parts), dtype=np.uint8).copy(), offsets
''', grade_id="test_helpers_c", locked=True)

test("test_deserialize_records", 1, '''
"""deserialize returns each record, counting negative indices from the end."""
_recs = make_annotations(40, seed=3) + [{"empty": []}, "text", 12345678901234, None]
_buf, _off = _pickled(_recs)
for _i in range(len(_recs)):  # fails for an off-by-one slice (offsets[i + 1]:offsets[i + 2])
    assert deserialize(_buf, _off, _i) == _recs[_i], f"record {_i} differs"
assert deserialize(_buf, _off, -1) is None and deserialize(_buf, _off, -2) == 12345678901234, (
    "negative i should count from the end, as in a list")
''')

test("test_deserialize_out_of_range", 1, '''
"""deserialize raises IndexError outside range(-n, n)."""
_buf, _off = _pickled([{"a": 1}, {"b": 2}, {"c": 3}])
for _bad in (3, 4, -4, 100):  # i == n reads an empty slice: fails for an answer that does not check
    try:
        _got = deserialize(_buf, _off, _bad)
    except IndexError:
        continue
    except Exception as _err:  # noqa: BLE001 - the wrong exception type is the failure we report
        raise AssertionError(f"i={_bad}: expected IndexError, got {type(_err).__name__}: {_err}") from None
    raise AssertionError(f"i={_bad}: expected IndexError, got {_got!r}")
''')

answer("serialize", '''
def serialize(records) -> tuple[np.ndarray, np.ndarray]:
    """Every record pickled, end to end, into one uint8 buffer, and the int64 offsets of each.

    Returns:
        (buffer, offsets): record i is buffer[offsets[i]:offsets[i + 1]];
        len(offsets) == len(records) + 1, offsets[0] == 0, offsets[-1] == len(buffer).

    Raises:
        TypeError: records is not a list or a tuple.
    """
    ### BEGIN SOLUTION
    if not isinstance(records, (list, tuple)):
        raise TypeError(f"records must be a list or a tuple, got {type(records).__name__}")
    parts = [pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL) for r in records]
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    buffer = np.frombuffer(b"".join(parts), dtype=np.uint8).copy()  # a copy: writable, owns its memory
    return buffer, offsets
    ### END SOLUTION
''')

md("""
Check: should print `uint8 int64 [ 0 14 33]` (or other sizes, if your pickle protocol
differs) and `{'id': 1}`.
""")

code("""
_buf, _off = serialize([{"id": 1}, {"id": 2, "x": []}])
print(_buf.dtype, _off.dtype, _off)
print(pickle.loads(_buf[_off[0]:_off[1]]))
""")

test("test_serialize_layout", 2, '''
"""serialize returns a 1-d uint8 buffer and n + 1 int64 offsets from 0 to len(buffer)."""
_recs = make_annotations(30, seed=5)
_out = serialize(_recs)
assert isinstance(_out, tuple) and len(_out) == 2, "return a tuple (buffer, offsets)"
_buf, _off = _out
# fails for a list of bytes, an object array, or a bytes object instead of one uint8 array
assert isinstance(_buf, np.ndarray) and _buf.dtype == np.uint8 and _buf.ndim == 1, "buffer: a 1-d np.uint8 array"
assert isinstance(_off, np.ndarray) and _off.dtype == np.int64 and _off.ndim == 1, "offsets: a 1-d np.int64 array"
# fails for n offsets (starts only, or ends only, as detectron2 keeps them) and for lengths instead of positions
assert len(_off) == len(_recs) + 1, f"expected {len(_recs) + 1} offsets, got {len(_off)}"
assert _off[0] == 0 and _off[-1] == len(_buf) and np.all(np.diff(_off) > 0), (
    "offsets must rise from 0 to len(buffer)")
for _i, _r in enumerate(_recs):
    assert pickle.loads(_buf[_off[_i]:_off[_i + 1]].tobytes()) == _r, f"record {_i} does not unpickle from its slice"
_buf0, _off0 = serialize([])
assert len(_buf0) == 0 and list(_off0) == [0], "no records: an empty buffer and offsets [0]"
for _bad in ({"a": 1}, "abc", (r for r in _recs)):  # fails for an answer that serialises any iterable
    try:
        serialize(_bad)
    except TypeError:
        continue
    raise AssertionError(f"expected TypeError for a {type(_bad).__name__}")
''')

test("test_serialize_same_records", 2, '''
"""The course's worker-side dataset, over your buffer, returns exactly the 200,000 records."""
_dataset = SerializedRecordDataset(*serialize(records))
assert len(_dataset) == len(records), f"expected {len(records)} records, got {len(_dataset)}"
_wrong = [i for i in range(len(records)) if _dataset[i] != records[i]]
# fails when a record's slice is shifted or truncated (offsets off by one)
assert not _wrong, f"{len(_wrong)} records differ, the first at index {_wrong[0]}"
del _dataset
''')

md("""
**Your prediction** (not graded). Same loader, same records, same two forked workers,
but over your buffer. How much will the workers' summed USS grow this time, as a
fraction of the list's? And the family's summed PSS, next to the buffer's size?

*My prediction:*
""")

test("test_fix_stops_the_copying", 3, '''
"""Over one forked epoch, the fix's summed worker USS growth is at most 10% of the list's."""
from feedgpu.measure.memory import worker_growth_mb as _worker_growth_mb
_buffer, _offsets = serialize(records)
fix_table = epoch_memory(SerializedRecordDataset(_buffer, _offsets), FORK)
_list_growth = _worker_growth_mb(list_table, "uss")
_fix_growth = _worker_growth_mb(fix_table, "uss")
assert _list_growth > 40, f"the list's workers grew only {_list_growth:.0f} MB: rerun Part A (the test needs its copying to compare)"
# fails for a "fix" that keeps one Python object per record (an object array of pickles,
# or a list of dicts in numpy clothing): its workers copy as the list's do
assert _fix_growth <= 0.10 * _list_growth, (
    f"workers grew {_fix_growth:.0f} MB with your buffer, against {_list_growth:.0f} MB with the list: "
    "expected at most 10%")
''')

test("test_fix_pss_near_data_size", 2, '''
"""With the fix, the family's summed PSS beyond its baseline stays within 1.3x the buffer's size."""
# the family's memory for the data: the data once (in main), plus what the workers added beyond
# two empty workers. (Median over the samples, not the peak: see steady_family_mb.)
from feedgpu.measure.memory import summarize as _summarize
_data_mb = (_buffer.nbytes + _offsets.nbytes) / MB
_kind = "pss" if "pss" in KINDS else "uss"  # macOS/Windows: the workers' USS, a lower bound
_main_first = _summarize(fix_table, _kind).query("role == 'main'")["first_mb"].iloc[0]
# the baseline: what main held before the workers started, less the data itself, plus two empty workers
_baseline = _main_first - _data_mb + EMPTY_EXTRA_MB
_family = steady_family_mb(fix_table, _kind) - _baseline
# fails when each worker holds its own copy (2 workers: about 3x the data), as the list's did
assert _family <= 1.3 * _data_mb, (
    f"the family used {_family:.0f} MB for {_data_mb:.0f} MB of data: expected at most 1.3x")
''')

code("""
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained", sharey=True)
plot_memory(list_table, metric="uss", ax=axes[0], title="USS: list of dicts")
plot_memory(fix_table, metric="uss", ax=axes[1], title="USS: one buffer (your serialize)")
plt.show()
family_totals(fix_table)
""")

code("""
buffer_mb = (_buffer.nbytes + _offsets.nbytes) / MB
print(f"list: {RECORDS_MB:.0f} MB of objects | buffer: {buffer_mb:.0f} MB")
if "pss" in KINDS:  # main holds more now (the list and the buffer): compare what each epoch added to it
    for name, table in (("list", list_table), ("buffer", fix_table)):
        main_first = summarize(table, "pss").query("role == 'main'")["first_mb"].iloc[0]
        print(f"{name:>6}: the workers added {true_peak_mb(table) - main_first:4.0f} MB to the family's true peak")
""")

md("""
The graded cells above ran your fix under the probe. On our 2-core machine the workers'
summed USS grew by under 1 MB with the buffer, against about 220 MB with the list, and
the buffer itself was about 67 MB, under a quarter of the list's 300 MB: pickled bytes have no
object headers, no reference counts and no pointers. The dicts a worker unpickles live
one batch and are freed; the buffer is only ever read. Compare with your prediction.

The price: every access unpickles (a few microseconds a record, spent in the workers, in
parallel), and the records are read-only.
""")

md("""
## Part D · The start method decides: a 3 × 3 grid

So far every worker was *forked*: it began as a copy of the main process, sharing every
page. The other two start methods never share the dataset:

* **spawn** (the default on macOS and Windows) starts a fresh Python, which imports
  torch, then receives the dataset **pickled** through a pipe and unpickles its own copy;
* **forkserver** (the default on Linux from Python 3.14) forks each worker from a small
  server process started early, which has never seen your dataset: the dataset is
  pickled to each worker, as with spawn.

So under spawn and forkserver *even a numpy array is copied*, once per worker, at start.
What still differs is the size of the copy and whether it grows. The grid below runs one
epoch for each start method and each layout, on a smaller list (`GRID_RECORDS`), and an
almost empty dataset per start method as the baseline (under spawn each worker imports
torch, a few hundred MB of its own).

A forkserver worker imports what the server imported: preloading torch into the server
saves each worker that import (and shares its memory, as fork does). It must be set
before the server starts, here before the first forkserver loader.
""")

md("""
**Your prediction** (not graded). For each start method, rank the three layouts by the
memory each worker holds at the end of the epoch. Which cells will grow *during* the
epoch?

*My prediction:*
""")

code("""
mp.get_context("forkserver").set_forkserver_preload(["torch", "feedgpu.workloads.records",
                                                     "feedgpu.workloads.annotations"])
grid_records = make_annotations(GRID_RECORDS, seed=SEED + 1)
layouts = {"list of dicts": RecordListDataset(grid_records),
           "numpy arrays": AnnotationArrayDataset(annotations_to_arrays(grid_records)),
           "one buffer": SerializedRecordDataset(*serialize(grid_records))}
grid = []
for context in CONTEXTS:
    empty = summarize(empty_loader_table(context), "uss").query("role == 'worker'")
    for layout, dataset in layouts.items():
        s = summarize(epoch_memory(dataset, context), "uss").query("role == 'worker'")
        grid.append({"start method": context, "layout": layout,
                     "per worker (MB)": s["peak_mb"].mean() - empty["peak_mb"].mean(),
                     "summed growth (MB)": s["growth_mb"].sum() - empty["growth_mb"].sum()})
grid = pd.DataFrame(grid)
grid.pivot(index="start method", columns="layout").round(0)
""")

code("""
fig, axes = plt.subplots(1, 2, figsize=(11, 3.4), layout="constrained")
for ax, column in zip(axes, ["per worker (MB)", "summed growth (MB)"]):
    cells = grid.pivot(index="start method", columns="layout", values=column).loc[CONTEXTS, list(layouts)]
    ax.imshow(cells.clip(lower=0).to_numpy(), cmap="Reds", vmin=0)
    ax.set_xticks(range(len(layouts)), cells.columns)
    ax.set_yticks(range(len(CONTEXTS)), cells.index)
    for (r, c), value in np.ndenumerate(cells.to_numpy()):
        ax.text(c, r, f"{value:.0f}", ha="center", va="center")
    ax.set_title(f"worker USS, {column}, beyond an empty dataset's")
plt.show()
""")

md("""
Under spawn and forkserver, what each worker gets is the dataset *pickled*. Its size does
not depend on the machine, so here it is, per layout: every worker receives these bytes
and unpickles its own copy (the list back into millions of objects, larger than its
pickle).
""")

code("""
pd.Series({layout: len(pickle.dumps(dataset, protocol=pickle.HIGHEST_PROTOCOL)) / MB
           for layout, dataset in layouts.items()}, name="pickled to each worker (MB)").round(1)
""")

md("""
How to read the grid (on our 2-core machine without a GPU we saw the pattern below; your
numbers will differ, and the spawn row is noisy: each spawned worker imports torch
itself, and that import's few hundred MB vary by tens of MB from run to run):

* **fork**: only the list costs the workers memory, and it grows during the epoch
  (about 25-30 MB in each worker for this 80 MB list: each read half of it); the arrays
  and the buffer stay shared, 0-3 MB.
* **forkserver** (and spawn, less clearly): every layout costs each worker a private
  copy from its first batch: the list the most, the arrays and the buffer about their
  pickled size plus the unpickling's overhead. The growth column mixes the copy with
  the epoch, because the probe's first sample of a new worker can come before it has
  unpickled the dataset.

The lessons for a training script that may run under any start method (for instance, on
Linux from Python 3.14, where a plain `DataLoader(num_workers=8)` uses forkserver): make
the dataset small to pickle (a buffer, or the path of a file that each worker opens, with
`np.load(..., mmap_mode="r")` or a database), and do not count on fork sharing it.
""")

md("""
## Conclusion

* A list of Python objects in a forked worker's parent is copied page by page as the
  worker reads it, because reading writes a reference count (and the garbage collector
  writes into every container): no leak, but the memory of a family of workers grows
  toward one copy per worker.
* RSS counts shared pages once per process and overstates a family's memory; USS shows
  what each worker copied; summed PSS is what the family really uses.
* The fix is to hold the data in a few large buffers: one `uint8` array of pickled
  records and an offsets array. You wrote it, and the probe showed the workers' growth
  vanish. `gc.freeze()` before the workers start keeps the collector from copying what
  is left.
* Under spawn and forkserver (Python 3.14's Linux default) the dataset is pickled into
  every worker, buffers included: make it small to pickle, or open files in each worker.
""", grade_id="conclusion", locked=True)

md("""
## Reflection (3 points)

A colleague trains with a 6 GB list of annotation dicts, 8 workers and fork; `top` shows
each worker at 6 GB of RSS after an hour, 54 GB in all, on a 64 GB machine that is not
swapping. (a) What is each number really counting, and how would you find the true
total? (b) Why does the memory still grow over the first epochs, and what does your fix
change? (c) They upgrade to Python 3.14 and the machine runs out of memory at start-up,
even with the fix. Why, and what would you do?
""", grade_id="reflection_question", locked=True)

md("""
### BEGIN SOLUTION
(a) RSS counts every page a worker can reach, including the pages it still shares with
the main process, so the 6 GB is counted once per process: 54 GB is far more than the
machine holds in use (it is not swapping). The true total is the sum of PSS over the
main process and the workers (each shared page split between its sharers); the workers'
USS shows what each has copied. (b) Each worker copies, on write, every page holding a
record it reads, because reading a Python object writes its reference count (and a full
garbage collection writes into every dict and list): over the first epochs each worker
reads more records and approaches a full 6 GB copy. With one pickled buffer and offsets
there are two objects instead of millions, reading a record only reads the buffer, and
the workers keep sharing it: their USS stays flat. (c) Python 3.14 starts workers with
forkserver on Linux: the dataset is pickled into each of the 8 workers at start-up, so
even the buffer is copied 8 times (and the list far worse). Pass
`multiprocessing_context="fork"` explicitly (with `gc.freeze()` before the loader), or
store the buffer in a file that each worker maps with `np.load(..., mmap_mode="r")` so
pickling sends only a path.
### END SOLUTION
""", grade_id="reflection", grade=True, solution=True, points=3)

nb = new_notebook(cells=cells, metadata={
    "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
    "language_info": {"name": "python", "pygments_lexer": "ipython3"}})
out = pathlib.Path("/work/main/solutions/06_copy_on_write/06_copy_on_write.ipynb")
out.parent.mkdir(parents=True, exist_ok=True)
nbformat.write(nb, out)
print("wrote", out, len(cells), "cells")
