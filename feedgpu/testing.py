"""Helpers for the notebooks' test cells: grade each answer on its own.

A notebook asks for several functions, and a later one often calls an earlier one (the
Dataset calls the folder scan). Its tests would then fail for the earlier mistake too,
and a student would lose the same points twice. In a test cell,
``with standing_in(globals(), find_people=reference):`` puts the course's reference in
place of the earlier answer for the duration of the test, and puts the student's own
function back afterwards, whatever happens.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

from feedgpu.model import steady_state_time_per_batch

_MISSING = object()


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


def overlap_model(load_s: float, step_s: float, overlapped: bool) -> float:
    """Notebook 00's model: seconds per step, ``load + step`` in turns, ``max`` overlapped.

    It is the pipeline model with no worker (in turns) or one (overlapped).

    Raises:
        ValueError: if a time is negative or not finite.
    """
    return steady_state_time_per_batch(1 if overlapped else 0, load_s, step_s)

