"""Tests for feedgpu-record (feedgpu.workflows.bench.record) and the GPU instruments it adds, without a GPU.

The recorder measures through an ``Instruments`` object; here its GPU functions are fakes
that return made-up readings of a known shape, so that what is checked is the folder it
writes: that :func:`feedgpu.readings.load_readings` reads it back whole, with every kind
of copy at every size, the course's five copy loops with the settings of the H200's
recorded ones, the machine, the bench and, with a loader named, the loop by
``num_workers`` (measured for real on a tiny loader and a CPU step) and the diagnoses.
Also: the refusal without a GPU, of an existing folder and of bad arguments, each in one
line, the guard for a PyTorch without ``torch.accelerator.empty_host_cache`` (2.11), and
the course's identity in ``machine.json`` (issue 40): its version and a hash of its own
sources, whatever git repository encloses it.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import importlib.metadata
import json
import logging
import shutil
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from feedgpu.measure import pinning
from feedgpu.measure.pinning import COPY_KINDS, NoCudaError, empty_host_cache, measure_first_pin
from feedgpu.readings import READINGS_ROOT, load_readings
import feedgpu
from feedgpu.workflows.bench import record
from feedgpu.workflows.bench.record import (Instruments, course_source_files, course_source_sha256, default_name,
                                      default_workers, main)

pytestmark = pytest.mark.unit

CUDA = torch.cuda.is_available()
MIB = 2**20
QUICK_SIZES = [2**12, 2**16, 2**20, 2**22, 2**24]  # the sizes of --quick
GPU_NAME = "NVIDIA Fake X1"
#: The kinds of copy a readings folder records (issue 29; the names feedgpu.readings reads).
KINDS = ("h2d_pageable", "h2d_pageable_in_loop", "h2d_pageable_loops", "h2d_pinned", "d2h_pinned",
         "pin_memory_1thread", "pin_memory_cached", "host_copy_1thread", "host_copy_all_threads")
#: A made-up bandwidth for each kind of copy, all different, so that a kind read back under
#: another's name shows.
BANDWIDTH = {kind: (k + 1) * 1e9 for k, kind in enumerate(KINDS)}


#: What describe_machine() says, made up (the real one imports torchvision: seconds).
DESCRIBED = {"python": "3.12.3", "platform": "Linux-fake", "logical_cores": 16, "usable_cores": 16,
             "physical_cores": 8, "memory_bytes": 2**37, "start_method": "fork", "torch": "2.11.0+cu130",
             "torchvision": "0.26.0", "torch_threads": 8, "cuda_available": True, "cuda_device_count": 2,
             "cuda_device_name": GPU_NAME, "mps_available": False, "device": "cuda"}


def fake_seconds(nbytes: int, kind: str) -> float:
    return 10e-6 + nbytes / BANDWIDTH[kind]


class FakeGPU:
    """Instruments that return made-up readings and remember what they were asked."""

    def __init__(self, *, emptied: bool = False, bench_fails: bool = False) -> None:
        self.emptied = emptied
        self.bench_fails = bench_fails
        self.asked: list[tuple] = []
        self.runs: dict[tuple, list[float]] = {}
        self.diagnosed: list[int] = []
        self.synchronized = 0

    def synchronize(self):
        self.synchronized += 1

    def copy_table(self, sizes_bytes, *, repeats, large_repeats):
        self.asked.append(("copy_table", tuple(sizes_bytes), repeats, large_repeats))
        rows = []
        for nbytes in sizes_bytes:
            row = {"bytes": nbytes}
            for kind in KINDS:
                s = fake_seconds(nbytes, kind)
                row[kind] = {"median_s": s, "min_s": 0.9 * s, "all_s": [0.9 * s, s, 1.2 * s]}
            rows.append(row)
        return rows

    def training(self, n_batches, batch_bytes, *, pinned, non_blocking, prefetch):
        key = (n_batches, batch_bytes, pinned, non_blocking, prefetch)
        seconds = n_batches * (2e-3 + batch_bytes / (50e9 if pinned else 10e9)) * (0.5 if prefetch else 1.0)
        seconds *= 1 + 0.1 * len(self.runs.setdefault(key, []))  # each run of a loop a little slower
        self.runs[key].append(seconds)
        return seconds

    def diagnose(self, loader, step, max_seconds):
        self.diagnosed.append(loader.num_workers)
        assert callable(step), "the diagnosis needs the user's step"
        return {"verdict": "compute-bound", "causes": [], "settings": {"num_workers": loader.num_workers},
                "max_seconds": max_seconds}

    def bench(self):
        if self.bench_fails:
            raise RuntimeError("a broken bench")
        return [{"name": "gpu available", "value": 1.0, "unit": "", "note": GPU_NAME},
                {"name": "gpu overlap gain", "value": 4.2, "unit": "x", "note": "plain / overlapped"}]

    def instruments(self) -> Instruments:
        return Instruments(
            cuda_skip_reason=lambda: None,
            gpu=lambda: {"gpu": GPU_NAME, "gpu_count": 2, "cuda": "13.0", "driver": "999.1"},
            describe_machine=lambda: dict(DESCRIBED),
            empty_host_cache=lambda: self.emptied,
            copy_table=self.copy_table,
            compute_s=lambda: 1.5e-3,
            training=self.training,
            bench=self.bench,
            synchronize=self.synchronize,
            diagnose=self.diagnose,
        )


def forbidden(*args, **kwargs):
    raise AssertionError("the recorder measured something before refusing")


def refusing(instruments: Instruments) -> Instruments:
    """The same instruments, with every measurement failing the test if it is called."""
    names = ("gpu", "describe_machine", "empty_host_cache", "copy_table", "compute_s", "training", "bench",
             "synchronize", "diagnose")
    return dataclasses.replace(instruments, **{name: forbidden for name in names})


def one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {err!r}"
    return lines[0]


# --------------------------------------------------------------------------- refusals


def test_record_refuses_without_a_gpu_in_one_line(tmp_path, monkeypatch, capsys):
    """Without a CUDA GPU (torch says none) the recorder exits 2 with one line saying why, and
    measures and writes nothing."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    instruments = dataclasses.replace(refusing(FakeGPU().instruments()), cuda_skip_reason=pinning.cuda_skip_reason)
    root = tmp_path / "readings"
    status = main(["--root", str(root)], instruments=instruments)
    out, err = capsys.readouterr()
    assert status == 2, f"exit status {status}, expected 2"
    line = one_line(err)
    assert line.startswith("feedgpu-record: error:") and "needs a CUDA GPU" in line, line
    assert "no CUDA GPU" in line, f"the reason (cuda_skip_reason) should be in the line: {line}"
    assert out == "", f"nothing on stdout when refused: {out!r}"
    assert not root.exists(), f"nothing may be written: {sorted(root.rglob('*'))}"


