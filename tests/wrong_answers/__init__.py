"""Plausible wrong answers for every graded answer of the course, as test data.

One module per notebook, ``nb<assignment>.py`` (``nb05_pinned_memory.py`` for
``solutions/05_pinned_memory``), holds two things:

* ``WRONG_ANSWERS``: mistakes students make, each a whole answer cell as a student would
  write it, with the graded test cells that must fail for it. The notebook's one-kernel
  run (``tests/test_answers_graded_alone.py``) swaps each into the kernel in place of the
  solution, runs those tests (each must fail), puts the solution back, and runs them again
  (each must pass: the failure was the wrong answer's). Every graded test cell of every
  solution notebook must be named by at least one wrong answer: a test no plausible
  mistake fails proves nothing, and earns no points.
* ``DELEGATIONS``: each answer with references in :data:`feedgpu.workflows.grading.testing.REFERENCES`,
  handed in as a call of one of them, in a way a student could write it (an import under
  the answer's name, a module attribute, a default argument, a subclass, a wrapper).
  Each must fail every one of the answer's tests, because the references are hidden
  while they run.
"""

from __future__ import annotations

import importlib
import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class WrongAnswer:
    """One plausible mistake in one answer.

    Attributes:
        answer: the grade id of the answer cell it replaces.
        mistake: what the student got wrong, in a few words (shown when it is not caught).
        source: the whole cell, as the student would hand it in.
        fails: the grade ids of the test cells that must fail for it (its own tests).
    """

    answer: str
    mistake: str
    source: str
    fails: frozenset[str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "source", textwrap.dedent(self.source).strip("\n"))
        object.__setattr__(self, "fails", frozenset(self.fails))


def wrong(answer: str, mistake: str, source: str, *fails: str) -> WrongAnswer:
    """A :class:`WrongAnswer`: ``wrong("find_people", "labels from 1", "def ...", "test_...")``."""
    return WrongAnswer(answer, mistake, source, frozenset(fails))


def _module(assignment: str):
    try:
        return importlib.import_module(f"{__name__}.nb{assignment}")
    except ModuleNotFoundError as err:
        if err.name != f"{__name__}.nb{assignment}":
            raise
        return None


def wrong_answers(assignment: str) -> list[WrongAnswer]:
    """The wrong answers kept for ``assignment`` (``[]`` when it has no module yet)."""
    return list(getattr(_module(assignment), "WRONG_ANSWERS", []))


def delegations(assignment: str) -> dict[str, str]:
    """The delegations kept for ``assignment``: answer grade id -> the cell's source."""
    return {answer: textwrap.dedent(source).strip("\n")
            for answer, source in getattr(_module(assignment), "DELEGATIONS", {}).items()}
