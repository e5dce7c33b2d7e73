"""feedgpu.workflows.grading.testing: the helpers that notebooks' test cells grade with.

``standing_in`` decides whose function a test cell runs, so a bug there would grade a
student with the wrong code; ``without_references`` decides that an answer calling the
course's own code earns nothing, so it must catch every way of reaching that code and put
everything back afterwards; ``overlap_model`` is notebook 00's reference answer. Each is
checked against its contract, with values worked out here from first principles.
"""

from __future__ import annotations

import math
import multiprocessing
import sys
import types

import pytest

import feedgpu.models.pipeline
import feedgpu.workflows.grading.testing
from feedgpu.models.pipeline import steady_state_time_per_batch
from feedgpu.workflows.grading.testing import (
    REFERENCES,
    NothingToHide,
    ReferenceHidden,
    hidden,
    overlap_model,
    resolve,
    standing_in,
    without_references,
)

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


# --------------------------------------------------------------------------- without_references

MODEL = "feedgpu.models.pipeline:steady_state_time_per_batch"


def _kept_in_a_closure():
    keep = steady_state_time_per_batch

    def answer(*args):
        return keep(*args)

    return answer


def test_a_hidden_reference_fails_through_every_name_and_alias():
    import feedgpu.models.pipeline as aliased_module

    def default_argument(w, load_s, step_s, _ref=steady_state_time_per_batch):
        return _ref(w, load_s, step_s)

    ways = {
        "the module attribute": lambda: feedgpu.models.pipeline.steady_state_time_per_batch(1, 0.1, 0.2),
        "a module alias": lambda: aliased_module.steady_state_time_per_batch(1, 0.1, 0.2),
        "an imported name": lambda: steady_state_time_per_batch(1, 0.1, 0.2),
        "a default argument": lambda: default_argument(1, 0.1, 0.2),
        "a closure": lambda: _kept_in_a_closure()(1, 0.1, 0.2),
        "a list": lambda: [steady_state_time_per_batch][0](1, 0.1, 0.2),
        "a module that re-exports it": lambda: feedgpu.workflows.grading.testing.steady_state_time_per_batch(1, 0.1, 0.2),
        "other course code that calls it": lambda: overlap_model(0.1, 0.2, True),
    }
    with hidden(MODEL):
        for way, call in ways.items():
            with pytest.raises(ReferenceHidden, match="steady_state_time_per_batch") as caught:
                call()
            assert "write your own" in str(caught.value), f"{way}: {caught.value}"
    for way, call in ways.items():
        assert call() == pytest.approx(0.2), f"{way}: the reference works again after the block"


def test_a_hidden_reference_is_not_a_value_error():
    """A test that checks for ValueError on bad input must not pass because of the hiding."""
    with hidden(MODEL), pytest.raises(ReferenceHidden):
        try:
            steady_state_time_per_batch(-1, 0.1, 0.2)
        except (ValueError, TypeError, KeyError):
            pytest.fail("the hidden reference raised an error a test of bad input would accept")
    with pytest.raises(ValueError):
        steady_state_time_per_batch(-1, 0.1, 0.2)


def test_a_hidden_class_fails_in_a_subclass_and_comes_back():
    class Base:
        def __init__(self, x):
            self.x = x

        @staticmethod
        def twice(x):
            return 2 * x

    class Mine(Base):
        pass

    module = types.ModuleType("fake_course")
    module.Base = Base
    sys.modules["fake_course"] = module
    try:
        with hidden("fake_course:Base"):
            with pytest.raises(ReferenceHidden, match="fake_course.Base.__init__"):
                Mine(1)
            with pytest.raises(ReferenceHidden):
                Mine.twice(1)
        assert Mine(3).x == 3 and Mine.twice(2) == 4, "the class works again after the block"
    finally:
        del sys.modules["fake_course"]


def test_hiding_is_undone_when_the_block_raises_and_keeps_defaults():
    from feedgpu.workloads.remote import fetch_with_retries

    defaults = fetch_with_retries.__defaults__
    with pytest.raises(AssertionError, match="a failing test"):
        with without_references("fetch_with_retries"):
            raise AssertionError("a failing test")
    assert fetch_with_retries.__defaults__ == defaults, "the defaults are put back"
    assert fetch_with_retries(str.upper, "k") == "K", "the reference works again after a failing test"


