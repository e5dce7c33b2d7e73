"""Notebook 04's instruments: stage timing (feedgpu.measure.stages), decoders and per-worker randomness (feedgpu.workloads.lfw)."""

from __future__ import annotations

import multiprocessing
import time

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms

from feedgpu.measure import stages
from feedgpu.workloads import lfw as lfw_workloads

from conftest import write_face

pytestmark = pytest.mark.unit

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


AUGMENT_S = 0.020  # known cost of the augment stage below: a sleep per image
TO_TENSOR_S = 0.005  # known cost of the to_tensor stage: a shorter sleep per image


def _sleepy_augment(pixels):
    time.sleep(AUGMENT_S)
    return pixels


def _sleepy_to_tensor(pixels):
    time.sleep(TO_TENSOR_S)
    return torch.zeros(3)


def test_time_stages_puts_each_known_cost_under_its_own_stage(jpegs, monkeypatch):
    # decode is an identity, augment sleeps 20 ms and to_tensor 5 ms per image: a stage
    # clocked under the wrong name, or a total not divided by the number of images,
    # moves a sleep to where the checks below cannot miss it.
    monkeypatch.setitem(lfw_workloads.DECODERS, "identity", lambda data: data)
    times = stages.time_stages(jpegs, _sleepy_augment, _sleepy_to_tensor, decoder="identity",
                               batch_size=4, repeats=3)
    assert list(times) == ["read", "decode", "augment", "to_tensor", "collate"], (
        f"one entry per stage, in the documented order: {list(times)}"
    )
    augment = times["augment"] / AUGMENT_S
    assert 0.95 <= augment <= 3, (
        f"augment sleeps {AUGMENT_S * 1e3:.0f} ms per image; reported {times['augment'] * 1e3:.2f} ms "
        f"({augment:.2f}x; {len(jpegs)}x would mean the total was not divided by the images)"
    )
    assert times["to_tensor"] / TO_TENSOR_S >= 0.95, (
        f"to_tensor sleeps {TO_TENSOR_S * 1e3:.0f} ms per image, reported {times['to_tensor'] * 1e3:.2f} ms"
    )
    assert times["to_tensor"] < times["augment"] / 2, (
        f"the 20 ms sleep belongs to augment, the 5 ms one to to_tensor: {times}"
    )
    for stage in ("read", "decode", "collate"):
        assert times[stage] < times["augment"] / 4, (
            f"{stage} costs next to nothing here, yet reported {times[stage] * 1e3:.2f} ms per image "
            f"against augment's {times['augment'] * 1e3:.2f} ms: a sleep was clocked under the wrong stage"
        )


def test_time_stages_with_real_decoders_reports_positive_decode(jpegs):
    for decoder, to_tensor in [("pil", transforms.ToTensor()), ("tensor", None)]:
        times = stages.time_stages(jpegs, None, to_tensor, decoder=decoder, batch_size=3, repeats=1)
        assert times["decode"] > 0 and all(t >= 0 for t in times.values()), f"{decoder}: {times}"


def test_stage_timers_reject_bad_arguments(jpegs):
    for kwargs in [{"batch_size": 0}, {"repeats": 0}, {"repeats": 1.5}, {"decoder": "gif"}, {"threads": 0}]:
        with pytest.raises(ValueError):
            stages.time_stages(jpegs, **kwargs)
    with pytest.raises(ValueError):
        stages.time_stages([])
    with pytest.raises(ValueError):
        stages.decode_rate(jpegs, "pil", repeats=0)
    with pytest.raises(ValueError):
        stages.time_each({"flip": transforms.RandomHorizontalFlip()}, [], repeats=1)


def test_time_each_and_decode_rate_follow_a_known_cost(jpegs):
    # time_each: seconds per image of each transform; a 10 ms sleep per image must show.
    def sleepy(image):
        time.sleep(0.010)
        return image

    images = list(range(4))
    per_image = stages.time_each({"sleepy": sleepy, "identity": lambda x: x}, images, repeats=3)
    assert list(per_image) == ["sleepy", "identity"], f"one entry per transform, in order: {list(per_image)}"
    assert 0.95 <= per_image["sleepy"] / 0.010 <= 3, (
        f"a 10 ms sleep per image, reported {per_image['sleepy'] * 1e3:.2f} ms"
    )
    assert per_image["identity"] < per_image["sleepy"] / 10, f"the identity costs next to nothing: {per_image}"
    rate = stages.decode_rate(jpegs, "pil", repeats=2)
    assert rate > 0, f"images per second must be positive, got {rate}"


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