def test_record_refuses_an_existing_folder(tmp_path, capsys):
    """A folder that exists is refused in one line before anything is measured, and left as it was."""
    gpu = FakeGPU()
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "note.txt").write_text("kept")
    instruments = dataclasses.replace(gpu.instruments(), copy_table=forbidden, training=forbidden)
    status = main(["--root", str(tmp_path), "--name", "mine"], instruments=instruments)
    line = one_line(capsys.readouterr().err)
    assert status == 2 and "exists already" in line and str(folder) in line, (status, line)
    assert sorted(p.name for p in folder.iterdir()) == ["note.txt"] and (folder / "note.txt").read_text() == "kept"


@pytest.mark.parametrize("argv, words", [
    (["--workers", "0,two"], "--workers"),
    (["--workers", "-1"], "--workers"),
    (["--loader", "somewhere:make_loader"], "go together"),
    (["--max-seconds", "0"], "--max-seconds"),
    (["--name", "a/b"], "--name"),
    (["--loader", "no_such_module_here:make", "--step", "no_such_module_here:step"], "cannot import"),
    (["--nonsense"], "unrecognized"),
])
def test_record_refuses_bad_arguments_in_one_line(tmp_path, capsys, argv, words):
    """A bad argument, or a loader that cannot be imported, exits 2 in one line before measuring."""
    instruments = dataclasses.replace(FakeGPU().instruments(), copy_table=forbidden, training=forbidden)
    status = main(["--root", str(tmp_path / "readings"), *argv], instruments=instruments)
    line = one_line(capsys.readouterr().err)
    assert status == 2 and words in line, f"{argv}: status {status}, {line!r}"
    assert not (tmp_path / "readings").exists(), "nothing may be written"


# --------------------------------------------------------------------------- the folder


def recorded_loops_of_h200() -> dict:
    """The H200's copy loops (names and settings), recorded before the recorder: the oracle of the five loops."""
    return {loop.name: loop for loop in load_readings("h200-2026-11-26", root=READINGS_ROOT).copy_loops}


