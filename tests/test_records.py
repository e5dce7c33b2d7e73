"""The in-memory record datasets and the COCO-like annotations that notebook 06's workers read."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from feedgpu.workloads.annotations import (
    RECORD_FIELDS,
    AnnotationArrayDataset,
    annotations_to_arrays,
    make_annotations,
)
from feedgpu.workloads.records import SerializedRecordDataset, collate_touch, freeze_gc, serialize_records

pytestmark = pytest.mark.unit


def _pickled(records):
    """The layout made with pickle directly, independent of serialize_records."""
    parts = [pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL) for r in records]
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    return np.frombuffer(b"".join(parts), dtype=np.uint8).copy(), offsets


def test_serialize_records_is_the_layout_the_dataset_reads():
    records = make_annotations(40, seed=6) + [None, "x", [1, 2], {"empty": {}}]
    buffer, offsets = serialize_records(records)
    expected_buffer, expected_offsets = _pickled(records)
    assert buffer.dtype == np.uint8 and buffer.ndim == 1 and buffer.flags.owndata, "one uint8 array of its own"
    assert offsets.dtype == np.int64 and np.array_equal(offsets, expected_offsets), "n + 1 int64 positions"
    assert np.array_equal(buffer, expected_buffer), "every record pickled, end to end, in order"
    assert serialize_records(tuple(records))[0].tobytes() == buffer.tobytes(), "a tuple as a list"
    empty_buffer, empty_offsets = serialize_records([])
    assert len(empty_buffer) == 0 and empty_offsets.tolist() == [0], "no records: an empty buffer and [0]"


@pytest.mark.parametrize("bad", [{"a": 1}, "abc", (r for r in range(3)), np.arange(3)])
def test_serialize_records_rejects_what_is_not_a_list(bad):
    with pytest.raises(TypeError, match="list or a tuple"):
        serialize_records(bad)


def test_serialized_dataset_takes_tensors():
    """The same buffer held as tensors: the same records; the offsets kept as int64."""
    records = make_annotations(30, seed=8) + [None]
    buffer, offsets = _pickled(records)
    dataset = SerializedRecordDataset(torch.from_numpy(buffer), torch.from_numpy(offsets.astype(np.int32)))
    assert dataset.offsets.dtype == torch.int64, f"offsets kept as int64, got {dataset.offsets.dtype}"
    assert [dataset[i] for i in range(len(dataset))] == records, "every record unpickled equal"
    assert dataset[-1] is None, "negative index counts from the end"
    with pytest.raises(IndexError):
        dataset[len(records)]


@pytest.mark.parametrize("buffer, offsets", [
    (torch.zeros(4, dtype=torch.int8), torch.tensor([0, 4])),       # not uint8
    (torch.zeros(2, 2, dtype=torch.uint8), torch.tensor([0, 4])),   # not 1-d
    (torch.zeros(4, dtype=torch.uint8), np.array([0, 4])),          # offsets not a tensor
    (torch.zeros(4, dtype=torch.uint8), torch.tensor([0.0, 4.0])),  # float offsets
])
def test_serialized_dataset_rejects_bad_tensors(buffer, offsets):
    with pytest.raises(TypeError):
        SerializedRecordDataset(buffer, offsets)


def test_serialized_dataset_checks_tensor_offsets():
    with pytest.raises(ValueError):
        SerializedRecordDataset(torch.zeros(4, dtype=torch.uint8), torch.tensor([0, 3]))


@pytest.mark.slow
def test_spawned_workers_map_a_tensor_buffer_and_copy_a_numpy_one():
    """Under spawn, torch's pickling puts the tensors in shared memory: each worker maps the main
    process's pages (none of its own), while the numpy buffer arrives as a copy of its own."""
    import multiprocessing as mp

    from feedgpu.measure.memory import available_kinds
    from feedgpu.workflows.bench.memory import held_alone

    if "spawn" not in mp.get_all_start_methods() or "pss" not in available_kinds():
        pytest.skip("needs spawn and Linux's /proc")
    buffer, offsets = serialize_records(make_annotations(4_000, seed=1))
    size = buffer.nbytes + offsets.nbytes
    numpy_alone = sum(r.alone for r in held_alone(SerializedRecordDataset(buffer, offsets), "spawn"))
    tensor_reports = held_alone(SerializedRecordDataset(torch.tensor(buffer), torch.tensor(offsets)), "spawn")
    assert numpy_alone >= 2 * 0.9 * size, f"each worker holds a copy of the numpy buffer: {numpy_alone} bytes alone"
    # a page or so of each worker's own: the dataset's small Python objects, not the buffer
    assert sum(r.alone for r in tensor_reports) <= 0.01 * size, f"the tensors' pages are shared: {tensor_reports}"
    assert all(r.present > 0 for r in tensor_reports), f"each worker read the shared pages: {tensor_reports}"


def test_make_annotations_is_seeded():
    first, again, other = make_annotations(50, seed=1), make_annotations(50, seed=1), make_annotations(50, seed=2)
    assert first == again, "the same seed must give the same records"
    assert first != other, "another seed should give other records"
    assert make_annotations(0) == [], "no records for n=0"


