"""A COCO-like annotation list made from a seed, and the same records in numpy arrays.

Detection and captioning datasets ship their labels as one big JSON file that a Dataset
loads into a list of dicts, one per annotation: ids, an image's file name and size, a
category, a few bounding boxes and a caption. At COCO scale that list holds millions of
small Python objects, and with *fork* each DataLoader worker that reads it slowly copies
it (every read writes the objects' reference counts). This module makes such a list
without a download, and the same records as a few numpy arrays:

* :func:`make_annotations`: ``n`` records (dicts), the same for the same seed on every
  machine; about 1.5 KB of Python objects each, so 200,000 records are ~300 MB;
* :func:`annotations_to_arrays` and :class:`AnnotationArrayDataset`: one numpy array per
  field (strings and box lists as one byte or float array plus offsets), and a Dataset
  that rebuilds record ``i`` from them, equal to the original dict.

The third layout, one serialised buffer with an offsets array, is
:class:`feedgpu.workloads.records.SerializedRecordDataset`.

A record::

    {"id": 1000003, "image_id": 412345, "file_name": "train2017/000000412345.jpg",
     "height": 480, "width": 640, "category_id": 18,
     "bbox": [[12.5, 40.25, 100.0, 80.75], [300.0, 22.5, 61.25, 140.0]],
     "caption": "a brown dog running across a wet field near the fence"}
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch.utils.data import Dataset

from .records import _position

__all__ = ["RECORD_FIELDS", "make_annotations", "annotations_to_arrays", "AnnotationArrayDataset"]

#: The keys of every record, in order.
RECORD_FIELDS: tuple[str, ...] = ("id", "image_id", "file_name", "height", "width", "category_id",
                                  "bbox", "caption")

_ADJECTIVES = ("a brown", "a small", "a large", "a red", "a white", "an old", "a young", "a striped",
               "a black", "a wooden", "a bright", "a muddy", "a blue", "a sleepy", "a tall", "a green")
_NOUNS = ("dog", "cat", "bicycle", "person", "horse", "bus", "kite", "boat", "giraffe", "pizza",
          "umbrella", "train", "skateboard", "bird", "laptop", "sandwich", "truck", "zebra")
_VERBS = ("running across", "sitting on", "standing beside", "parked near", "flying over",
          "lying under", "waiting at", "moving along", "resting against", "looking at")
_PLACES = ("a wet field", "the old fence", "a busy street", "the kitchen table", "a sandy beach",
           "the river bank", "a snowy hill", "the train station", "a crowded market", "the park")
_TAILS = ("", " on a sunny afternoon", " at dusk", " while people watch", " in the rain",
          " next to a parked car", " under a cloudy sky", " with trees in the background")
_SIZES = ((480, 640), (640, 480), (427, 640), (640, 427), (500, 375), (375, 500), (640, 640))


def make_annotations(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` COCO-like annotation records, the same for the same ``seed`` on every machine.

    Each record is a dict with the keys of :data:`RECORD_FIELDS`: ``id`` (int, distinct),
    ``image_id`` (int), ``file_name`` (str), ``height``, ``width``, ``category_id``
    (ints), ``bbox`` (a list of 1 to 6 boxes, each a list of four floats ``[x, y, w, h]``
    in multiples of 1/4 pixel, exact in float64) and ``caption`` (str). Every record is
    built of its own objects (no string or list shared between records), as
    ``json.load`` would build them; about 1.5 KB each, so ~200,000 records are ~300 MB.

    Raises:
        ValueError: if ``n`` is negative or not an integer.
    """
    if int(n) != n or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    n = int(n)
    rng = np.random.default_rng(seed)  # one generator, drawn in a fixed order: same records everywhere
    image_ids = rng.integers(1, 600_000, n).tolist()
    sizes = rng.integers(0, len(_SIZES), n).tolist()
    categories = rng.integers(1, 91, n).tolist()
    boxes_per = rng.integers(1, 7, n)
    boxes = (rng.integers(0, 4 * 600, (int(boxes_per.sum()), 4)) / 4).tolist()
    words = rng.integers(0, 2**31, (n, 5))
    words = [(_ADJECTIVES[a % 16], _NOUNS[b % 18], _VERBS[c % 10], _PLACES[d % 10], _TAILS[e % 8])
             for a, b, c, d, e in words.tolist()]
    records = []
    start = 0
    for i, (image_id, size, category, count, caption) in enumerate(
            zip(image_ids, sizes, categories, boxes_per.tolist(), words)):
        height, width = _SIZES[size]
        records.append({
            "id": 1_000_000 + i,
            "image_id": image_id,
            "file_name": f"train2017/{image_id:012d}.jpg",
            "height": height,
            "width": width,
            "category_id": category,
            "bbox": boxes[start:start + count],
            "caption": "{} {} {} {}{}".format(*caption),
        })
        start += count
    return records


def _pack_strings(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encoded = [s.encode("utf-8") for s in strings]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(), offsets


def annotations_to_arrays(records: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """The records of :func:`make_annotations` as one numpy array per field.

    Integers become ``int64`` columns; ``file_name`` and ``caption`` become one ``uint8``
    array of UTF-8 bytes each plus ``int64`` offsets (``<field>_offsets``, ``n + 1`` of
    them: record ``i``'s bytes are ``[offsets[i], offsets[i + 1])``); ``bbox`` becomes
    one ``(boxes, 4)`` float64 array plus ``bbox_offsets`` (in boxes). No array has dtype
    ``object``: those hold Python objects, and behave like a list.

    Raises:
        KeyError: a record lacks one of :data:`RECORD_FIELDS`.
    """
    arrays: dict[str, np.ndarray] = {}
    for key in ("id", "image_id", "height", "width", "category_id"):
        arrays[key] = np.array([r[key] for r in records], dtype=np.int64)
    for key in ("file_name", "caption"):
        arrays[key], arrays[f"{key}_offsets"] = _pack_strings([r[key] for r in records])
    counts = [len(r["bbox"]) for r in records]
    arrays["bbox_offsets"] = np.zeros(len(records) + 1, dtype=np.int64)
    np.cumsum(counts, out=arrays["bbox_offsets"][1:])
    flat = [box for r in records for box in r["bbox"]]
    arrays["bbox"] = np.array(flat, dtype=np.float64).reshape(len(flat), 4)
    return arrays


class AnnotationArrayDataset(Dataset):
    """Items are the records of :func:`annotations_to_arrays`, rebuilt as dicts equal to
    the originals: ``dataset[i] == records[i]``.

    Reading record ``i`` only reads the arrays (a handful of objects whose reference
    counts change, whatever the number of records), so forked workers keep sharing them.

    Args:
        arrays: what :func:`annotations_to_arrays` returns.
    """

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays
        self.n = len(arrays["id"])

    def __len__(self) -> int:
        return self.n

    def _string(self, key: str, i: int) -> str:
        offsets = self.arrays[f"{key}_offsets"]
        return self.arrays[key][offsets[i]:offsets[i + 1]].tobytes().decode("utf-8")

    def __getitem__(self, index: int) -> dict[str, Any]:
        i = _position(index, self.n)
        a = self.arrays
        first, last = a["bbox_offsets"][i], a["bbox_offsets"][i + 1]
        return {
            "id": int(a["id"][i]),
            "image_id": int(a["image_id"][i]),
            "file_name": self._string("file_name", i),
            "height": int(a["height"][i]),
            "width": int(a["width"][i]),
            "category_id": int(a["category_id"][i]),
            "bbox": a["bbox"][first:last].tolist(),
            "caption": self._string("caption", i),
        }
