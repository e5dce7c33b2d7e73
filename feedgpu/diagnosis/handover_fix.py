"""The hand-over fix the diagnosis tries: numpy arrays cross to the main process as tensors.

A batch of numpy arrays (a collate that returns a list of them, or a numpy array) is
pickled by the worker and unpickled by the main process, every byte of it, on the one
main process. A tensor built by ``default_collate`` in a worker lives in shared memory
(``collate_tensor_fn`` in the pinned ``torch/utils/data/_utils/collate.py``, lines 269-275:
"concatenate directly into a shared memory tensor"), and only a handle crosses.

:class:`SharedTensorCollate` wraps the user's collate: in the worker, it stacks each list
or tuple of same-shape arrays into one tensor with ``default_collate`` (one handle, not
one per array) and turns each other array into a tensor the same way; :func:`restore`, in
the main process, gives back what the user's collate returned, as numpy views of those
tensors (no copy): a list stays a list of arrays, so the user's step needs no change.
The advice in words is the course's: return one tensor per batch from ``collate_fn``.

Workers import these by name (*spawn*), so they live in a module.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import default_collate

__all__ = ["SharedTensorCollate", "restore", "numpy_bytes"]


class _Stacked(NamedTuple):
    """Same-shape arrays of a list (or tuple) stacked into one tensor."""

    tensor: torch.Tensor
    kind: str  # "list" or "tuple"


class _Array(NamedTuple):
    """One numpy array, carried as a tensor."""

    tensor: torch.Tensor


def _plain(array: Any) -> bool:
    """A numpy array of numbers (strings and objects cannot become tensors)."""
    return isinstance(array, np.ndarray) and array.dtype.kind in "biufc" and array.ndim > 0


def _to_shared(obj: Any) -> Any:
    if _plain(obj):
        return _Array(default_collate([torch.from_numpy(np.ascontiguousarray(obj))])[0])
    if isinstance(obj, (list, tuple)) and len(obj) > 1 and all(_plain(a) for a in obj) and len(
            {(a.shape, a.dtype) for a in obj}) == 1:
        stacked = default_collate([torch.from_numpy(np.ascontiguousarray(a)) for a in obj])
        return _Stacked(stacked, "tuple" if isinstance(obj, tuple) else "list")
    if isinstance(obj, dict):
        return {key: _to_shared(value) for key, value in obj.items()}
    if isinstance(obj, list):
        return [_to_shared(value) for value in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_to_shared(value) for value in obj)
    return obj


def restore(obj: Any) -> Any:
    """What the wrapped collate returned: every tensor made by :class:`SharedTensorCollate`
    back to numpy arrays (views, no copy); anything else unchanged."""
    if isinstance(obj, _Array):
        return obj.tensor.numpy()
    if isinstance(obj, _Stacked):
        arrays = list(obj.tensor.numpy())
        return tuple(arrays) if obj.kind == "tuple" else arrays
    if isinstance(obj, dict):
        return {key: restore(value) for key, value in obj.items()}
    if isinstance(obj, list):
        return [restore(value) for value in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(restore(value) for value in obj)
    return obj


class SharedTensorCollate:
    """``collate_fn`` that calls ``collate_fn(items)`` and carries its numpy arrays as tensors.

    Args:
        collate_fn: the user's collate function (it must be importable under *spawn*).
    """

    def __init__(self, collate_fn: Any) -> None:
        self.collate_fn = collate_fn

    def __call__(self, items: Any) -> Any:
        return _to_shared(self.collate_fn(items))

    def __repr__(self) -> str:
        name = getattr(self.collate_fn, "__name__", type(self.collate_fn).__name__)
        return f"SharedTensorCollate({name})"


def numpy_bytes(obj: Any) -> int:
    """Bytes of numeric numpy arrays in ``obj`` (lists, tuples and dicts walked): what
    :class:`SharedTensorCollate` would carry as tensors instead of pickling."""
    if _plain(obj):
        return int(obj.nbytes)
    if isinstance(obj, dict):
        return sum(numpy_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(numpy_bytes(v) for v in obj)
    return 0