def test_make_annotations_fields():
    records = make_annotations(200, seed=0)
    for r in records:
        assert tuple(r) == RECORD_FIELDS, f"fields in order, got {tuple(r)}"
        assert 1 <= len(r["bbox"]) <= 6 and all(len(box) == 4 for box in r["bbox"]), f"1-6 boxes of 4: {r['bbox']}"
        assert all(isinstance(v, float) for box in r["bbox"] for v in box), "box coordinates are floats"
        assert r["file_name"] == f"train2017/{r['image_id']:012d}.jpg", f"file name of {r['image_id']}"
        assert isinstance(r["caption"], str) and r["caption"], "a caption"
    assert len({r["id"] for r in records}) == len(records), "ids are distinct"
    # each record has its own objects, as json.load builds them (what makes copy-on-write show)
    assert records[0]["bbox"] is not records[1]["bbox"], "records must not share their box lists"


@pytest.mark.parametrize("bad", [-1, 2.5])
def test_make_annotations_rejects_bad_n(bad):
    with pytest.raises(ValueError, match="n must be"):
        make_annotations(bad)


def test_arrays_round_trip():
    records = make_annotations(300, seed=4)
    arrays = annotations_to_arrays(records)
    assert all(a.dtype != object for a in arrays.values()), "no object arrays (they behave like a list)"
    dataset = AnnotationArrayDataset(arrays)
    assert len(dataset) == 300, f"300 records, got {len(dataset)}"
    assert [dataset[i] for i in range(300)] == records, "every record rebuilt equal"
    assert dataset[-1] == records[-1], "negative index counts from the end"
    with pytest.raises(IndexError):
        dataset[300]


def test_serialized_dataset_round_trip_and_pickles():
    records = make_annotations(100, seed=7) + [None, "x", [1, 2]]
    dataset = SerializedRecordDataset(*_pickled(records))
    assert len(dataset) == len(records), f"{len(records)} records, got {len(dataset)}"
    assert [dataset[i] for i in range(len(dataset))] == records, "every record unpickled equal"
    assert dataset[-2] == "x", "negative index counts from the end"
    with pytest.raises(IndexError):
        dataset[len(records)]
    copy = pickle.loads(pickle.dumps(dataset))  # what spawn and forkserver send to each worker
    assert copy[5] == records[5], "the dataset survives pickling"


def test_serialized_dataset_empty():
    dataset = SerializedRecordDataset(np.zeros(0, dtype=np.uint8), np.zeros(1, dtype=np.int64))
    assert len(dataset) == 0, "no records"


@pytest.mark.parametrize("buffer, offsets, error", [
    (np.zeros(4, dtype=np.int8), np.array([0, 4]), TypeError),          # not uint8
    ([1, 2, 3], np.array([0, 3]), TypeError),                           # not an array
    (np.zeros(4, dtype=np.uint8), np.array([0.0, 4.0]), TypeError),     # float offsets
    (np.zeros(4, dtype=np.uint8), np.array([], dtype=np.int64), ValueError),
    (np.zeros(4, dtype=np.uint8), np.array([1, 4]), ValueError),        # does not start at 0
    (np.zeros(4, dtype=np.uint8), np.array([0, 3]), ValueError),        # does not end at len(buffer)
    (np.zeros(4, dtype=np.uint8), np.array([0, 3, 2, 4]), ValueError),  # decreases
])
def test_serialized_dataset_rejects_bad_layout(buffer, offsets, error):
    with pytest.raises(error):
        SerializedRecordDataset(buffer, offsets)


def test_collate_touch_counts():
    assert collate_touch(make_annotations(7, seed=0)) == 7, "the count of items"
    assert collate_touch([]) == 0, "an empty batch"


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_read_the_same_records(context):
    """Workers (forked, or spawned: importing the classes by name) return the records in order."""
    import multiprocessing as mp

    if context not in mp.get_all_start_methods():
        pytest.skip(f"{context} is not available here")
    records = make_annotations(60, seed=9)
    loader = DataLoader(SerializedRecordDataset(*_pickled(records)), batch_size=8, num_workers=2,
                        collate_fn=list, multiprocessing_context=context)
    assert [r for batch in loader for r in batch] == records, f"records differ under {context}"


def test_freeze_gc_freezes_and_works_as_worker_init_fn():
    """freeze_gc moves the objects that exist into the permanent generation, and workers run it."""
    import gc

    try:
        freeze_gc(0)
        assert gc.get_freeze_count() > 0, "the objects that exist should be frozen"
    finally:
        gc.unfreeze()
    records = make_annotations(20, seed=2)
    loader = DataLoader(SerializedRecordDataset(*_pickled(records)), batch_size=5, num_workers=1,
                        collate_fn=list, worker_init_fn=freeze_gc)
    assert [r for batch in loader for r in batch] == records, "a loader with freeze_gc returns the records"
