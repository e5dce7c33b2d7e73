"""A DataLoader rebuilt with one setting changed, and restricted to a sample of batches.

The diagnosis never iterates the user's loader itself (its persistent workers, its
generator and its sampler stay as they were): every run is on a new loader built from
the user's settings. Which settings a DataLoader keeps, and where, is read from the pinned
``torch/utils/data/dataloader.py`` (``DataLoader.__init__``, lines 255-431 in torch 2.14):

* ``dataset``, ``num_workers``, ``prefetch_factor``, ``pin_memory``, ``pin_memory_device``,
  ``timeout``, ``worker_init_fn``, ``multiprocessing_context``, ``in_order``,
  ``batch_size``, ``drop_last``, ``sampler``, ``batch_sampler``, ``generator``,
  ``collate_fn``, ``persistent_workers``: attributes of the same name;
* ``shuffle`` is not kept: it became the sampler (a ``RandomSampler`` holding
  ``generator``), so passing the sampler on keeps it;
* with a ``batch_sampler`` of the user's, ``batch_size`` is None and ``drop_last`` False
  (the constructor set them so), and they must not be passed again;
* ``prefetch_factor`` must be None and ``persistent_workers`` False with 0 workers, and
  ``multiprocessing_context`` None (the constructor and its setter raise otherwise); with
  workers, ``prefetch_factor`` None means 2; ``timeout`` must be 0 with 0 workers
  (``_SingleProcessDataLoaderIter`` asserts it);
* an ``IterableDataset`` gets an internal infinite sampler that must not be passed on.
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import random
import sys
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from ...measure.machine import start_method

__all__ = ["clone_loader", "sampled_loader", "loader_settings", "start_method_of", "check_importable",
           "sample_indices", "SAMPLE_SEED"]

#: Seed of the sample of items every run of a diagnosis reads.
SAMPLE_SEED = 0


def _is_iterable(loader: DataLoader) -> bool:
    return isinstance(loader.dataset, IterableDataset)


def _has_own_batch_sampler(loader: DataLoader) -> bool:
    """Whether the user passed a ``batch_sampler`` (the constructor then set batch_size None)."""
    return loader.batch_size is None and loader.batch_sampler is not None


def _context_name(context: Any) -> str | None:
    if context is None:
        return None
    if isinstance(context, str):
        return context
    return context.get_start_method()


def clone_loader(loader: DataLoader, **changes: Any) -> DataLoader:
    """A new DataLoader with the settings of ``loader``, except those in ``changes``.

    The clone shares the dataset, the sampler or batch sampler, the collate function,
    ``worker_init_fn`` and the generator objects with ``loader`` (so, from the same
    generator state, it yields the same batches), and none of its iterators or workers.

    Args:
        loader: the DataLoader to copy.
        **changes: constructor arguments to change, e.g. ``num_workers=4``. Settings that
            the new worker count forbids are dropped: with ``num_workers=0``,
            ``prefetch_factor``, ``persistent_workers``, ``multiprocessing_context`` and
            ``timeout`` go back to their defaults.

    Raises:
        TypeError: ``loader`` is not a DataLoader, or a change names no constructor argument.
    """
    if not isinstance(loader, DataLoader):
        raise TypeError(f"loader must be a torch.utils.data.DataLoader, got {type(loader).__name__}")
    kwargs: dict[str, Any] = {
        "dataset": loader.dataset,
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator,
        "prefetch_factor": loader.prefetch_factor,
        "persistent_workers": loader.persistent_workers,
        "pin_memory_device": loader.pin_memory_device,
        "in_order": loader.in_order,
    }
    unknown = set(changes) - set(inspect.signature(DataLoader.__init__).parameters) - {"self"}
    if unknown:
        raise TypeError(f"not DataLoader settings: {sorted(unknown)}")
    if "batch_sampler" in changes:  # the new batch sampler alone sets the order and the batches
        order: dict[str, Any] = {}
    elif "sampler" in changes or _is_iterable(loader):
        order = {"batch_size": loader.batch_size, "drop_last": loader.drop_last}
    elif _has_own_batch_sampler(loader):
        order = {"batch_sampler": loader.batch_sampler}
    else:  # shuffle became loader.sampler (a RandomSampler holding the generator)
        order = {"batch_size": loader.batch_size, "drop_last": loader.drop_last, "sampler": loader.sampler}
    kwargs.update(order)
    kwargs.update(changes)
    if kwargs["num_workers"] == 0:
        kwargs.update(prefetch_factor=None, persistent_workers=False, multiprocessing_context=None, timeout=0)
    elif loader.num_workers == 0 and "prefetch_factor" not in changes:
        kwargs["prefetch_factor"] = None  # the constructor's default for workers: 2
    return DataLoader(**kwargs)


def sample_indices(n: int, k: int) -> list[int]:
    """The first ``k`` items of the diagnosis's fixed, seeded order of ``range(n)``.

    A prefix of one shuffle, so a run of fewer items reads the first items of a longer one,
    and the probes read the runs' first items (``random.sample`` picks differently for
    every ``k``).
    """
    order = list(range(n))
    random.Random(SAMPLE_SEED).shuffle(order)
    return order[:min(n, k)]


def _generator_copy(generator: torch.Generator | None) -> torch.Generator:
    """A generator at ``generator``'s state (or a seeded one), so runs leave the user's alone."""
    copy = torch.Generator()
    if generator is None:
        copy.manual_seed(SAMPLE_SEED)
    else:
        copy.set_state(generator.get_state())
    return copy


def sampled_loader(loader: DataLoader, batches: int, **changes: Any) -> tuple[DataLoader, int | None]:
    """``loader`` with ``changes``, restricted to ``batches`` batches of a fixed sample.

    * map-style with a sampler: a seeded random subset of ``batches * batch_size`` indices
      (fewer if the dataset is smaller), read in the same order in every run;
    * map-style with the user's ``batch_sampler``: its first ``batches`` batches of indices;
    * iterable: the loader as it is (the caller stops after ``batches`` batches).

    The clone gets a copy of the generator (or a seeded one), so the user's generator and
    torch's global random state are left as they were.

    Returns:
        ``(loader, batches)``: the new loader and the batches it yields (None when the
        dataset is iterable, so the caller must stop it).
    """
    generator = _generator_copy(changes.pop("generator", loader.generator))
    if _is_iterable(loader):
        return clone_loader(loader, generator=generator, **changes), None
    if _has_own_batch_sampler(loader):
        chosen = [list(b) for b in itertools.islice(iter(loader.batch_sampler), batches)]
        return clone_loader(loader, batch_sampler=chosen, generator=generator, **changes), len(chosen)
    batch_size = loader.batch_size or 1
    try:
        n = len(loader.dataset)  # type: ignore[arg-type]
    except TypeError:  # a map-style dataset without a length: take the loader's own order
        chosen = list(itertools.islice(iter(loader.sampler), batches * batch_size))
    else:
        # a seeded sample: every run reads the same items, on every machine
        chosen = sample_indices(n, batches * batch_size)
    made = clone_loader(loader, sampler=chosen, generator=generator, **changes)  # a list is a sampler
    return made, len(made)


def loader_settings(loader: DataLoader) -> dict[str, Any]:
    """The settings that matter for speed, as plain values (for the report)."""
    return {
        "dataset": type(loader.dataset).__name__,
        "iterable": _is_iterable(loader),
        "batch_size": loader.batch_size,
        "num_workers": loader.num_workers,
        "prefetch_factor": loader.prefetch_factor,
        "persistent_workers": loader.persistent_workers,
        "pin_memory": loader.pin_memory,
        "collate_fn": getattr(loader.collate_fn, "__name__", type(loader.collate_fn).__name__),
        "start_method": start_method_of(loader),
        "batches_per_epoch": _length(loader),
    }


def _length(loader: DataLoader) -> int | None:
    try:
        return len(loader)
    except TypeError:
        return None


def start_method_of(loader: DataLoader) -> str:
    """How the loader's workers start: its ``multiprocessing_context``, else the default."""
    return _context_name(loader.multiprocessing_context) or start_method()