def test_record_writes_a_folder_that_loads_back(tmp_path, capsys):
    """Without a loader: machine.json, every kind of copy at every size, the five copy loops with the
    H200's settings, and the bench's figures, all read back by load_readings; the path printed last."""
    gpu = FakeGPU(emptied=False)
    status = main(["--root", str(tmp_path), "--quick"], instruments=gpu.instruments())
    out, err = capsys.readouterr()
    folder = tmp_path / f"fake-x1-{datetime.date.today().isoformat()}"
    assert status == 0, f"exit status {status}: {err}"
    assert out.strip().splitlines()[-1] == str(folder), f"the folder's path should be printed last: {out!r}"
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name], "one folder, no scratch left"
    assert sorted(p.name for p in folder.iterdir()) == ["bench_gpu.json", "copies_and_loop.json",
                                                        "copy_loops.json", "machine.json"]
    readings = load_readings(folder)

    assert sorted(readings.kinds()) == sorted(KINDS), readings.kinds()
    for kind in KINDS:
        sizes, seconds = readings.copy_table(kind)
        assert sizes == QUICK_SIZES, f"{kind}: sizes {sizes}"
        assert seconds == pytest.approx([fake_seconds(n, kind) for n in QUICK_SIZES], rel=1e-12), kind
        assert len(readings.copies[kind][0][1].all_s) == 3, f"{kind}: every reading kept"
    costs = readings.copy_costs()
    assert costs.pageable_in_loop.bytes_per_s == pytest.approx(BANDWIDTH["h2d_pageable_in_loop"], rel=1e-6), (
        "the copy model's in-loop pageable copies come from h2d_pageable_in_loop")
    assert readings.pin_thread_kind() == "pin_memory_1thread", "the pin thread's kind is recorded"

    h200 = recorded_loops_of_h200()
    assert sorted(loop.name for loop in readings.copy_loops) == sorted(h200), "the five loops the course replays"
    for loop in readings.copy_loops:
        want = h200[loop.name]
        settings = (loop.n_batches, loop.batch_bytes, loop.pinned, loop.non_blocking, loop.prefetch)
        assert settings == (want.n_batches, want.batch_bytes, want.pinned, want.non_blocking, want.prefetch), (
            f"{loop.name}: {settings}")
        assert loop.measured_s == statistics.median(gpu.runs[settings]), f"{loop.name}: the median of its runs"
        assert loop.compute_s == 1.5e-3 and "measure_training" in loop.source, loop

    machine = readings.machine
    for key, value in DESCRIBED.items():
        if key != "device":
            assert machine[key] == value, f"machine.json: {key} is {machine.get(key)!r}, described {value!r}"
    assert machine["device"] == GPU_NAME, "the device of a readings folder is the GPU's name, not 'cuda'"
    assert readings.describe().startswith(f"{GPU_NAME}, "), readings.describe()
    assert machine["gpu_count"] == 2 and machine["driver"] == "999.1" and machine["cuda"] == "13.0", machine
    assert machine["guards"] == {"empty_host_cache": False}, "the guard that applied is recorded"
    assert set(machine["recorder"]) == {"name", "version", "source_sha256", "source_files"}, machine["recorder"]
    assert readings.bench_figure("gpu overlap gain") == 4.2, readings.bench
    assert all(f["bench"] == "gpu" for f in readings.bench), "each figure names its bench, as feedgpu-bench's do"
    assert not readings.loops and not readings.diagnoses and readings.stall_free_step_s is None
    assert gpu.asked and all(len(sizes) == 1 for _, sizes, _, _ in gpu.asked), "one size at a time"


def test_record_keeps_a_failed_bench_and_the_rest(tmp_path, capsys):
    """A bench that raises is kept in bench_gpu.json's "failed", as feedgpu-bench keeps it; the rest is written."""
    status = main(["--root", str(tmp_path), "--name", "x", "--quick"],
                  instruments=FakeGPU(bench_fails=True).instruments())
    assert status == 0, capsys.readouterr().err
    bench = json.loads((tmp_path / "x" / "bench_gpu.json").read_text())
    assert bench["figures"] == [] and bench["failed"] == ["gpu: RuntimeError: a broken bench"], bench
    assert set(bench["machine"]) >= {"python", "torch", "cores"}, bench["machine"]


