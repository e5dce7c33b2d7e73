"""The dataset module: scanning, labels, loading, transforms and every bad input."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

import lfw_dataset
from feedgpu.measure.timing import shutdown_workers
from lfw_dataset import CorruptImageError, LFWDataset, find_classes, load_image, make_samples

from conftest import TINY_PEOPLE

# tests of the module; the one also marked `slow` starts a spawned worker (about 10 s)
pytestmark = pytest.mark.unit


def test_find_classes_sorted_in_code_point_order(tiny_lfw):
    classes, class_to_idx = find_classes(tiny_lfw)
    assert classes == ["Bob_B", "Carl_C", "alice_A", "zoe_Last"], f"unsorted or wrong: {classes}"
    assert class_to_idx == {"Bob_B": 0, "Carl_C": 1, "alice_A": 2, "zoe_Last": 3}, "labels must start at 0"


def test_find_classes_skips_hidden_and_files(tiny_lfw):
    classes, _ = find_classes(tiny_lfw)
    assert ".hidden_person" not in classes and "README.txt" not in classes, classes


def test_make_samples_ignores_non_images_and_sorts(tiny_lfw):
    _, class_to_idx = find_classes(tiny_lfw)
    samples = make_samples(tiny_lfw, class_to_idx)
    names = [Path(p).name for p, _ in samples]
    assert names == ["Bob_B_0001.jpg", "Bob_B_0002.jpg", "Bob_B_0003.jpg", "Carl_C_0001.jpg",
                     "alice_A_0001.jpg", "alice_A_0002.jpg", "alice_A_0003.png",
                     "zoe_Last_0001.jpg"], names
    assert [label for _, label in samples] == [0, 0, 0, 1, 2, 2, 2, 3], "label of each file"


def test_dataset_attributes(tiny_lfw):
    ds = LFWDataset(tiny_lfw)
    assert len(ds) == sum(TINY_PEOPLE.values()) + 1, "one extra PNG was added to alice_A"
    assert ds.targets == [label for _, label in ds.samples], "targets follow samples"
    assert ds.root == tiny_lfw, f"root is the folder given: {ds.root}"


def test_dataset_matches_imagefolder_oracle(tiny_lfw):
    shutil.rmtree(tiny_lfw / ".hidden_person")  # ImageFolder does not skip hidden folders
    ours = LFWDataset(tiny_lfw, transform=transforms.ToTensor())
    oracle = datasets.ImageFolder(str(tiny_lfw), transform=transforms.ToTensor())
    assert ours.classes == oracle.classes, "same people in the same order"
    assert ours.class_to_idx == oracle.class_to_idx, "same labels"
    assert ours.samples == oracle.samples, "same files with the same labels"
    for i in range(len(oracle)):
        (a, la), (b, lb) = ours[i], oracle[i]
        assert la == lb, f"label of item {i}"
        assert torch.equal(a, b), f"pixels of item {i}"


def test_images_are_rgb_whatever_the_file(tiny_lfw):
    ds = LFWDataset(tiny_lfw)
    modes = {Path(p).name: ds[i][0].mode for i, (p, _) in enumerate(ds.samples)}
    assert set(modes.values()) == {"RGB"}, modes
    gray = Path(ds.samples[1][0])
    assert file_mode(gray) == "L", "the fixture must really contain a grayscale file"


def file_mode(path: Path) -> str:
    from PIL import Image

    with Image.open(path) as img:
        return img.mode


def test_transform_and_target_transform_are_applied(tiny_lfw):
    calls = []

    def transform(img):
        calls.append(img.size)
        return "T"

    ds = LFWDataset(tiny_lfw, transform=transform, target_transform=lambda y: y + 100)
    assert ds[3] == ("T", 101), ds[3]
    assert calls == [(32, 32)], calls


def test_to_tensor_gives_float_chw(tiny_lfw):
    image, label = LFWDataset(tiny_lfw, transform=transforms.ToTensor())[0]
    assert isinstance(image, torch.Tensor) and image.shape == (3, 32, 32), image.shape
    assert image.dtype == torch.float32 and 0 <= image.min() and image.max() <= 1, (image.dtype, image.min(), image.max())
    assert isinstance(label, int), f"the label stays an int: {type(label)}"


def test_min_images_per_person_relabels_contiguously(tiny_lfw):
    ds = LFWDataset(tiny_lfw, min_images_per_person=2)
    assert ds.classes == ["Bob_B", "alice_A"], ds.classes
    assert ds.class_to_idx == {"Bob_B": 0, "alice_A": 1}, f"labels of the kept people, from 0: {ds.class_to_idx}"
    assert sorted(set(ds.targets)) == [0, 1] and len(ds) == 6, (ds.targets, len(ds))
    with pytest.raises(ValueError, match="min_images_per_person"):
        LFWDataset(tiny_lfw, min_images_per_person=0)


def test_missing_folder_says_how_to_make_data(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"make data") as err:
        LFWDataset(tmp_path / "nowhere")
    assert "nowhere" in str(err.value), "the message names the folder"


def test_file_instead_of_folder(tmp_path):
    f = tmp_path / "lfw.tgz"
    f.write_bytes(b"x")
    with pytest.raises(NotADirectoryError, match="lfw.tgz"):
        LFWDataset(f)


def test_empty_folder_says_so(tmp_path):
    (tmp_path / "lfw" / "Somebody").mkdir(parents=True)
    (tmp_path / "lfw" / "Somebody" / "notes.txt").write_text("no images here")
    with pytest.raises(ValueError, match="no images found"):
        LFWDataset(tmp_path / "lfw")


@pytest.fixture
def corrupt_lfw(tiny_lfw):
    good = tiny_lfw / "Carl_C" / "Carl_C_0001.jpg"
    data = good.read_bytes()
    good.write_bytes(data[: len(data) // 2])  # truncated JPEG
    return tiny_lfw, good


def test_truncated_jpeg_names_the_file(corrupt_lfw):
    root, bad = corrupt_lfw
    ds = LFWDataset(root)
    index = [Path(p) for p, _ in ds.samples].index(bad)
    with pytest.raises(CorruptImageError, match="Carl_C_0001.jpg"):
        ds[index]
    ds[0]  # the others still load


def test_garbage_with_image_name_names_the_file(tmp_path):
    bad = tmp_path / "lfw" / "P" / "P_0001.jpg"
    bad.parent.mkdir(parents=True)
    bad.write_text("<html>404 not found</html>")
    with pytest.raises(CorruptImageError, match="P_0001.jpg"):
        load_image(bad)
    assert issubclass(CorruptImageError, OSError), "an OSError, so it crosses DataLoader workers intact"


def test_corrupt_file_error_crosses_workers_with_its_name(corrupt_lfw):
    root, _ = corrupt_lfw
    iterator = iter(DataLoader(LFWDataset(root, transform=transforms.ToTensor()), batch_size=1, num_workers=2))
    try:
        with pytest.raises(CorruptImageError, match="Carl_C_0001.jpg"):
            for _ in iterator:
                pass
    finally:  # now: the error's traceback keeps the iterator, whose collection later waits 5 s a worker
        shutdown_workers(iterator)


def test_loader_with_workers_matches_indexing(tiny_lfw):
    ds = LFWDataset(tiny_lfw, transform=transforms.Compose([transforms.Resize(16), transforms.ToTensor()]))
    expected = torch.stack([ds[i][0] for i in range(len(ds))])
    got = torch.cat([x for x, _ in DataLoader(ds, batch_size=3, num_workers=2)])
    assert torch.equal(got, expected), "workers must return the same items, in order"


@pytest.mark.slow
def test_works_under_spawn(tiny_lfw):
    """The class lives in a module, so spawned workers can import it (macOS, Windows)."""
    ds = LFWDataset(tiny_lfw, transform=transforms.Compose([transforms.Resize(16), transforms.ToTensor()]))
    loader = DataLoader(ds, batch_size=4, num_workers=1, multiprocessing_context="spawn")
    labels = torch.cat([y for _, y in loader]).tolist()
    assert labels == ds.targets, labels


def test_pickle_round_trip(tiny_lfw):
    ds = LFWDataset(tiny_lfw, transform=transforms.ToTensor())
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.samples == ds.samples and torch.equal(clone[2][0], ds[2][0]), "a pickled copy reads the same items"


def test_data_home_env_and_default_root(tmp_path, monkeypatch):
    monkeypatch.setenv("FEEDGPU_DATA", str(tmp_path))
    monkeypatch.delenv("FEEDGPU_LFW", raising=False)
    assert lfw_dataset.get_data_home() == tmp_path, "FEEDGPU_DATA moves the data home"
    assert lfw_dataset.default_root() == tmp_path / "lfw-synthetic", "synthetic unless real exists"
    (tmp_path / "lfw-real").mkdir()
    assert lfw_dataset.default_root() == tmp_path / "lfw-real", "the real tree wins once made"
    monkeypatch.setenv("FEEDGPU_LFW", str(tmp_path / "mine"))
    assert lfw_dataset.default_root() == tmp_path / "mine", "FEEDGPU_LFW names the tree itself"
    assert lfw_dataset.get_data_home(tmp_path / "x") == tmp_path / "x", "explicit argument wins"
    with pytest.raises(ValueError, match="unknown LFW kind"):
        lfw_dataset.default_root("imagenet")
