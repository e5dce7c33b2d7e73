"""feedgpu.testing: the helpers that notebooks' test cells grade with.

``standing_in`` decides whose function a test cell runs, so a bug there would grade a
student with the wrong code; ``overlap_model`` is notebook 00's reference answer. Both are
checked against their contract, with values worked out here from first principles.
"""

from __future__ import annotations

import math

import pytest

from feedgpu.testing import overlap_model, standing_in

pytestmark = pytest.mark.unit


def _student(x):
    return "student"


def _reference(x):
    return "reference"


# --------------------------------------------------------------------------- standing_in


def test_standing_in_binds_the_reference_inside_and_restores_the_answer_after():
    namespace = {"find_people": _student, "other": 1}
    with standing_in(namespace, find_people=_reference):
        assert namespace["find_people"] is _reference, "inside the block the reference stands in"
        assert namespace["other"] == 1, "names not given are left alone"
    assert namespace["find_people"] is _student, "after the block the student's own function is back"
    assert namespace == {"find_people": _student, "other": 1}, f"nothing else changed: {namespace}"


def test_standing_in_restores_the_answer_when_the_block_raises():
    namespace = {"find_people": _student}
    with pytest.raises(AssertionError, match="a failing test"):
        with standing_in(namespace, find_people=_reference):
            raise AssertionError("a failing test")
    assert namespace["find_people"] is _student, (
        "a failing test cell must still give the student's function back to later cells"
    )


def test_standing_in_removes_names_that_did_not_exist():
    namespace = {"kept": 1}
    with pytest.raises(KeyError):
        with standing_in(namespace, find_people=_reference, load_image=_reference):
            assert namespace["find_people"] is _reference and namespace["load_image"] is _reference, (
                "names the student never defined are bound inside the block"
            )
            raise KeyError("the test failed")
    assert namespace == {"kept": 1}, f"names that did not exist before are removed again: {namespace}"


def test_standing_in_restores_a_value_that_was_none():
    namespace = {"answer": None}
    with standing_in(namespace, answer=_reference):
        assert namespace["answer"] is _reference, "the reference stands in for None"
    assert "answer" in namespace and namespace["answer"] is None, (
        "a name bound to None existed: it gets None back, it is not removed"
    )


def test_standing_in_survives_the_block_deleting_or_rebinding_a_name():
    namespace = {"a": _student}
    with standing_in(namespace, a=_reference, b=_reference):
        del namespace["a"]
        del namespace["b"]
    assert namespace == {"a": _student}, f"a restored and b removed even if the block deleted them: {namespace}"


def test_standing_in_nested_blocks_unwind_in_order():
    namespace = {"f": _student}
    with standing_in(namespace, f=_reference):
        with standing_in(namespace, f=len):
            assert namespace["f"] is len, "the inner block's stand-in wins inside it"
        assert namespace["f"] is _reference, "leaving the inner block gives back the outer stand-in"
    assert namespace["f"] is _student, "leaving both gives back the student's function"


# --------------------------------------------------------------------------- overlap_model


@pytest.mark.parametrize(
    ("load_s", "step_s"),
    [(0.03, 0.02), (0.02, 0.05), (0.04, 0.04), (0.0, 0.01), (0.4, 0.05), (2.0, 0.0)],
)
def test_overlap_model_in_turns_adds_and_overlapped_takes_the_larger(load_s, step_s):
    in_turns = overlap_model(load_s, step_s, overlapped=False)
    overlapped = overlap_model(load_s, step_s, overlapped=True)
    # Taking turns, a step waits for its load: the two times add. Overlapped, the next
    # batch loads during this step, so the slower of the two sets the pace.
    assert math.isclose(in_turns, load_s + step_s, abs_tol=1e-15), (
        f"in turns: {load_s} + {step_s} = {load_s + step_s} s per step, got {in_turns}"
    )
    assert math.isclose(overlapped, max(load_s, step_s), abs_tol=1e-15), (
        f"overlapped: max({load_s}, {step_s}) = {max(load_s, step_s)} s per step, got {overlapped}"
    )


def test_overlap_model_notebook_00_figures():
    # Notebook 00: 30 ms to load, 20 ms to step; its epoch of 12 steps takes 0.6 s in
    # turns and 0.03 + 0.02 + 11 x 0.03 = 0.38 s overlapped.
    assert math.isclose(12 * overlap_model(0.03, 0.02, False), 0.6), "12 x (30 + 20) ms = 0.6 s"
    first_load_and_last_step = 0.03 + 0.02
    assert math.isclose(first_load_and_last_step + 11 * overlap_model(0.03, 0.02, True), 0.38), (
        "30 ms + 20 ms + 11 x 30 ms = 0.38 s"
    )


def test_overlap_model_rejects_negative_times():
    for args in [(-0.01, 0.02), (0.01, -0.02), (math.nan, 0.02)]:
        with pytest.raises(ValueError):
            overlap_model(*args, overlapped=True)
