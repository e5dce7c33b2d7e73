"""Tests for feedgpu.workloads.face_training: the capstone's data, its slow loop and the course's fixes.

They read the built synthetic LFW (``make data``), whose seven people with 70 or more
images have the real LFW's counts. Items are built with ``wait_s=0`` and ``open_s=0``
(the costs are sleeps, tested on their own) and loaders run in the main process, so the
file takes seconds.
"""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import lfw_dataset
from feedgpu.models.accelerator import AsyncAccelerator
from feedgpu.data import lfw_stats
from feedgpu.workloads import face_training as ft

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def records():
    return ft.face_records(lfw_dataset.default_root("synthetic"))


@pytest.fixture(scope="module")
def few(records):
    """Twelve records spread over the people."""
    return records[::107][:12]


def quick_items(annotations, output="uint8", seed=ft.SEED):
    return ft.FaceItems(annotations, output=output, wait_s=0.0, open_s=0.0, seed=seed)


def face(record, flip):
    return ft.read_face(record["path"], ft.landmark_box(record["landmarks"]), flip)


def seeds_with_flip(flip, k):
    """The first ``k`` augmentation seeds whose flip is ``flip``."""
    return [s for s in range(1000) if ft.flip_for(s) == flip][:k]


# --------------------------------------------------------------------------- the data


def test_face_records_keeps_the_seven_people_with_70_images(records):
    """The people of the synthetic tree with >= 70 images, with their counts from lfw_stats."""
    counts = dict(zip(lfw_stats.person_names(), lfw_stats.lfw_image_counts()))
    expected = {name: n for name, n in counts.items() if n >= ft.MIN_IMAGES}
    found = collections.Counter(r["person"] for r in records)
    assert found == expected, f"people kept and their images: {found} vs {expected}"
    assert sorted(found.values(), reverse=True) == [530, 236, 144, 121, 109, 77, 71], "the real LFW's seven"
    people = sorted(expected)
    assert [r["label"] for r in records] == [people.index(r["person"]) for r in records], (
        "labels 0..6 in name order")
    assert [(r["person"], r["path"]) for r in records] == sorted((r["person"], r["path"]) for r in records), (
        "sorted by person, then file")


def test_face_records_landmarks_are_68_quarter_pixels_inside_the_image(records):
    """68 (x, y) pairs per face, multiples of 0.25, inside 250 x 250."""
    marks = np.array([r["landmarks"] for r in records])
    assert marks.shape == (len(records), ft.N_LANDMARKS, 2), marks.shape
    assert np.array_equal(marks * 4, np.round(marks * 4)), "every coordinate a multiple of 0.25"
    assert marks.min() >= 0 and marks.max() <= 249, (marks.min(), marks.max())
    assert ft.face_records(lfw_dataset.default_root("synthetic"))[5]["landmarks"] == records[5]["landmarks"], (
        "the same landmarks every time")


def test_face_records_with_nobody_above_the_threshold_raises(tiny_lfw):
    """A tree where nobody has min_images images: a ValueError that says what to lower."""
    with pytest.raises(ValueError, match="min_images"):
        ft.face_records(tiny_lfw, min_images=70)


def test_split_records_is_stratified_disjoint_and_reproducible(records):
    """Each person keeps a quarter (within one image) in validation; no image on both sides."""
    train, val = ft.split_records(records)
    paths = lambda rs: [r["path"] for r in rs]  # noqa: E731
    assert not set(paths(train)) & set(paths(val)), "an image on both sides"
    assert sorted(paths(train) + paths(val)) == sorted(paths(records)), "every image on one side"
    total = collections.Counter(r["label"] for r in records)
    in_val = collections.Counter(r["label"] for r in val)
    for label, n in total.items():
        assert abs(in_val[label] - 0.25 * n) <= 1, f"label {label}: {in_val[label]} of {n} in validation"
    again_train, again_val = ft.split_records(records)
    assert paths(again_val) == paths(val) and paths(again_train) == paths(train), "the same split twice"
    assert paths(ft.split_records(records, seed=1)[1]) != paths(val), "another seed, another split"