def test_record_records_the_recommended_loop_by_default_and_not_when_asked(tmp_path, capsys):
    """With a recommended-loop instrument: recommended_loop.json, read back as Readings.recommended, made with the
    plan's worker counts after the copies; --no-recommended never calls it; a failure is kept, the rest written."""
    calls = []

    def recommended(plan, synchronize):
        calls.append(plan.workers)
        assert callable(synchronize)
        return {"stall_free_step_s": 0.008, "predicted_busy_share": {"best": 0.95, "workers": 2},
                "busy_share": {"2": 0.93}}

    gpu = FakeGPU()
    instruments = dataclasses.replace(gpu.instruments(), recommended=recommended)
    assert main(["--root", str(tmp_path), "--name", "on", "--quick", "--workers", "0,2"], instruments=instruments) == 0
    assert calls == [(0, 2)], calls
    assert load_readings(tmp_path / "on").recommended["busy_share"] == {"2": 0.93}
    assert "recommended" in capsys.readouterr().err, "a line for the stage"

    assert main(["--root", str(tmp_path), "--name", "off", "--quick", "--no-recommended"], instruments=instruments) == 0
    assert calls == [(0, 2)], "--no-recommended records no recommended loop"
    assert not (tmp_path / "off" / "recommended_loop.json").exists() and load_readings(tmp_path / "off").recommended is None

    def broken(plan, synchronize):
        raise RuntimeError("no faces")

    instruments = dataclasses.replace(gpu.instruments(), recommended=broken)
    assert main(["--root", str(tmp_path), "--name", "broken", "--quick"], instruments=instruments) == 0
    assert load_readings(tmp_path / "broken").recommended == {"failed": "RuntimeError: no faces"}
    assert (tmp_path / "broken" / "copy_loops.json").is_file(), "the rest is recorded"


def test_record_refuses_the_recommended_loop_without_faces(tmp_path, monkeypatch, capsys):
    """The default instruments on a machine without the faces: refused in one line, before measuring anything."""
    monkeypatch.setenv("FACES", str(tmp_path / "nowhere"))
    instruments = dataclasses.replace(refusing(FakeGPU().instruments()), recommended=record._recommended,
                                      recommended_missing=record._faces_missing)
    assert main(["--root", str(tmp_path), "--quick"], instruments=instruments) == 2
    assert "--no-recommended" in one_line(capsys.readouterr().err)


LOOP_MODULE = textwrap.dedent('''
    """A training loop as a user writes it, tiny: 24 items of 2 numbers that each wait 2 ms,
    batches of 4, a step that waits 12 ms: one worker loads a batch (8 ms) while the step
    runs, so the loop with one worker takes 12 ms a batch, and 20 ms without."""
    import time

    import torch
    from torch.utils.data import DataLoader, Dataset

    BATCHES = []


    class Items(Dataset):
        def __len__(self):
            return 24

        def __getitem__(self, i):
            time.sleep(0.002)
            return torch.tensor([float(i), 2.0 * i])


    def make_loader():
        return DataLoader(Items(), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0))


    def train_step(batch):
        BATCHES.append(tuple(batch.shape))
        time.sleep(0.012)
        return batch.sum()
''')


