"""Helpers for the notebooks' test cells: grade each answer on its own, and the student's own.

A notebook asks for several functions, and a later one often calls an earlier one (the
Dataset calls the folder scan). Its tests would then fail for the earlier mistake too,
and a student would lose the same points twice. In a test cell,
``with standing_in(globals(), find_people=reference):`` puts the course's reference in
place of the earlier answer for the duration of the test, and puts the student's own
function back afterwards, whatever happens.

The course's package holds working versions of most answers (the notebooks' later cells
use them), so an answer could be a one-line call of one. :data:`REFERENCES` names, for
each answer, the course's code that does its job, and ``with without_references("answer"):``
makes that code unusable while the answer's test runs: every call of it, under any name
and through any alias, import or copy of the reference, raises :class:`ReferenceHidden`.
The grader's inspection flags an answer that calls one of them, from the same table.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

from feedgpu.models.pipeline import steady_state_time_per_batch

_MISSING = object()

class NothingToHide(tuple):
    """An entry of :data:`REFERENCES` that hides nothing, and says why.

    It is an empty tuple (so it hides nothing wherever the table is read) that carries
    ``why``: the reason no code of the course or of a library does that answer's job.
    """

    why: str

    def __new__(cls, why: str) -> "NothingToHide":
        if not why or not why.strip():
            raise ValueError("an entry that hides nothing must say why")
        entry = super().__new__(cls)
        entry.why = why
        return entry

    def __repr__(self) -> str:
        return f"NothingToHide({self.why!r})"


#: For every graded answer (the grade id of its cell) of every notebook, the code that does
#: that answer's job, as ``"module:attribute"``: a function, a class (all of its methods)
#: or a method (``"module:Class.method"``), of the course or of a library whose function
#: the exercise asks the student to write. While the answer's tests run
#: (:func:`without_references`), none of them can be called; the inspection of a
#: submission flags an answer cell that uses one (:mod:`feedgpu.workflows.grading.inspection`).
#: An answer that no such code computes has a :class:`NothingToHide` entry with the
#: reason; the tests check that every answer of every notebook has an entry. Grade ids
#: are unique across the course, so one table serves every notebook.
REFERENCES: dict[str, tuple[str, ...]] = {
    # 00_orientation (the course's harness times a loader with a step per batch, as the loop does)
    "face_loader": NothingToHide("a DataLoader built with its settings: the exercise is the call of "
                                 "PyTorch's own class, which the tests inspect"),
    "time_per_step": ("feedgpu.measure.timing:time_loader",),
    # 01_dataset (Part D's tests stand the first three in for the student's Parts A to C).
    # torchvision's folder functions do each job too; ImageFolder is the oracle of Part D,
    # read before the references are hidden.
    "find_people": ("lfw_dataset:find_classes", "torchvision.datasets.folder:find_classes",
                    "torchvision.datasets.folder:DatasetFolder.find_classes"),
    "list_images": ("lfw_dataset:make_samples", "torchvision.datasets.folder:make_dataset",
                    "torchvision.datasets.folder:DatasetFolder.make_dataset"),
    "load_rgb": ("lfw_dataset:load_image", "torchvision.datasets.folder:pil_loader",
                 "torchvision.datasets.folder:default_loader"),
    "faces_dataset": ("lfw_dataset:LFWDataset", "torchvision.datasets.folder:DatasetFolder",
                      "torchvision.datasets.folder:ImageFolder"),
    "show_batch": ("feedgpu.plots:show_faces",),  # it tiles a batch with make_grid and draws it
    # 02_workers (the sweep is timed by the student's own measure: the course's harness and its
    # sweep are hidden while sweep_workers's tests run, so an answer that calls them fails)
    "measure": ("feedgpu.measure.timing:time_loader",),
    "make_face_loader": NothingToHide("a DataLoader built with its settings: the exercise is the call of "
                                      "PyTorch's own class, which the tests inspect"),
    "sweep_workers": ("feedgpu.measure.sweep:sweep", "feedgpu.measure.timing:time_loader"),
    "plot_workers": ("feedgpu.plots:plot_sweep",),
    "choose_workers": NothingToHide("no code of the course chooses a count from a sweep's table: the "
                                    "diagnosis's choose_workers picks one from its model's costs"),
    # 03_prefetch_transfer
    "time_per_batch": ("feedgpu.models.pipeline:steady_state_time_per_batch", "feedgpu.workflows.grading.testing:overlap_model"),
    "fixed_loader": NothingToHide("a DataLoader built with its settings; the count of workers comes from the "
                                  "student's own time_per_batch, for which the tests stand in the course's model"),
    "collate_to_tensor": ("feedgpu.workloads.arrays:collate_tensor",),
    # 04_augmentation (the tensor path's dataset and decoder are the course's; torchvision's v2.ToDtype
    # converts as to_float does, and may be used: the exercise is where the conversion runs)
    "fast_faces": ("feedgpu.workloads.lfw:TensorLFWDataset", "feedgpu.workloads.lfw:decode_tensor"),
    "to_float": NothingToHide("one tensor operation, which torchvision's v2.ToDtype also does: the exercise "
                              "is where the conversion runs (on the step's side), not how"),
    "seed_worker": NothingToHide("no code of the course or of PyTorch reseeds a dataset's numpy generator "
                                 "in a worker: that is the gap the exercise fills"),
    # 05_pinned_memory
    "transfer_time_s": ("feedgpu.models.copies:LinearCost.time_s",),
    "fit_transfer": ("feedgpu.models.copies:fit_linear_cost",),
    # (the simulated device replays strategies and loops step by step; notebook 00's model
    # simulation with one worker is the overlapped loop too)
    "strategy_time_s": ("feedgpu.models.copies:strategy_time_s", "feedgpu.models.copies:predict_strategies",
                        "feedgpu.models.device:simulate_strategy", "feedgpu.models.device:SimDevice"),
    "loop_time_s": ("feedgpu.models.copies:training_loop_s", "feedgpu.models.device:simulate_training",
                    "feedgpu.models.device:SimDevice", "feedgpu.models.pipeline:simulate"),
    "time_copy": NothingToHide("no code of the course takes the copy, the wait and the clock to call: the "
                               "timers of feedgpu.measure.pinning and feedgpu.measure.timing read "
                               "time.perf_counter themselves (after torch.cuda.synchronize), and "
                               "feedgpu.models.device.copy_timing_readings times a copy it makes"),
    # 06_copy_on_write (the choice of the number to add up is part of true_peak_mb; the
    # bench and the tests build their buffers with serialize_records, the one builder)
    "true_peak_mb": ("feedgpu.measure.memory:peak_total_mb", "feedgpu.measure.memory:sample_totals_mb"),
    "deserialize": ("feedgpu.workloads.records:SerializedRecordDataset",),  # its __getitem__ unpickles record i
    "serialize": ("feedgpu.workloads.records:serialize_records",),
    # 07_remote_storage (hiding fetch_all also stops the course code built on it: fetch_objects,
    # ThreadedS3Dataset, download_objects. Not hidden: concurrent.futures, the standard
    # library the exercise is about; is_retryable, which the task hands to the student; and
    # botocore's retries, which retry a request inside a client, not a function of a key.)
    "predicted_items_per_s": ("feedgpu.models.remote_storage:predicted_items_per_s",
                              "feedgpu.models.remote_storage:simulate_store"),
    "fetch_all": ("feedgpu.workloads.remote:fetch_all",),
    "fetch_with_retries": ("feedgpu.workloads.remote:fetch_with_retries",),
    # 08_distributed (DistributedSampler is Part B's oracle, read before it is hidden; torch's
    # sharding_filter datapipe deals a stream by rank and worker as shard_stream does; no
    # library counts distinct ids, so exact_accuracy hides the course's own only)
    "shard_indices": ("feedgpu.distributed.shards:padded_indices",
                      "torch.utils.data.distributed:DistributedSampler"),
    "shard_stream": ("feedgpu.distributed.shards:shard_by_rank_and_worker",
                     "torch.utils.data.datapipes.iter.sharding:ShardingFilterIterDataPipe"),
    "exact_accuracy": ("feedgpu.distributed.shards:exact_accuracy",),
    # 09_capstone (the course's fixes, and the diagnosis's own: its worker choice and its loader cloning)
    "workers_for_step": ("feedgpu.workloads.face_training:workers_to_keep_up", "feedgpu.diagnosis.whatif:choose_workers"),
    "pack_annotations": ("feedgpu.workloads.face_training:packed_annotations",),
    "to_model_input": ("feedgpu.workloads.face_training:model_input",),
    "epoch_order": ("feedgpu.workloads.face_training:shuffled_order",),
    "train_epoch": ("feedgpu.workloads.face_training:fixed_train_epoch",),
    "make_loader": ("feedgpu.workloads.face_training:fixed_loader", "feedgpu.diagnosis.sensing.cloning:clone_loader"),
}


class ReferenceHidden(Exception):
    """An answer called the course's own code for the job it was asked to do.

    Deliberately not a ``ValueError``, ``KeyError`` or ``TypeError``: a test that checks
    that an answer rejects bad input must not pass because the reference was hidden.
    """

    def __init__(self, reference: str) -> None:
        super().__init__(reference)
        self.reference = reference

    def __str__(self) -> str:
        if " " in self.reference:  # re-raised from a DataLoader worker: already a sentence
            return self.reference
        return (f"the answer calls the course's reference {self.reference}, which is unavailable while "
                f"this test runs: write your own")


@contextmanager
def standing_in(namespace: MutableMapping[str, Any], **references: Any) -> Iterator[None]:
    """Bind ``references`` in ``namespace`` (a notebook's ``globals()``) for a ``with`` block.

    Names that did not exist are removed again afterwards; the others get back their
    own value (``None`` included), also when the block raises, and also when the block
    deleted or rebound them meanwhile.

    Args:
        namespace: where the names live, usually ``globals()`` of the notebook.
        **references: name -> the object that stands in for it during the block.
    """
    saved = {name: namespace.get(name, _MISSING) for name in references}
    namespace.update(references)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is _MISSING:
                namespace.pop(name, None)
            else:
                namespace[name] = value


def resolve(reference: str) -> Any:
    """The object that ``"module:attribute"`` (or ``"module:Class.method"``) names, imported."""
    module, _, path = reference.partition(":")
    if not module or not path:
        raise ValueError(f"a reference is written 'module:attribute', got {reference!r}")
    obj: Any = importlib.import_module(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _functions(obj: Any, name: str) -> Iterator[tuple[types.FunctionType, str]]:
    """The Python functions that make up ``obj``: itself, or each method of a class."""
    if isinstance(obj, types.FunctionType):
        yield obj, name
    elif isinstance(obj, type):
        for attr, value in vars(obj).items():
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            elif isinstance(value, property):
                for accessor in (value.fget, value.fset, value.fdel):
                    if isinstance(accessor, types.FunctionType):
                        yield accessor, f"{name}.{attr}"
                continue
            if isinstance(value, types.FunctionType):
                yield value, f"{name}.{attr}"
    else:
        raise TypeError(f"{name} is a {type(obj).__name__}: only Python functions and classes can be hidden")


def _raising_code(function: types.FunctionType, name: str) -> types.CodeType:
    """Code that raises :class:`ReferenceHidden` naming ``name``, for ``function``'s place.

    It has the same free variables as ``function`` (a method that calls ``super()`` has
    one, ``__class__``), because Python swaps a function's code only for code that fits
    its closure; it never reads them.
    """
    free = function.__code__.co_freevars
    source = ("def outer():\n"
              + "".join(f"    {var} = None\n" for var in free)
              + "    def stand_in(*args, **kwargs):\n"
              + f"        raise __import__('feedgpu.workflows.grading.testing', fromlist=['ReferenceHidden']).ReferenceHidden({name!r})\n"
              + (f"        ({', '.join(free)},)  # never reached: binds the closure's names\n" if free else "")
              + "    return stand_in\n")
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<hidden: {name}>", "exec"), namespace)  # noqa: S102 (our own source)
    code = namespace["outer"]().__code__
    if code.co_freevars != free:
        raise TypeError(f"{name}: cannot make code with its free variables {free}")
    return code.replace(co_name=function.__code__.co_name, co_qualname=function.__qualname__)


@contextmanager
def hidden(*references: str) -> Iterator[None]:
    """Make each ``"module:attribute"`` in ``references`` raise :class:`ReferenceHidden` in a block.

    The function's code itself is swapped (and put back afterwards, whatever happens), not
    a name that points to it: so every way of reaching it fails alike, whether an answer
    imported it under another name, kept it in a default argument, a closure or a list,
    subclassed the class, or calls it through other code of the course. DataLoader workers
    started with *fork* inherit the swap; processes started with *spawn* import the course
    afresh and do not, which is why every graded test calls the answer in the kernel.
    """
    swapped: list[tuple[types.FunctionType, types.CodeType, Any, Any]] = []
    seen: set[int] = set()
    try:
        for reference in references:
            for function, name in _functions(resolve(reference), reference.replace(":", ".")):
                if id(function) in seen:
                    continue
                seen.add(id(function))
                code = _raising_code(function, name)
                swapped.append((function, function.__code__, function.__defaults__, function.__kwdefaults__))
                function.__code__ = code
                function.__defaults__, function.__kwdefaults__ = None, None
        yield
    finally:
        for function, code, defaults, kwdefaults in reversed(swapped):
            function.__code__ = code
            function.__defaults__, function.__kwdefaults__ = defaults, kwdefaults


@contextmanager
def without_references(*answers: str) -> Iterator[None]:
    """For a ``with`` block, the course's code listed for ``answers`` in :data:`REFERENCES`
    cannot be called: an answer that delegates to it fails its tests.

    Use it around a test cell's body: ``with without_references("time_per_batch"):``.
    References that stand in for *other* answers (:func:`standing_in`) keep working.

    Raises:
        KeyError: an answer that has no entry in :data:`REFERENCES`.
    """
    unknown = [answer for answer in answers if answer not in REFERENCES]
    if unknown:
        raise KeyError(f"no course references listed for {unknown}; see feedgpu.workflows.grading.testing.REFERENCES")
    with hidden(*(ref for answer in answers for ref in REFERENCES[answer])):
        yield


def overlap_model(load_s: float, step_s: float, overlapped: bool) -> float:
    """Notebook 00's model: seconds per step, ``load + step`` in turns, ``max`` overlapped.

    It is the pipeline model with no worker (in turns) or one (overlapped).

    Raises:
        ValueError: if a time is negative or not finite.
    """
    return steady_state_time_per_batch(1 if overlapped else 0, load_s, step_s)