def test_landmark_box_hand_computed():
    """A 30 x 20 spread centred at (120, 110): a square of 1.1 x 30 = 33 around the centre."""
    assert ft.landmark_box([(105, 100), (135, 120), (120, 110)]) == (103, 93, 136, 126)
    assert ft.landmark_box(np.array([[0.0, 0.0], [20.0, 10.0]])) == (0, 0, 22, 22), "pushed inside at the top left"
    assert ft.landmark_box([(230, 240), (249, 249)]) == (229, 229, 249, 249), "pushed inside at the bottom right"


def test_read_face_is_a_small_uint8_face_and_flip_mirrors_it(records):
    """3 x 64 x 64 uint8; the flipped face is the mirror image of the unflipped one."""
    plain, flipped = face(records[0], False), face(records[0], True)
    assert plain.dtype == torch.uint8 and plain.shape == (3, ft.IMAGE_SIZE, ft.IMAGE_SIZE), (plain.dtype, plain.shape)
    assert torch.equal(flipped, plain.flip(-1)), "flip=True mirrors left-right"
    assert not torch.equal(flipped, plain), "a face is not its own mirror image"


def test_flip_for_is_a_fair_deterministic_coin():
    """The same seed gives the same flip; about half of 1000 seeds flip."""
    flips = [ft.flip_for(s) for s in range(1000)]
    assert flips == [ft.flip_for(s) for s in range(1000)], "deterministic"
    assert all(isinstance(f, bool) for f in flips), "a bool"
    assert 400 < sum(flips) < 600, f"{sum(flips)} of 1000 flipped"


# --------------------------------------------------------------------------- FaceItems


def test_face_items_from_a_list_and_from_packed_arrays_are_the_same(few):
    """The list of dicts and its packed arrays give the same images, labels and indices."""
    keys = [(i, s) for i, s in zip(range(len(few)), range(100, 100 + len(few)))]
    from_list = quick_items(list(few))
    packed = quick_items(ft.packed_annotations(few))
    assert len(from_list) == len(packed) == len(few)
    for key in keys:
        a, b = from_list[key], packed[key]
        assert torch.equal(a[0], b[0]) and a[1:] == b[1:], f"item {key} differs"


def test_face_items_float64_is_the_normalised_uint8(few):
    """output='float64': ((x / 255) - MEAN) / STD of the uint8 face, in float64 numpy."""
    key = (3, seeds_with_flip(True, 1)[0])
    small = quick_items(list(few))[key][0]
    big = quick_items(list(few), output="float64")[key][0]
    assert isinstance(big, np.ndarray) and big.dtype == np.float64 and big.shape == (3, 64, 64), type(big)
    mean, std = np.array(ft.MEAN)[:, None, None], np.array(ft.STD)[:, None, None]
    by_hand = (small.numpy().astype(np.float64) / 255.0 - mean) / std
    np.testing.assert_allclose(big, by_hand, rtol=1e-12, atol=1e-12)


def test_face_items_tuple_keys_flip_by_flip_for(few):
    """Key (index, aug_seed): the face of that record, flipped as flip_for(aug_seed) says."""
    items = quick_items(list(few))
    for index, seed in [(0, seeds_with_flip(True, 1)[0]), (0, seeds_with_flip(False, 1)[0]),
                        (5, seeds_with_flip(True, 2)[1])]:
        image, label, got_index = items[(index, seed)]
        assert torch.equal(image, face(few[index], ft.flip_for(seed))), f"item ({index}, {seed})"
        assert (label, got_index) == (few[index]["label"], index), (label, got_index)