def _not_importable(obj: Any) -> str | None:
    """Why a worker started with *spawn* could not import ``obj`` by name, or None."""
    if obj is None:
        return None
    target = obj if callable(obj) and hasattr(obj, "__qualname__") else type(obj)
    target = getattr(target, "func", target)  # functools.partial: its function
    qualname = getattr(target, "__qualname__", "")
    module = getattr(target, "__module__", None)
    if "<lambda>" in qualname or "<locals>" in qualname:
        return f"{qualname} is a lambda or is defined inside a function"
    if module == "__main__" and getattr(sys.modules.get("__main__"), "__file__", None) is None:
        return f"{qualname} is defined in a notebook cell (module __main__ has no file)"
    if module and module != "__main__" and module not in sys.modules and importlib.util.find_spec(module) is None:
        return f"{qualname}'s module {module} cannot be imported"
    return None


def check_importable(loader: DataLoader, num_workers: int | None = None) -> str | None:
    """Why the loader's workers could not start under *spawn* or *forkserver*, or None.

    Such a worker imports the dataset's class, the collate function and the
    ``worker_init_fn`` by name (the course's notebook 01 shows the failure), so a class
    defined in a notebook cell, a lambda or a local function cannot reach it.

    Args:
        loader: the loader.
        num_workers: the worker count to judge (default: the loader's); 0 needs nothing.
    """
    workers = loader.num_workers if num_workers is None else num_workers
    if workers == 0 or start_method_of(loader) == "fork":
        return None
    for what, obj in (("the dataset", loader.dataset), ("collate_fn", loader.collate_fn),
                      ("worker_init_fn", loader.worker_init_fn)):
        reason = _not_importable(obj)
        if reason is not None:
            return (f"{what}: {reason}; workers started with {start_method_of(loader)} import it by name "
                    "and cannot find it. Move it into a module (a .py file next to your notebook) and import it "
                    "from there (notebook 01 shows why)")
    return None
