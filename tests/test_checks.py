"""feedgpu.base.checks: the one place that says what a count, a time or a choice must be.

Expectations are the contract in the module's docstring: whole numbers (also 2.0 and
numpy integers) come back as ``int``, times as ``float``; a bool or a non-number is a
``TypeError``; a fraction, nan, an infinity or a value below the minimum a ``ValueError``
whose message names the argument and the value.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from feedgpu.base.checks import check_choice, check_int, check_number, check_seconds

pytestmark = pytest.mark.unit


# --------------------------------------------------------------------------- check_int


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, 0), (3, 3), (2.0, 2), (np.int64(7), 7), (np.uint8(255), 255), (np.int32(1), 1),
     (np.float64(4.0), 4), (Fraction(6, 2), 3), (10**20, 10**20)],
)
def test_check_int_accepts_whole_numbers_and_returns_a_python_int(value, expected):
    got = check_int("n", value)
    assert got == expected, f"check_int('n', {value!r}) returned {got!r}, expected {expected!r}"
    assert type(got) is int, f"check_int('n', {value!r}) should return a Python int, got {type(got).__name__}"


@pytest.mark.parametrize("value", [2.5, 0.1, -0.5, math.nan, math.inf, -math.inf, np.float32(1.5)])
def test_check_int_rejects_fractions_and_non_finite_values(value):
    with pytest.raises(ValueError) as err:
        check_int("batches", value, minimum=0)
    message = str(err.value)
    assert "batches" in message and "integer" in message, (
        f"the message should name the argument and say an integer: {message!r}"
    )


@pytest.mark.parametrize("value", [True, False, np.bool_(True), "3", None, [1], b"1", 1 + 0j])
def test_check_int_rejects_bools_and_non_numbers_with_type_error(value):
    with pytest.raises(TypeError) as err:
        check_int("repeats", value, minimum=1)
    assert "repeats" in str(err.value), f"the message should name the argument: {err.value}"


@pytest.mark.parametrize(("value", "minimum"), [(-1, 0), (0, 1), (np.int64(-3), 0), (4, 5), (-2.0, -1)])
def test_check_int_rejects_values_below_the_minimum(value, minimum):
    with pytest.raises(ValueError) as err:
        check_int("num_workers", value, minimum=minimum)
    message = str(err.value)
    assert f">= {minimum}" in message, f"the message should say what was expected (>= {minimum}): {message!r}"
    assert repr(value) in message, f"the message should show the value {value!r}: {message!r}"


def test_check_int_minimum_is_inclusive_and_none_allows_negatives():
    assert check_int("warmup", 0) == 0, "the default minimum 0 is allowed itself"
    assert check_int("batches", 1, minimum=1) == 1, "minimum=1 allows 1"
    assert check_int("seed", -5, minimum=None) == -5, "minimum=None allows a negative seed"


# --------------------------------------------------------------------------- check_number, check_seconds


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, 0.0), (0.25, 0.25), (3, 3.0), (np.float32(0.5), 0.5), (np.int64(2), 2.0), (Fraction(1, 4), 0.25)],
)
def test_check_seconds_returns_a_float(value, expected):
    got = check_seconds("step_s", value)
    assert got == expected and type(got) is float, f"check_seconds('step_s', {value!r}) returned {got!r}"


@pytest.mark.parametrize("value", [-0.001, -1, math.nan, math.inf, -math.inf, np.float64("nan")])
def test_check_seconds_rejects_negative_and_non_finite(value):
    with pytest.raises(ValueError) as err:
        check_seconds("seconds_per_item", value)
    message = str(err.value)
    assert "seconds_per_item" in message and "seconds" in message.replace("seconds_per_item", ""), (
        f"the message should name the argument and say a number of seconds: {message!r}"
    )
    assert "finite" in message, f"the message should say the value must be finite: {message!r}"


@pytest.mark.parametrize("value", [True, "0.1", None, [0.1]])
def test_check_seconds_rejects_bools_and_non_numbers(value):
    with pytest.raises(TypeError) as err:
        check_seconds("gap_s", value)
    assert "gap_s" in str(err.value), f"the message should name the argument: {err.value}"


def test_check_number_minimum_and_no_minimum():
    assert check_number("jitter", 0.0) == 0.0, "0 is allowed with the default minimum 0"
    assert check_number("offset", -2.5, minimum=None) == -2.5, "minimum=None allows negatives"
    with pytest.raises(ValueError, match="offset"):
        check_number("offset", math.nan, minimum=None)
    with pytest.raises(ValueError, match=r">= 1"):
        check_number("ratio", 0.5, minimum=1.0)


# --------------------------------------------------------------------------- check_choice


def test_check_choice_returns_the_value_or_lists_the_choices():
    assert check_choice("statistic", "min", ("median", "min")) == "min", "a listed choice comes back"
    with pytest.raises(ValueError) as err:
        check_choice("statistic", "mean", ("median", "min"))
    message = str(err.value)
    assert "statistic" in message and "'median'" in message and "'min'" in message and "'mean'" in message, (
        f"the message should name the argument, every choice and the value: {message!r}"
    )


def test_import_named_finds_module_attribute_and_says_what_failed():
    """MODULE:ATTRIBUTE, dotted attributes too; each failure is a one-line ValueError naming the flag."""
    import os.path

    from feedgpu.base.cli import import_named

    assert import_named("os.path:join", "--step") == (os.path.join, os.path)
    assert import_named("feedgpu.base.cli:import_named.__name__", "--x")[0] == "import_named"
    for spec, found in [("os.path", "MODULE:ATTRIBUTE"), ("no_such_module_here:f", "cannot import"),
                        ("os.path:no_such_name", "no attribute")]:
        with pytest.raises(ValueError, match=found) as caught:
            import_named(spec, "--loader")
        assert "--loader" in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