def test_face_items_int_keys_flip_by_the_generator_made_in_init(few):
    """Key index: the flips follow np.random.default_rng(seed) drawn in turn."""
    items = quick_items(list(few), seed=3)
    rng = np.random.default_rng(3)
    flips = [bool(rng.random() < 0.5) for _ in range(8)]
    assert len(set(flips)) == 2, f"both flips occur: {flips}"
    for flip in flips:
        assert torch.equal(items[2][0], face(few[2], flip)), f"flips {flips}"


def test_face_items_pay_open_s_once_per_process(few, monkeypatch):
    """The index is opened before the first item of each process, never again in that process."""
    sleeps = []
    monkeypatch.setattr(ft.time, "sleep", sleeps.append)
    items = ft.FaceItems(list(few), output="uint8", wait_s=0.0, open_s=0.125)
    for key in [(0, 1), (1, 2), (2, 3)]:
        items[key]
    assert sleeps.count(0.125) == 1 and sleeps.count(0.0) == 3, f"opened once, one wait per item: {sleeps}"
    monkeypatch.setattr(ft.os, "getpid", lambda: -7)  # as in a worker process
    items[(0, 1)]
    items[(1, 1)]
    assert sleeps.count(0.125) == 2, f"a new process opens the index again, once: {sleeps}"


def test_face_items_reject_bad_keys_and_annotations(few):
    """IndexError out of range (negative too); ValueError for packed arrays of different lengths."""
    items = quick_items(list(few))
    for key in (len(few), -1, (len(few), 0)):
        with pytest.raises(IndexError):
            items[key]
    packed = ft.packed_annotations(few)
    packed["label"] = packed["label"][:-1]
    with pytest.raises(ValueError, match="lengths"):
        quick_items(packed)
    with pytest.raises(ValueError):
        quick_items(list(few), output="float32")


# --------------------------------------------------------------------------- batches


def recording_order(calls):
    def order(n, seed, epoch):
        calls.append((n, seed, epoch))
        return np.arange(n)[::-1], np.arange(n) + 100 * epoch
    return order


def test_epoch_batches_advance_epochs_and_keep_the_last_batch_short():
    """10 ids in batches of 4: 4, 4, 2; each iteration asks for the next epoch; set_epoch jumps."""
    calls = []
    sampler = ft.EpochBatches(10, 4, recording_order(calls), seed=5)
    first = list(sampler)
    assert len(sampler) == 3 and [len(b) for b in first] == [4, 4, 2], first
    assert first[0] == [(9, 0), (8, 1), (7, 2), (6, 3)], f"(index, aug_seed) keys in order: {first[0]}"
    list(sampler)
    sampler.set_epoch(7)
    last = list(sampler)
    assert calls == [(10, 5, 0), (10, 5, 1), (10, 5, 7)], calls
    assert last[2] == [(1, 708), (0, 709)], last


@pytest.mark.parametrize("bad", [
    lambda n, seed, epoch: (np.zeros(n, dtype=int), np.arange(n)),  # not a permutation
    lambda n, seed, epoch: (np.arange(n - 1), np.arange(n - 1)),    # one id missing
    lambda n, seed, epoch: (np.arange(n), np.arange(n + 1)),        # one seed too many
])
def test_epoch_batches_rejects_an_order_that_is_no_permutation(bad):
    """An order that repeats, drops an id, or gives a seed too many is a ValueError."""
    with pytest.raises(ValueError, match="permutation|n ids and n seeds"):
        list(ft.EpochBatches(6, 4, bad))


def test_collate_numpy_stacks_images_and_makes_tensors_of_the_rest():
    """One numpy array of images; labels and ids as tensors."""
    images = [np.full((3, 2, 2), k, dtype=np.float64) for k in range(3)]
    out = ft.collate_numpy([(images[k], 10 + k, 20 + k) for k in range(3)])
    assert isinstance(out[0], np.ndarray) and out[0].shape == (3, 3, 2, 2), type(out[0])
    assert np.array_equal(out[0][:, 0, 0, 0], [0.0, 1.0, 2.0]), "in order"
    assert torch.equal(out[1], torch.tensor([10, 11, 12])) and torch.equal(out[2], torch.tensor([20, 21, 22])), out