def test_nested_hiding_unwinds_in_order():
    with hidden(MODEL):
        with hidden(MODEL, "feedgpu.workflows.grading.testing:overlap_model"):
            with pytest.raises(ReferenceHidden):
                overlap_model(0.1, 0.2, True)
        with pytest.raises(ReferenceHidden):
            steady_state_time_per_batch(1, 0.1, 0.2)
    assert steady_state_time_per_batch(1, 0.1, 0.2) == pytest.approx(0.2)
    assert overlap_model(0.1, 0.2, True) == pytest.approx(0.2)


def test_only_the_answers_own_references_are_hidden():
    """A reference that stands in for another answer (standing_in) keeps working."""
    with without_references("exact_accuracy"):
        assert overlap_model(0.03, 0.02, False) == pytest.approx(0.05), "not a reference of exact_accuracy"
    with pytest.raises(KeyError, match="no_such_answer"):
        with without_references("no_such_answer"):
            pass


def test_every_listed_reference_can_be_hidden_and_restored():
    for answer, references in REFERENCES.items():
        if isinstance(references, NothingToHide):
            assert references == () and references.why.strip(), f"{answer}: hides nothing, so it must say why"
            continue
        assert references, f"{answer} lists no reference and no reason (NothingToHide)"
        for reference in references:
            obj = resolve(reference)
            assert callable(obj), f"{answer}: {reference} is not callable"
        before = {ref: getattr(resolve(ref), "__code__", None) for ref in references}
        with without_references(answer):
            pass
        after = {ref: getattr(resolve(ref), "__code__", None) for ref in references}
        assert before == after, f"{answer}: the references' code is not put back"


def test_a_forked_worker_inherits_the_hiding_a_spawned_one_does_not():
    """DataLoader workers started with fork copy the kernel, hidden code included; spawned
    ones import the course afresh and see the reference (which is why every graded test
    calls the answer in the kernel itself first)."""
    if "fork" in multiprocessing.get_all_start_methods():
        with hidden("feedgpu.workflows.grading.testing:overlap_model"):
            with multiprocessing.get_context("fork").Pool(1) as pool:
                with pytest.raises(ReferenceHidden, match="overlap_model"):
                    pool.apply(overlap_model, (0.1, 0.2, True))
    with hidden("feedgpu.workflows.grading.testing:overlap_model"):
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            assert pool.apply(overlap_model, (0.1, 0.2, True)) == pytest.approx(0.2)


def test_an_entry_that_hides_nothing_must_say_why():
    entry = NothingToHide("no code of the course computes it")
    assert entry == () and len(entry) == 0 and entry.why == "no code of the course computes it"
    assert "no code of the course" in repr(entry)
    for empty in ("", "   "):
        with pytest.raises(ValueError, match="say why"):
            NothingToHide(empty)
    answer = next(a for a, refs in REFERENCES.items() if isinstance(refs, NothingToHide))
    with without_references(answer):  # hides nothing, and is no error
        assert overlap_model(0.03, 0.02, True) == pytest.approx(0.03)


class _Base:
    def size(self) -> int:
        return 1


class _UsesSuper(_Base):
    def size(self) -> int:  # super() gives this method a closure (__class__)
        return super().size() + 1


def test_a_method_that_calls_super_can_be_hidden_and_restored():
    """Library classes (torchvision's DatasetFolder) have such methods: they hide as any other."""
    import sys

    module = sys.modules[__name__]
    with hidden(f"{module.__name__}:_UsesSuper"):
        with pytest.raises(ReferenceHidden, match="_UsesSuper.size"):
            _UsesSuper().size()
        assert _Base().size() == 1, "the base class is not hidden"
    assert _UsesSuper().size() == 2, "the method is put back, with its closure"


def test_library_functions_that_an_exercise_rebuilds_are_hidden():
    """01 hides torchvision's folder scan and ImageFolder; 08 hides DistributedSampler."""
    from torch.utils.data.distributed import DistributedSampler
    from torchvision.datasets import ImageFolder
    from torchvision.datasets.folder import find_classes

    with without_references("find_people", "faces_dataset", "shard_indices"):
        with pytest.raises(ReferenceHidden):
            find_classes("/nonexistent")
        with pytest.raises(ReferenceHidden):
            ImageFolder("/nonexistent")
        with pytest.raises(ReferenceHidden):
            DistributedSampler(list(range(4)), num_replicas=2, rank=0)
    assert list(DistributedSampler(list(range(4)), num_replicas=2, rank=0, shuffle=False)) == [0, 2]