@pytest.fixture
def user_loop(tmp_path, monkeypatch):
    """A module of the user's, in the current directory, imported by name (and forgotten afterwards)."""
    name = "record_test_user_loop"
    (tmp_path / f"{name}.py").write_text(LOOP_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_record_with_a_loader_writes_the_loop_and_the_diagnoses(tmp_path, user_loop, capsys):
    """With --loader and --step: the item cost, the stall-free step, the loop by num_workers (with
    and without a synchronize per step), a diagnosis per chosen count, and the module kept byte for byte."""
    gpu = FakeGPU()
    root = tmp_path / "readings"
    status = main(["--root", str(root), "--name", "case", "--quick", "--workers", "0,1",
                   "--loader", f"{user_loop}:make_loader", "--step", f"{user_loop}:train_step"],
                  instruments=gpu.instruments())
    err = capsys.readouterr().err
    assert status == 0, err
    readings = load_readings(root / "case")
    assert set(readings.item_cost_s) == {"one_thread", "all_threads"} and min(readings.item_cost_s.values()) > 0
    assert readings.stall_free_step_s > 0, readings.stall_free_step_s
    runs = sorted((loop.num_workers, loop.synced_each_step) for loop in readings.loops)
    assert runs == [(0, False), (0, True), (1, False), (1, True)], runs
    for loop in readings.loops:
        assert loop.batches == 4 and loop.s_per_batch > 0 and 0 <= loop.wait_s_per_batch <= loop.s_per_batch, loop
    steps = sys.modules[user_loop].BATCHES
    assert steps and set(steps) == {(4, 2)}, f"the user's step ran on the loader's batches: {set(steps)}"
    # --quick: 10 stall-free steps synchronised each, two loops of 4 batches synchronised each, and
    # each of the 4 loops synchronised after its warm-up and after its timed batches
    assert gpu.synchronized >= 10 + 2 * 4 + 4 * 2, f"a synchronize per step where asked: {gpu.synchronized} in all"
    fastest = min((loop for loop in readings.loops if not loop.synced_each_step), key=lambda loop: loop.s_per_batch)
    assert sorted(gpu.diagnosed) == sorted({0, fastest.num_workers}), (
        f"the loader's own num_workers (0) and the fastest ({fastest.num_workers}) are diagnosed: {gpu.diagnosed}")
    assert sorted(readings.diagnoses) == sorted(f"diagnosis_nw{n}" for n in gpu.diagnosed), readings.diagnoses
    for name, report in readings.diagnoses.items():
        assert name == f"diagnosis_nw{report['settings']['num_workers']}", (name, report)
        assert report["max_seconds"] == 20.0, "--quick gives each diagnosis 20 s"
    kept = root / "case" / f"{user_loop}.py"
    assert kept.read_bytes() == (tmp_path / f"{user_loop}.py").read_bytes(), "the loop's module, byte for byte"
    assert "num_workers" in err and "diagnosis" in err, f"a line per stage: {err}"


# --------------------------------------------------------------------------- the course's identity (issue 40)

#: A course's tree, tiny. COUNTED: the files the source hash covers (every feedgpu/**/*.py and
#: lfw_dataset.py); the others are there to be left out: not Python, not in the package, a
#: hidden folder's copy, a compiled file.
COUNTED = {"feedgpu/__init__.py": "", "feedgpu/timing.py": "SECONDS = 1.0\n",
           "feedgpu/measure/pinning.py": "def pin(x):\n    return x\n", "lfw_dataset.py": "ROOT = 'data'\n"}
LEFT_OUT = {"feedgpu/data/notes.txt": "notes\n", "notebooks/helpers.py": "X = 1\n", "setup.py": "",
            "feedgpu/.ipynb_checkpoints/timing-checkpoint.py": "SECONDS = 2.0\n",
            "feedgpu/__pycache__/timing.cpython-312.pyc": "\0\0"}


def fake_course(root: Path) -> Path:
    """Write COUNTED and LEFT_OUT under ``root``; returns ``root``."""
    for name, text in {**COUNTED, **LEFT_OUT}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def documented_sha256(root: Path, names) -> str:
    """The hash as readings/README.md defines it, written out here: sha256 of ``sha256sum``'s lines
    for the files, sorted by path, first 16 hex digits."""
    lines = "".join(f"{hashlib.sha256((root / n).read_bytes()).hexdigest()}  {n}\n" for n in sorted(names))
    return hashlib.sha256(lines.encode()).hexdigest()[:16]


def recorded_identity(root: Path, name: str) -> dict:
    """``machine.json``'s ``recorder`` of the folder ``root/name``."""
    return json.loads((root / name / "machine.json").read_text())["recorder"]


def test_source_hash_changes_with_each_course_file_and_no_other(tmp_path):
    """The hash is the documented one over feedgpu/**/*.py and lfw_dataset.py: an edit of either, a
    rename and a new module change it, undoing the change restores it, and files outside it do not count."""
    root = fake_course(tmp_path / "course")
    assert course_source_files(root) == sorted(COUNTED), course_source_files(root)
    before = course_source_sha256(root)
    assert before == documented_sha256(root, COUNTED), f"{before}: not the documented hash of {sorted(COUNTED)}"

    def changed(edit, undo) -> bool:
        edit()
        after = course_source_sha256(root)
        undo()
        assert course_source_sha256(root) == before, "undoing the change should restore the hash"
        return after != before

    pinning_py, lfw_py = root / "feedgpu/measure/pinning.py", root / "lfw_dataset.py"
    for path in (pinning_py, lfw_py):
        text = path.read_text()
        assert changed(lambda: path.write_text(text + " "), lambda: path.write_text(text)), f"an edit of {path.name}"
    timing, renamed = root / "feedgpu/timing.py", root / "feedgpu/timer.py"
    assert changed(lambda: timing.rename(renamed), lambda: renamed.rename(timing)), "a rename, same bytes"
    new = root / "feedgpu/measure/new.py"
    assert changed(lambda: new.write_text(""), new.unlink), "a new module, even empty"
    for name in LEFT_OUT:
        path = root / name
        text = path.read_text()
        assert not changed(lambda: path.write_text(text + "more"), lambda: path.write_text(text)), (
            f"{name} is not the course's code and should not change the hash")


def test_record_names_the_course_version_and_the_hash_of_its_sources(tmp_path, monkeypatch, capsys):
    """machine.json's recorder names the package's version and the hash of the sources beside the
    package (here a fake tree), and the copy loops say so; an edit of a course file recorded again
    gives another hash."""
    course = fake_course(tmp_path / "course")
    monkeypatch.setattr(record, "SOURCE_ROOT", course)
    readings = tmp_path / "readings"
    assert main(["--root", str(readings), "--name", "before", "--quick"], instruments=FakeGPU().instruments()) == 0
    identity = recorded_identity(readings, "before")
    assert identity == {"name": "feedgpu-record", "version": importlib.metadata.version("feeding-the-gpu"),
                        "source_sha256": documented_sha256(course, COUNTED), "source_files": len(COUNTED)}, identity
    loops = json.loads((readings / "before" / "copy_loops.json").read_text())["loops"]
    assert all(identity["source_sha256"] in loop["source"] for loop in loops), loops[0]["source"]

    (course / "feedgpu/timing.py").write_text("SECONDS = 2.0\n")
    assert main(["--root", str(readings), "--name", "after", "--quick"], instruments=FakeGPU().instruments()) == 0
    after = recorded_identity(readings, "after")["source_sha256"]
    assert after != identity["source_sha256"] and after == documented_sha256(course, COUNTED), (
        f"after an edit of feedgpu/timing.py: {after}, before: {identity['source_sha256']}")
    capsys.readouterr()


def git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), "-c", "user.name=Test", "-c", "user.email=test@example.org",
                           "-c", "commit.gpgsign=false", *args], capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to make the enclosing repository")