def test_tiny_classifier_gives_one_score_per_class():
    """N x 3 x 64 x 64 in, N x classes out."""
    assert ft.TinyFaceClassifier(7)(torch.zeros(5, 3, 64, 64)).shape == (5, 7)


# --------------------------------------------------------------------------- the course's fixes


def test_packed_annotations_hold_no_python_objects_and_round_trip(records):
    """Three arrays, none of object dtype; each image's path, label and box as in the list."""
    packed = ft.packed_annotations(records)
    assert {k: v.dtype.kind for k, v in packed.items()} == {"path": "U", "label": "i", "landmarks": "f"}, packed
    assert packed["landmarks"].shape == (len(records), ft.N_LANDMARKS, 2), packed["landmarks"].shape
    listed, arrays = quick_items(list(records)), quick_items(packed)
    assert all(listed.annotation(i) == arrays.annotation(i) for i in range(len(records))), "same path, label, box"
    assert np.array_equal(packed["landmarks"][9], np.array(records[9]["landmarks"])), "landmarks exact in float32"


def test_model_input_is_the_normalised_float32_batch():
    """((x / 255) - MEAN) / STD per channel, computed in float64 by hand, as float32."""
    images = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (2, 3, 4, 5), dtype=np.uint8))
    got = ft.model_input(images)
    assert got.dtype == torch.float32 and got.shape == (2, 3, 4, 5), (got.dtype, got.shape)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    by_hand = (images.numpy() / 255.0 - mean[:, None, None]) / std[:, None, None]
    np.testing.assert_allclose(got.numpy(), by_hand, rtol=1e-5, atol=1e-6)


def test_shuffled_order_is_a_new_reproducible_permutation_each_epoch():
    """A permutation and one seed per id; the same for the same (seed, epoch), new otherwise."""
    ids, seeds = ft.shuffled_order(50, 0, 0)
    assert sorted(ids.tolist()) == list(range(50)) and seeds.shape == (50,), (ids, seeds)
    assert ids.tolist() != list(range(50)), "shuffled"
    again = ft.shuffled_order(50, 0, 0)
    assert np.array_equal(again[0], ids) and np.array_equal(again[1], seeds), "reproducible"
    for other in (ft.shuffled_order(50, 0, 1), ft.shuffled_order(50, 1, 0)):
        assert not np.array_equal(other[0], ids) and not np.array_equal(other[1], seeds), "a new epoch or seed"
    assert len(set(seeds.tolist())) == 50, "a distinct augmentation seed per sample"


def test_workers_to_keep_up_hand_computed():
    """ceil(margin x batch x item / step), at least 1."""
    assert ft.workers_to_keep_up(0.007, 16, 0.030) == 5, "1.25 x 16 x 7 ms / 30 ms = 4.67"
    assert ft.workers_to_keep_up(0.001, 16, 0.030) == 1, "0.67: one worker"
    assert ft.workers_to_keep_up(0.0, 16, 0.030) == 1, "items that cost nothing: still one"
    assert ft.workers_to_keep_up(0.007, 16, 0.030, margin=2.0) == 8, "2 x 3.73 = 7.47"


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # 5 workers on 2 cores, on purpose: they wait
def test_slow_and_fixed_loaders_are_built_as_documented(records):
    """slow: main process, float64 from a list; fixed: persistent workers that keep up, uint8 from arrays."""
    slow, fixed = ft.slow_loader(records[:40]), ft.fixed_loader(records[:40])
    assert slow.num_workers == 0 and slow.dataset.output == "float64", slow
    assert isinstance(slow.dataset.annotations, list), type(slow.dataset.annotations)
    assert fixed.num_workers == 5 and fixed.persistent_workers, "ceil(1.25 x 16 x 7 ms / 30 ms) = 5"
    assert fixed.dataset.output == "uint8" and isinstance(fixed.batch_sampler, ft.EpochBatches), fixed
    assert set(ft.BOTTLENECKS) >= {"main-process", "sync-every-step"} and len(ft.BOTTLENECKS) == 7


