"""Argument checks shared by the whole package: what a count, a time or a choice must be.

Every public function of feedgpu checks its arguments the same way, through these
helpers, so a wrong argument fails at once with one kind of message, naming the
argument, the value and what was expected::

    n = check_int("n", n)                          # a whole number >= 0, as an int
    batches = check_int("batches", batches, minimum=1)
    seconds = check_seconds("seconds_per_item", seconds)   # a finite float >= 0
    jitter = check_number("jitter", jitter)        # a finite float >= 0 (not a time)
    statistic = check_choice("statistic", statistic, ("median", "min"))

Each helper returns the value normalised (``2.0`` becomes ``2``, a numpy integer a
Python ``int``, an ``int`` of seconds a ``float``), so the caller stores what it returns.

Which exception:

* ``TypeError`` when the value is not a number at all (a string, ``None``, a list) or is a
  bool: ``True`` is an ``int`` to Python, but ``batches=True`` is a mistake, not a count;
* ``ValueError`` when it is a number of the wrong kind or size: a fraction where a whole
  number is needed (``2.5``), ``nan`` or an infinity, or a value below the minimum.

Both cross DataLoader worker processes intact, like every built-in exception.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Collection
from typing import Any, TypeVar

__all__ = ["check_int", "check_number", "check_seconds", "check_choice"]

T = TypeVar("T")


def _got(value: Any) -> str:
    """``value`` as a message shows it: its repr, and its type where the repr hides it."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return repr(value)
    return f"{value!r} (a {type(value).__name__})"


def _reject_non_number(name: str, value: Any, expected: str) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        # numbers.Real holds int, float, Fraction, Decimal-free numeric types and every
        # numpy integer and float; bool is an int, but never a count or a time.
        raise TypeError(f"{name} must be {expected}, got {_got(value)}")


def check_int(name: str, value: Any, minimum: int | None = 0) -> int:
    """``value`` as an ``int``, if it is a whole number and at least ``minimum``.

    Accepts Python and numpy integers, and floats with no fractional part (``2.0``).

    Args:
        name: the argument's name, for the message.
        value: what the caller passed.
        minimum: the smallest value allowed; None for no lower bound (e.g. a seed).

    Returns:
        The value as a Python ``int``.

    Raises:
        TypeError: if ``value`` is not a real number (a string, None, ...) or is a bool.
        ValueError: if it has a fractional part, is nan or infinite, or is below ``minimum``.
    """
    expected = "an integer" if minimum is None else f"an integer >= {minimum}"
    _reject_non_number(name, value, expected)
    try:
        whole = operator.index(value)  # int and every numpy integer, exactly
    except TypeError:
        as_float = float(value)
        if not (math.isfinite(as_float) and as_float.is_integer()):
            raise ValueError(f"{name} must be {expected}, got {_got(value)}") from None
        whole = int(as_float)
    if minimum is not None and whole < minimum:
        raise ValueError(f"{name} must be {expected}, got {_got(value)}")
    return whole


def check_number(name: str, value: Any, minimum: float | None = 0.0, *, what: str = "number") -> float:
    """``value`` as a ``float``, if it is a finite real number and at least ``minimum``.

    Args:
        name: the argument's name, for the message.
        value: what the caller passed.
        minimum: the smallest value allowed; None for no lower bound.
        what: what the number is, for the message (``"number of seconds"``).

    Returns:
        The value as a Python ``float``.

    Raises:
        TypeError: if ``value`` is not a real number (a string, None, ...) or is a bool.
        ValueError: if it is nan or infinite, or below ``minimum``.
    """
    expected = f"a finite {what}" + ("" if minimum is None else f" >= {minimum:g}")
    _reject_non_number(name, value, expected)
    as_float = float(value)
    if not math.isfinite(as_float) or (minimum is not None and as_float < minimum):
        raise ValueError(f"{name} must be {expected}, got {_got(value)}")
    return as_float


def check_seconds(name: str, value: Any) -> float:
    """``value`` as a ``float`` of seconds: a finite real number >= 0.

    Raises:
        TypeError: if ``value`` is not a real number, or is a bool.
        ValueError: if it is negative, nan or infinite.
    """
    return check_number(name, value, 0.0, what="number of seconds")


def check_choice(name: str, value: T, choices: Collection[T]) -> T:
    """``value`` itself, if it is one of ``choices``.

    Raises:
        ValueError: if it is not; the message lists the choices.
    """
    if value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {listed}; got {value!r}")
    return value
