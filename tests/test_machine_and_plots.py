"""Tests of feedgpu.measure.machine (the machine's description) and feedgpu.plots."""

from __future__ import annotations

import importlib.metadata
import math
import multiprocessing
import os
import sys
import types

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display in tests

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

from feedgpu import plots
from feedgpu.measure import machine  # noqa: E402
from feedgpu.palette import VERMILLION  # noqa: E402

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# --------------------------------------------------------------------------- environment


EXPECTED_KEYS = {
    "python", "platform", "torch", "torchvision", "logical_cores", "usable_cores",
    "physical_cores", "memory_bytes", "start_method", "torch_threads", "cuda_available",
    "cuda_device_count", "cuda_device_name", "mps_available", "device",
}  # the keys the docstring of describe_machine promises


@pytest.fixture
def known_machine(monkeypatch):
    """A machine of known shape: 64 logical cores, 3 of them ours, 32 physical, 96 GiB, no GPU."""
    import psutil
    import torchvision  # noqa: F401  (imported before torch.cuda is patched: its import inspects it)

    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 5, 9}, raising=False)
    monkeypatch.delattr(os, "process_cpu_count", raising=False)  # Python 3.13+ would ask it first
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 64 if logical else 32)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: types.SimpleNamespace(total=96 * 2**30))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def test_describe_machine_reports_the_machine_it_runs_on(known_machine):
    info = machine.describe_machine()
    missing = EXPECTED_KEYS - set(info)
    assert not missing, f"describe_machine() lacks keys {sorted(missing)}"
    assert info["logical_cores"] == 64, f"os.cpu_count() says 64, reported {info['logical_cores']}"
    assert info["usable_cores"] == 3, f"the affinity mask holds 3 cores, reported {info['usable_cores']}"
    assert info["physical_cores"] == 32, f"psutil says 32 physical cores, reported {info['physical_cores']}"
    assert info["memory_bytes"] == 96 * 2**30, f"96 GiB of memory, reported {info['memory_bytes']}"
    assert info["device"] == "cpu" and info["cuda_available"] is False and info["mps_available"] is False, (
        f"no GPU: device cpu, got {info['device']}"
    )
    assert any("3 of the machine's 64 cores" in note for note in machine.machine_notes(info)), (
        f"the notes should say that only 3 of 64 cores are usable: {machine.machine_notes(info)}"
    )


