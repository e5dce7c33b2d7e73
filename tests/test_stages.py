"""Notebook 04's instruments: stage timing (feedgpu.measure.stages), decoders and per-worker randomness (feedgpu.workloads.lfw)."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms

from feedgpu.measure import stages
from feedgpu.workloads import lfw as lfw_workloads

from conftest import write_face

FORK = "fork" in multiprocessing.get_all_start_methods()


@pytest.fixture
def jpegs(tmp_path):
    paths = []
    for k in range(6):
        path = tmp_path / f"face_{k}.jpg"
        write_face(path, seed=k, size=40)
        paths.append(path)
    return paths


def test_decoders_agree_with_pil(jpegs):
    data = lfw_workloads.read_bytes(jpegs[0])
    assert data == jpegs[0].read_bytes(), "read_bytes returns the file's bytes"
    pil = np.asarray(lfw_workloads.decode_pil(data).convert("RGB"))
    with Image.open(jpegs[0]) as img:
        assert np.array_equal(pil, np.asarray(img.convert("RGB"))), "decode_pil = PIL's own decode"
    tensor = lfw_workloads.decode_tensor(data)
    assert tensor.dtype == torch.uint8 and tensor.shape == (3, 40, 40), tensor.shape
    assert np.abs(tensor.permute(1, 2, 0).numpy().astype(int) - pil.astype(int)).mean() < 2, \
        "decode_jpeg and PIL decode the same JPEG to (nearly) the same pixels"


def test_time_stages_reports_every_stage_per_image(jpegs):
    times = stages.time_stages(jpegs, transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                                batch_size=3, repeats=2)
    assert list(times) == list(stages.STAGES), f"one entry per stage, in order: {list(times)}"
    assert all(t >= 0 for t in times.values()) and times["decode"] > 0, times


def test_heavy_augmentation_costs_more_than_light(jpegs):
    paths = jpegs * 4
    heavy = transforms.Compose([transforms.RandomAffine(5, (0.1, 0.1), (0.5, 2.0)),
                                transforms.ColorJitter(0.4, 0.4, 0.4, 0.1)])
    light = stages.time_stages(paths, transforms.RandomHorizontalFlip(), transforms.ToTensor(), repeats=3)
    heavy_t = stages.time_stages(paths, heavy, transforms.ToTensor(), repeats=3)
    assert heavy_t["augment"] > 1.5 * light["augment"], (light["augment"], heavy_t["augment"])


def test_numpy_generator_in_init_repeats_across_workers():
    """The pitfall is real: two workers holding copies of one Generator draw the same numbers."""
    drawn = lfw_workloads.params_by_worker(lfw_workloads.AffineParams(8, seed=1, source="numpy"),
                                     num_workers=2, items_per_worker=4, context="fork" if FORK else None,
                                     emulate=not FORK)
    assert drawn.shape == (1, 2, 4, 4), drawn.shape
    assert torch.equal(drawn[0, 0], drawn[0, 1]), "worker 0 and worker 1 drew the same parameters"


def test_torch_source_differs_across_workers_and_is_reproducible():
    ds = lfw_workloads.AffineParams(8, source="torch")
    kwargs = dict(num_workers=2, items_per_worker=4, seed=3, context="fork" if FORK else None,
                  emulate=not FORK)
    first, again = lfw_workloads.params_by_worker(ds, **kwargs), lfw_workloads.params_by_worker(ds, **kwargs)
    assert not torch.equal(first[0, 0], first[0, 1]), "torch's generator is seeded per worker"
    assert torch.equal(first, again), "the same DataLoader seed gives the same draws"


def test_affine_params_record_and_bad_input():
    record = lfw_workloads.AffineParams(3, seed=0)[0]
    assert record.shape == (5,) and record[0] == -1, "worker id -1 in the main process"
    with pytest.raises(IndexError):
        lfw_workloads.AffineParams(3)[3]
    with pytest.raises(ValueError):
        lfw_workloads.AffineParams(3, source="random")
    with pytest.raises(ValueError):
        lfw_workloads.params_by_worker(lfw_workloads.AffineParams(3), num_workers=2, items_per_worker=4)
