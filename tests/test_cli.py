"""The command line, with the flags of the DTU MLOps LFW exercise."""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image
from torch.utils.data import DataLoader

import lfw_dataset
from lfw_dataset import time_loader_cli

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "MPLBACKEND": "Agg", **(env_extra or {})}
    env.pop("DISPLAY", None)
    return subprocess.run([sys.executable, str(ROOT / "lfw_dataset.py"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _assert_png(path: Path) -> None:
    with Image.open(path) as img:
        assert img.format == "PNG" and min(img.size) > 100, f"a readable grid: {img.format} {img.size}"


def test_visualize_batch_writes_the_png_named_by_output(tiny_lfw, tmp_path):
    out = tmp_path / "grids" / "faces.png"
    proc = run_cli("-path_to_folder", str(tiny_lfw), "-batch_size", "4", "-visualize_batch",
                   "-output", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out.is_file(), f"no PNG at {out}; stdout: {proc.stdout}"
    _assert_png(out)
    assert f"grid written to {out}" in proc.stdout, f"the path is printed: {proc.stdout}"
    assert "(4, 3, 32, 32)" in proc.stdout, proc.stdout


def test_visualize_batch_writes_under_build_not_the_working_folder(tiny_lfw, tmp_path):
    expected = ROOT / "build" / "lfw_batch.png"
    started = time.time()
    proc = run_cli("-path_to_folder", str(tiny_lfw), "-batch_size", "4", "-visualize_batch", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert f"grid written to {expected}" in proc.stdout, f"the path under build/ is printed: {proc.stdout}"
    assert expected.is_file() and expected.stat().st_mtime >= started - 1, f"no fresh PNG at {expected}"
    _assert_png(expected)
    assert not (ROOT / "lfw_batch.png").exists(), "nothing is written into the repository root"


def test_get_timing_prints_mean_and_std_over_five_repeats(tiny_lfw, tmp_path):
    proc = run_cli("-path_to_folder", str(tiny_lfw), "-batch_size", "2", "-num_workers", "1",
                   "-get_timing", "-batches_to_check", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    match = re.search(r"Timing: (\d+\.\d+) ± (\d+\.\d+) s for 2 batches \((\d+) repeats", proc.stdout)
    assert match, f"the timing line is missing: {proc.stdout}"
    mean, std, repeats = float(match[1]), float(match[2]), int(match[3])
    assert repeats == 5 and mean > 0 and std >= 0, match.groups()


class _SleepItems:
    """A dataset whose items each take ``sleep_s`` of waiting: a loader of known cost."""

    def __init__(self, n: int, sleep_s: float) -> None:
        self.n, self.sleep_s = n, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        time.sleep(self.sleep_s)
        return index


@pytest.mark.parametrize("warmup", [1, 3])
def test_timing_measures_exactly_the_asked_batches(warmup):
    """time_loader_cli (what -get_timing prints) on a loader whose batches cost a known time."""
    sleep_s, batch_size, batches, repeats = 0.03, 2, 2, 3
    loader = DataLoader(_SleepItems(40, sleep_s), batch_size=batch_size, num_workers=0)
    times = time_loader_cli(loader, batches, repeats=repeats, warmup=warmup)
    assert len(times) == repeats, f"one time per repeat: {times}"
    expected_s = batches * batch_size * sleep_s
    ratios = [t / expected_s for t in times]
    # A sleep never ends early, so every repeat costs at least its 2 batches (a pass that
    # reused an exhausted iterator would cost nothing). Timing one batch more or less (a
    # warm-up batch, an off-by-one) is off by a factor 1.5 or 0.5: the upper bound of 1.3
    # on the mean leaves room for a busy machine's late wake-ups.
    assert min(ratios) >= 0.97, f"a repeat took less than its {batches} batches' sleeps: {ratios}"
    mean_ratio = statistics.fmean(times) / expected_s
    assert mean_ratio < 1.3, f"mean {statistics.fmean(times):.3f} s for {expected_s:.3f} s of sleeps: {ratios}"


def test_no_arguments_runs_on_the_default_data(tiny_lfw, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(tiny_lfw, home / "lfw-synthetic")
    proc = run_cli(cwd=tmp_path, env_extra={"FEEDGPU_DATA": str(home), "FEEDGPU_LFW": ""})
    assert proc.returncode == 0, proc.stderr
    assert "people=4, images=8" in proc.stdout, proc.stdout
    assert "first batch: images (8, 3, 32, 32)" in proc.stdout, proc.stdout


def test_missing_folder_exits_2_with_the_fix(tmp_path):
    proc = run_cli("-path_to_folder", str(tmp_path / "lfw"), cwd=tmp_path)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "make data" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_double_dash_spellings_also_work(tiny_lfw, tmp_path):
    proc = run_cli("--path-to-folder", str(tiny_lfw), "--batch-size", "3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "first batch: images (3, 3, 32, 32)" in proc.stdout, proc.stdout


@pytest.mark.parametrize("flag", ["-batch_size", "-num_workers", "-batches_to_check"])
def test_bad_numbers_are_rejected(flag, tmp_path):
    proc = run_cli(flag, "many", cwd=tmp_path)
    assert proc.returncode == 2 and "invalid int value" in proc.stderr, proc.stderr


def test_failed_download_exits_1_with_the_fix(monkeypatch, capsys):
    def failing_prepare(kind: str) -> None:
        raise lfw_dataset.DownloadError(f"could not download {kind}; run `make data LFW=real` again")

    monkeypatch.setattr(lfw_dataset, "prepare", failing_prepare)
    status = lfw_dataset.main(["-prepare", "real"])
    err = capsys.readouterr().err
    assert status == 1, f"a failed download is exit status 1, got {status}"
    assert err.startswith("error: could not download real") and "make data LFW=real" in err, err