def test_usable_cores_never_exceeds_logical_and_falls_back(monkeypatch):
    monkeypatch.delattr(os, "process_cpu_count", raising=False)
    info = machine.describe_machine()  # the real machine
    assert 1 <= info["usable_cores"] <= info["logical_cores"], (
        f"usable cores {info['usable_cores']} must lie in 1..logical cores {info['logical_cores']}"
    )

    def refuse(pid):
        raise OSError("not allowed in this sandbox")

    monkeypatch.setattr(os, "sched_getaffinity", refuse, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert machine.usable_cores() == 6, "when the affinity cannot be read, all logical cores count"
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert machine.usable_cores() == 1, "when nothing is known, one core"
    monkeypatch.setattr(os, "process_cpu_count", lambda: 5, raising=False)
    assert machine.usable_cores() == 5, "Python 3.13's os.process_cpu_count() comes first"


def test_describe_machine_versions_are_the_installed_ones():
    info = machine.describe_machine()
    assert info["python"] == "{}.{}.{}".format(*sys.version_info[:3]), f"python {info['python']!r}"
    for package in ("torch", "torchvision"):
        installed = importlib.metadata.version(package)  # the wheel's version, without the local +cu tag
        assert info[package].split("+")[0] == installed.split("+")[0], (
            f"{package}: reported {info[package]!r}, installed {installed!r}"
        )


def test_describe_machine_reads_torchvision_s_version_without_importing_it():
    """A notebook's configuration cell does not pay for ``import torchvision`` (it imports
    torch._dynamo) when the notebook never uses torchvision; the version is the package's own,
    local tag included, the same as ``torchvision.__version__``."""
    import subprocess

    code = ("import sys\nfrom feedgpu.measure.machine import describe_machine\n"
            "v = describe_machine()['torchvision']\nprint(v, 'torchvision' in sys.modules)\n"
            "import torchvision\nprint(torchvision.__version__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    (reported, imported), (actual,) = done.stdout.split("\n")[0].split(), done.stdout.split("\n")[1].split()
    assert imported == "False", "describe_machine imported torchvision"
    assert reported == actual, f"reported {reported!r}, torchvision says {actual!r}"


def test_describe_machine_picks_cuda_then_mps_then_cpu(known_machine, monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    info = machine.describe_machine()
    assert info["device"] == "mps" and info["mps_available"], f"an Apple GPU alone gives mps: {info['device']}"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "Test GPU 80GB")
    info = machine.describe_machine()
    assert info["device"] == "cuda", f"CUDA wins over MPS, got {info['device']}"
    assert info["cuda_device_count"] == 2 and info["cuda_device_name"] == "Test GPU 80GB", (
        f"the GPU's count and name: {info['cuda_device_count']}, {info['cuda_device_name']!r}"
    )


def test_start_method_is_the_default_and_not_fixed():
    before = multiprocessing.get_start_method(allow_none=True)
    method = machine.start_method()
    assert method in multiprocessing.get_all_start_methods(), f"unknown start method {method!r}"
    if before is None:
        assert method == multiprocessing.get_all_start_methods()[0], "the default is the first listed method"
    assert multiprocessing.get_start_method(allow_none=True) == before, (
        "start_method() must not fix the start method as a side effect"
    )


def test_print_machine_prints_a_labelled_table(capsys):
    info = machine.describe_machine()
    machine.print_machine(info)
    out = capsys.readouterr().out
    for label in ("Python", "torch", "logical cores", "usable cores", "physical cores",
                  "memory", "start method", "CUDA GPU", "device"):
        assert label in out, f"print_machine() output lacks the label {label!r}:\n{out}"
    assert info["start_method"] in out, "the start method's value must be printed"


def test_print_machine_handles_unknowns(capsys):
    info = {"python": "3.x", "start_method": "spawn", "device": "cpu", "physical_cores": None,
            "memory_bytes": None}
    machine.print_machine(info)
    out = capsys.readouterr().out
    assert "unknown" in out, "missing values must print as 'unknown'"
    assert any("spawn" in note and "module" in note for note in machine.machine_notes(info)), (
        "under spawn the notes must say that Dataset classes need a module"
    )


# --------------------------------------------------------------------------- show_faces


def _rgb(color, size=(20, 16)):
    return Image.new("RGB", size, color)


class _TinyFaces(torch.utils.data.Dataset):
    classes = ["Ada_Lovelace", "Alan_Turing"]

    def __len__(self):
        return 3

    def __getitem__(self, i):
        return _rgb((80 * i, 0, 0)), i % 2


def test_show_faces_from_dataset_uses_class_names():
    ax = plots.show_faces(_TinyFaces(), n=16)
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["Ada Lovelace", "Alan Turing", "Ada Lovelace"], f"names drawn: {texts}"
    assert len(ax.images) == 1, "the faces must be drawn as one grid image"
    assert ax.get_title() == "3 faces", f"default title {ax.get_title()!r}"


def test_show_faces_from_batch_tensor_grid_shape():
    batch = torch.rand(6, 3, 10, 12)
    ax = plots.show_faces(batch, labels=torch.tensor([0, 1, 0, 1, 0, 1]), classes=["a", "b"],
                          n=4, nrow=2, title="four")
    grid = ax.images[0].get_array()
    # make_grid with padding 2: 2 rows x (10 + 2) + 2 by 2 cols x (12 + 2) + 2
    assert grid.shape[:2] == (2 * 12 + 2, 2 * 14 + 2), f"grid shape {grid.shape}"
    assert [t.get_text() for t in ax.texts] == ["a", "b", "a", "b"], "labels of the first n faces"
    assert ax.get_title() == "four", "an explicit title must be used"


def test_show_faces_mixed_inputs_and_own_axes():
    images = [torch.rand(1, 8, 8), torch.randint(0, 255, (3, 16, 16), dtype=torch.uint8),
              torch.randn(3, 8, 8)]
    fig, ax = plt.subplots()
    out = plots.show_faces(images, labels=[0, 1, 2], ax=ax)
    assert out is ax, "show_faces must draw on the Axes it is given and return it"
    grid = ax.images[0].get_array()
    assert grid.min() >= 0 and grid.max() <= 1, "displayed values must lie in [0, 1]"


def test_show_faces_rejects_empty_and_bad_shapes():
    with pytest.raises(ValueError):
        plots.show_faces([], labels=[])
    with pytest.raises(ValueError):
        plots.show_faces(torch.rand(3, 8, 8))  # one image, not a batch


# --------------------------------------------------------------------------- the timeline


@pytest.mark.parametrize("load_s, step_s", [(0.03, 0.02), (0.02, 0.05), (0.04, 0.04), (0.0, 0.01)])
def test_schedule_totals_follow_the_model(load_s, step_s):
    n = 7
    serial = plots._schedule(load_s, step_s, n, overlapped=False)
    overlap = plots._schedule(load_s, step_s, n, overlapped=True)
    assert math.isclose(serial["total"], n * (load_s + step_s)), f"serial total {serial['total']}"
    expected = load_s + step_s + (n - 1) * max(load_s, step_s)
    assert math.isclose(overlap["total"], expected), f"overlapped total {overlap['total']} != {expected}"
    for k in range(n):
        assert overlap["step"][k] >= overlap["load"][k] + load_s - 1e-12, f"step {k} starts before its batch is loaded"
        if k:
            assert overlap["step"][k] >= overlap["step"][k - 1] + step_s - 1e-12, f"steps {k - 1} and {k} overlap"
            assert overlap["load"][k] >= overlap["load"][k - 1] + load_s - 1e-12, f"loads {k - 1} and {k} overlap"


def test_schedule_rejects_bad_arguments():
    for args in [(-0.1, 0.1, 3), (0.1, -0.1, 3), (0.1, 0.1, 0), (0.1, 0.1, 2.5)]:
        with pytest.raises(ValueError):
            plots._schedule(*args, overlapped=True)


def test_plot_overlap_timeline_draws_four_lanes():
    ax = plots.plot_overlap_timeline(0.03, 0.02, 5)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert sorted(labels) == sorted(["serial: load", "serial: step", "overlapped: load", "overlapped: step"]), (
        f"lane labels {labels}"
    )
    bars = [c for c in ax.collections if len(c.get_paths()) == 5]
    assert len(bars) == 4, f"expected 4 lanes of 5 bars, found {len(bars)}"
    text = " ".join(t.get_text() for t in ax.texts)
    assert "0.25 s" in text and "0.17 s" in text, f"the two end times must be written: {text!r}"


# --------------------------------------------------------------------------- bars


def test_bar_with_error_means_and_errors():
    ax = plots.bar_with_error(["a", "b"], [[1.0, 2.0, 3.0], [5.0]], ylabel="s", predicted=[2.0, 4.0])
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx([2.0, 5.0]), f"bar heights {heights} are not the means"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b"], "tick labels"
    assert ax.get_ylabel() == "s", "y label"
    with pytest.raises(ValueError):
        plots.bar_with_error(["a"], [[]])
    with pytest.raises(ValueError):
        plots.bar_with_error(["a", "b"], [[1.0]])


# --------------------------------------------------------------------------- what each rank loaded


def _seen(rows):
    """A table like feedgpu.distributed.seen.read_seen's: (rank, epoch, position, sample_id, worker)."""
    import pandas as pd

    return pd.DataFrame(rows, columns=["rank", "epoch", "position", "sample_id", "worker"])


def test_plot_seen_draws_one_box_per_sample_and_frames_duplicates():
    # 5 ids on 2 ranks, padded with id 2 in epoch 0; epoch 1 has no duplicate
    seen = _seen([(0, 0, 0, 2, 0), (0, 0, 1, 4, 0), (0, 0, 2, 1, 0), (1, 0, 0, 0, 0), (1, 0, 1, 3, 0),
                  (1, 0, 2, 2, 0), (0, 1, 0, 1, 0), (1, 1, 0, 0, 0)])
    ax = plots.plot_seen(seen, title="t")
    boxes = [p for p in ax.patches if isinstance(p, matplotlib.patches.Rectangle)]
    assert len(boxes) == len(seen), f"{len(boxes)} boxes for {len(seen)} samples"
    frame = matplotlib.colors.to_rgb(VERMILLION)
    framed = sorted(int(t.get_text()) for p, t in zip(boxes, ax.texts)
                    if p.get_edgecolor()[3] > 0 and tuple(p.get_edgecolor()[:3]) == pytest.approx(frame))
    assert framed == [2, 2], f"only id 2, loaded twice in epoch 0, is framed: {framed}"
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["epoch 0, rank 0", "epoch 0, rank 1", "epoch 1, rank 0", "epoch 1, rank 1"], labels
    assert ax.get_xlim() == (0, 3), f"3 positions at most: {ax.get_xlim()}"
    assert ax.get_title() == "t"


def test_plot_copies_stacks_each_loader_up_to_the_times_each_id_was_loaded():
    # ids 0..3: by rank only with 2 workers, each rank's ids come once per worker
    seen = _seen([(0, 0, 0, 0, 0), (0, 0, 1, 2, 0), (0, 0, 2, 0, 1), (0, 0, 3, 2, 1),
                  (1, 0, 0, 1, 0), (1, 0, 1, 3, 0), (1, 0, 2, 1, 1)])
    ax = plots.plot_copies(seen, 5)
    totals = [0.0] * 5
    for bar in ax.patches:
        totals[round(bar.get_x() + bar.get_width() / 2)] += bar.get_height()
    assert totals == [2, 2, 2, 1, 0], f"times each id was loaded: {totals}"
    legend = ax.get_legend_handles_labels()[1]
    assert legend == ["rank 0, worker 0", "rank 0, worker 1", "rank 1, worker 0", "rank 1, worker 1"], legend
    assert len(ax.patches) == 4 * 5, "one segment per loader and id"


def test_plot_busy_shares_stacks_the_three_shares_of_each_run():
    rows = {"slow": {"busy_share": 0.2, "waiting_share": 0.75, "other_share": 0.05},
            "fixed": {"busy_share": 0.9, "waiting_share": 0.06, "other_share": 0.04}}
    ax = plots.plot_busy_shares(rows, target=0.85)
    bars = [p for p in ax.patches if isinstance(p, matplotlib.patches.Rectangle)]
    assert len(bars) == 6, f"3 stacked bars per run: {len(bars)}"
    ends = sorted(round(b.get_x() + b.get_width(), 6) for b in bars)
    assert ends[-2:] == [1.0, 1.0], f"each run's three shares end at 1: {ends}"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["slow", "fixed"]
    assert any(line.get_xdata()[0] == 0.85 for line in ax.get_lines()), "the target line"


def test_plot_fix_progress_puts_one_point_per_fix_and_the_prediction():
    ax = plots.plot_fix_progress(["slow", "+ a", "+ b"], [0.2, 0.5, 0.9], [0.25, 0.45, 0.95], target=0.85)
    measured = [line for line in ax.get_lines() if line.get_label() == "measured"][0]
    predicted = [line for line in ax.get_lines() if line.get_label() == "predicted"][0]
    assert list(measured.get_ydata()) == [0.2, 0.5, 0.9] and list(predicted.get_ydata()) == [0.25, 0.45, 0.95]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["slow", "+ a", "+ b"]
