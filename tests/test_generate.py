"""Making the offline synthetic LFW tree: atomic, deterministic, with the real LFW's numbers."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

import lfw_dataset
from feedgpu.data import faces, lfw_stats

# tests of the module; those also marked `slow` read the full data set made by `make data`
pytestmark = pytest.mark.unit


def _digest(tree: Path) -> dict[str, str]:
    return {str(p.relative_to(tree)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(tree.rglob("*.jpg"))}


def test_small_tree_is_complete_and_in_lfw_layout(tmp_path):
    tree = lfw_dataset.generate_synthetic_lfw(tmp_path / "lfw", max_people=12, processes=2, progress=False)
    assert (tree / ".complete").is_file(), "a finished tree carries its marker"
    people = sorted(p.name for p in tree.iterdir() if p.is_dir())
    assert len(people) == 12, people
    counts = lfw_stats.lfw_image_counts()[:12]
    for person, n in zip(lfw_stats.person_names()[:12], counts):
        files = sorted(f.name for f in (tree / person).iterdir())
        assert files == [f"{person}_{k:04d}.jpg" for k in range(1, n + 1)], (person, files[:3])
    ds = lfw_dataset.LFWDataset(tree)
    assert len(ds) == sum(counts) and ds[0][0].size == (250, 250) and ds[0][0].mode == "RGB", (
        f"{len(ds)} images of {ds[0][0].size} {ds[0][0].mode}; expected {sum(counts)} of 250x250 RGB")


def test_same_seed_same_bytes_any_process_count(tmp_path):
    a = lfw_dataset.generate_synthetic_lfw(tmp_path / "a", max_people=6, processes=1, progress=False)
    b = lfw_dataset.generate_synthetic_lfw(tmp_path / "b", max_people=6, processes=2, progress=False)
    c = lfw_dataset.generate_synthetic_lfw(tmp_path / "c", max_people=6, seed=1, processes=1, progress=False)
    assert _digest(a) == _digest(b), "the pool must not change the output"
    assert _digest(a) != _digest(c) and len(_digest(a)) > 0, "another seed gives other faces"


def test_complete_tree_is_not_remade(tmp_path):
    tree = lfw_dataset.generate_synthetic_lfw(tmp_path / "lfw", max_people=3, processes=1, progress=False)
    stamp = (tree / ".complete").stat().st_mtime_ns
    marker_files = list(tree.rglob("*.jpg"))
    lfw_dataset.generate_synthetic_lfw(tmp_path / "lfw", max_people=3, processes=1, progress=False)
    assert (tree / ".complete").stat().st_mtime_ns == stamp and list(tree.rglob("*.jpg")) == marker_files, (
        "a complete tree is left as it is")


def test_failure_leaves_no_half_tree(tmp_path, monkeypatch):
    calls = []
    real = faces.write_person

    def failing(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 4:
            raise KeyboardInterrupt  # as if the user pressed Ctrl-C half-way
        return real(*args, **kwargs)

    monkeypatch.setattr(faces, "write_person", failing)
    with pytest.raises(KeyboardInterrupt):
        lfw_dataset.generate_synthetic_lfw(tmp_path / "lfw", max_people=8, processes=1, progress=False)
    assert len(calls) == 4, "the failure happened part-way"
    assert os.listdir(tmp_path) == [], f"nothing left behind: {os.listdir(tmp_path)}"


def test_progress_bar_is_shown(tmp_path, capsys):
    lfw_dataset.generate_synthetic_lfw(tmp_path / "lfw", max_people=2, processes=1, progress=True)
    err = capsys.readouterr().err
    assert "synthetic LFW" in err and "img" in err, err[-300:]


@pytest.fixture(scope="module")
def made_tree() -> Path:
    tree = lfw_dataset.default_root("synthetic")
    if not (tree / ".complete").is_file():
        pytest.skip("the full synthetic tree is made by `make data` (make test depends on it)")
    return tree


@pytest.mark.slow
def test_full_tree_has_lfw_numbers(made_tree):
    counts = sorted((len(os.listdir(p)) for p in made_tree.iterdir() if p.is_dir()), reverse=True)
    assert len(counts) == 5749 and sum(counts) == 13233, (len(counts), sum(counts))
    assert sum(c >= 2 for c in counts) == 1680, "people with two or more images"
    assert counts[:7] == [530, 236, 144, 121, 109, 77, 71], counts[:7]


@pytest.mark.slow
def test_full_tree_file_sizes_are_lfw_like(made_tree):
    files = sorted(made_tree.rglob("*.jpg"))[::25]  # ~530 files spread over all people
    mean_kb = sum(f.stat().st_size for f in files) / len(files) / 1024
    assert 9 <= mean_kb <= 20, f"mean file size {mean_kb:.1f} KB (real LFW: about 13 KB)"