def test_record_names_the_course_not_an_enclosing_git_repository(tmp_path, monkeypatch, capsys):
    """A copy of the course inside another git repository, recorded from that repository's folder,
    names the course's sources (the same hash as the same tree outside any repository), never that
    repository's commit; the course's real package, run from there, names its own sources."""
    outer = tmp_path / "other-project"
    course = fake_course(outer / "vendor" / "course")
    git(outer, "init", "-q")
    git(outer, "add", "-A")
    git(outer, "commit", "-q", "-m", "another project")
    commit = git(outer, "rev-parse", "HEAD").strip()
    alone = fake_course(tmp_path / "alone")  # the same tree, in no repository
    monkeypatch.chdir(outer)
    readings = tmp_path / "readings"

    monkeypatch.setattr(record, "SOURCE_ROOT", course)
    assert main(["--root", str(readings), "--name", "copy", "--quick"], instruments=FakeGPU().instruments()) == 0
    identity = recorded_identity(readings, "copy")
    assert identity["source_sha256"] == course_source_sha256(alone) == documented_sha256(alone, COUNTED), identity
    for name in sorted(p.name for p in (readings / "copy").iterdir()):
        text = (readings / "copy" / name).read_text()
        assert commit[:7] not in text, f"{name} names the enclosing repository's commit {commit[:7]}"

    monkeypatch.undo()  # the real course, still run from the other repository's folder
    monkeypatch.chdir(outer)
    assert main(["--root", str(readings), "--name", "real", "--quick"], instruments=FakeGPU().instruments()) == 0
    own = Path(feedgpu.__file__).resolve().parent.parent  # the package's folder's parent, where lfw_dataset.py is
    assert recorded_identity(readings, "real")["source_sha256"] == course_source_sha256(own), (
        f"the recorder run from {outer} should hash the sources beside its package, in {own}")
    assert commit[:7] not in (readings / "real" / "machine.json").read_text()
    capsys.readouterr()


# --------------------------------------------------------------------------- names and plans