def float64_batches(steps, size=2):
    return [(np.zeros((size, 3, 8, 8)), torch.zeros(size, dtype=torch.long), torch.arange(size)) for _ in range(steps)]


def uint8_batches(steps, size=2):
    return [(torch.zeros(size, 3, 8, 8, dtype=torch.uint8), torch.zeros(size, dtype=torch.long), torch.arange(size))
            for _ in range(steps)]


def test_slow_epoch_syncs_every_step_and_fixed_only_to_log():
    """7 steps, logging every 3rd: the slow loop syncs 7 times, the fixed one ceil(7 / 3) = 3."""
    with AsyncAccelerator(0.0) as device:
        slow = ft.run_epochs(float64_batches(7), ft.slow_train_epoch, device, log_every=3)[0]
        fixed = ft.run_epochs(uint8_batches(7), ft.fixed_train_epoch, device, log_every=3)[0]
    assert (slow["steps"], slow["syncs"], len(slow["logged"])) == (7, 7, 3), slow
    assert (fixed["steps"], fixed["syncs"], len(fixed["logged"])) == (7, math.ceil(7 / 3), 3), fixed
    assert all(isinstance(x, float) for x in fixed["logged"]), "losses, read at the end of the epoch"
    assert 0.0 <= fixed["busy_share"] <= 1.0 and fixed["breakdown"].busy.shape == (7,), fixed


def test_expected_fingerprints_match_what_a_fixed_style_loader_delivers(records):
    """The first 32 samples of an epoch of packed uint8 items in shuffled order reach the device
    with the fingerprints expected_fingerprints computes from the records and seeds."""
    subset = records[::40][:32]
    items = quick_items(ft.packed_annotations(subset))
    loader = DataLoader(items, batch_sampler=ft.EpochBatches(len(subset), ft.BATCH_SIZE, ft.shuffled_order),
                        num_workers=0)
    with AsyncAccelerator(0.0) as device:
        ft.run_epochs(loader, ft.fixed_train_epoch, device)
    got = device.received()
    ids, seeds = ft.shuffled_order(len(subset), ft.SEED, 0)
    assert got.ids.tolist() == ids.tolist(), "the epoch's order"
    assert got.batch_sizes == [16, 16] and got.shapes[0] == (3, 64, 64), got.batch_sizes
    flips = [ft.flip_for(s) for s in seeds]
    np.testing.assert_allclose(got.fingerprints, ft.expected_fingerprints(subset, ids, flips), rtol=1e-9)
    mirrored = ft.expected_fingerprints(subset, ids, [not f for f in flips])
    assert not np.isclose(got.fingerprints, mirrored, rtol=1e-6).any(), "a mirrored face has another fingerprint"
    assert got.labels.tolist() == [subset[i]["label"] for i in ids], "labels follow the ids"


def test_evaluate_returns_true_labels_in_order_and_the_models_predictions(few):
    """True labels in the records' order; predictions are the model's argmax, in eval mode."""

    class AlwaysThree(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.modes = []

        def forward(self, x):
            self.modes.append(self.training)
            scores = torch.zeros(x.shape[0], 7)
            scores[:, 3] = 1.0
            return scores

    model = AlwaysThree()
    true, predicted = ft.evaluate(model, few)
    assert true.tolist() == [r["label"] for r in few], true
    assert predicted.tolist() == [3] * len(few), predicted
    assert model.modes == [False] and model.training, f"evaluated in eval mode, then back to train: {model.modes}"
