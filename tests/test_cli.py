"""The command line, with the flags of the DTU MLOps LFW exercise."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "MPLBACKEND": "Agg", **(env_extra or {})}
    env.pop("DISPLAY", None)
    return subprocess.run([sys.executable, str(ROOT / "lfw_dataset.py"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_visualize_batch_writes_a_png_without_display(tiny_lfw, tmp_path):
    proc = run_cli("-path_to_folder", str(tiny_lfw), "-batch_size", "4", "-visualize_batch", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    png = tmp_path / "lfw_batch.png"
    assert png.is_file(), proc.stdout
    with Image.open(png) as img:
        assert img.format == "PNG" and min(img.size) > 100, (img.format, img.size)
    assert "(4, 3, 32, 32)" in proc.stdout, proc.stdout


def test_get_timing_prints_mean_and_std_over_five_repeats(tiny_lfw, tmp_path):
    proc = run_cli("-path_to_folder", str(tiny_lfw), "-batch_size", "2", "-num_workers", "1",
                   "-get_timing", "-batches_to_check", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    match = re.search(r"Timing: (\d+\.\d+) ± (\d+\.\d+) s for 2 batches \((\d+) repeats", proc.stdout)
    assert match, proc.stdout
    mean, std, repeats = float(match[1]), float(match[2]), int(match[3])
    assert repeats == 5 and mean > 0 and std >= 0, match.groups()


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