def test_copy_kinds_are_those_a_readings_folder_records():
    """measure_copy_table's kinds are the eight of issue 29 and the repeated loops of issue 38, under the
    names feedgpu.readings reads."""
    assert COPY_KINDS == KINDS, COPY_KINDS


def test_default_name_is_the_gpu_and_the_date():
    """The default folder name is the GPU's name without the vendor, and the date (the H200 folder's form)."""
    assert default_name("NVIDIA H200", datetime.date(2026, 11, 26)) == "h200-2026-11-26"
    assert default_name("NVIDIA H100 80GB HBM3", datetime.date(2026, 11, 27)) == "h100-80gb-hbm3-2026-11-27"
    assert default_name("???", datetime.date(2026, 1, 2)) == "gpu-2026-01-02"


def test_default_workers_span_the_cores():
    """0, the powers of two below the cores, and one less than the cores."""
    assert default_workers(16) == [0, 1, 2, 4, 8, 15]
    assert default_workers(2) == [0, 1]
    assert default_workers(1) == [0]


# --------------------------------------------------------------------------- the guard


@pytest.fixture
def fresh_guard(monkeypatch):
    """empty_host_cache() has not said yet that it cannot empty the cache."""
    monkeypatch.setattr(pinning, "_SAID_NO_EMPTY_HOST_CACHE", False)


def test_empty_host_cache_without_the_function_says_so_once(monkeypatch, caplog, fresh_guard):
    """On a PyTorch without torch.accelerator.empty_host_cache (2.11), it returns False, raises
    nothing, and logs once."""
    monkeypatch.delattr(torch.accelerator, "empty_host_cache", raising=False)  # 2.11 has none to remove
    with caplog.at_level(logging.WARNING, logger=pinning.__name__):
        answers = [empty_host_cache(), empty_host_cache()]
    assert answers == [False, False], answers
    said = [r for r in caplog.records if "empty_host_cache" in r.getMessage()]
    assert len(said) == 1, f"logged once, not {len(said)} times: {[r.getMessage() for r in said]}"


def test_empty_host_cache_without_torch_accelerator(monkeypatch, fresh_guard):
    """On a PyTorch without torch.accelerator at all, it returns False and raises nothing."""
    monkeypatch.delattr(torch, "accelerator")
    assert empty_host_cache() is False


def test_empty_host_cache_calls_torch_where_it_can(monkeypatch):
    """Where torch.accelerator.empty_host_cache exists it is called, once, and the answer is True."""
    calls = []
    monkeypatch.setattr(torch.accelerator, "empty_host_cache", lambda: calls.append(1), raising=False)
    assert empty_host_cache() is True and calls == [1], calls


def test_first_pin_survives_a_torch_without_empty_host_cache(monkeypatch, fresh_guard):
    """measure_first_pin runs on PyTorch 2.11 (it raised AttributeError there) and records that the
    cache was not emptied. (CUDA faked: pinning is a copy here, and the call is let through.)"""
    monkeypatch.setattr(pinning, "_require_cuda", lambda what: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(pinning, "_host_blocks_allocated", lambda: None)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *args, **kwargs: self.clone())
    monkeypatch.delattr(torch.accelerator, "empty_host_cache", raising=False)
    first = measure_first_pin(MIB, repeats=2)
    assert first.cache_emptied is False and first.nbytes == MIB, first
    calls = []
    monkeypatch.setattr(torch.accelerator, "empty_host_cache", lambda: calls.append(1), raising=False)
    assert measure_first_pin(MIB, repeats=2).cache_emptied is True and calls == [1], calls


# --------------------------------------------------------------------------- no GPU

NEW_GPU_CALLS = {
    "measure_loop_copy_seconds": lambda: pinning.measure_loop_copy_seconds([MIB]),
    "measure_copy_table": lambda: pinning.measure_copy_table([MIB]),
}


@pytest.mark.skipif(CUDA, reason="checks that the GPU measurements skip without a GPU")
@pytest.mark.parametrize("name", sorted(NEW_GPU_CALLS))
def test_new_gpu_measurements_skip_cleanly_without_cuda(name):
    """Each new GPU measurement raises NoCudaError naming itself and saying there is no GPU."""
    with pytest.raises(NoCudaError) as caught:
        NEW_GPU_CALLS[name]()
    message = str(caught.value)
    assert name in message and "no CUDA GPU" in message, f"unclear skip message: {message!r}"
