"""Notebook 04 (augmentation cost): wrong answers and delegations (see ``__init__.py``).

The tests of ``seed_worker`` start DataLoader workers, so its wrong answers are one per
mistake, and none raises inside a worker: an error raised there leaves the loader's iterator
in a reference cycle, and whenever the garbage collector frees it, its shutdown waits 5 s
for each worker (``nb01_dataset.py`` says more).
"""

import textwrap

from wrong_answers import wrong

DELEGATIONS = {
    "expected_speedup": """
        from feedgpu.models.pipeline import steady_state_time_per_batch


        def expected_speedup(per_item_s, overhead_s, workers, cores):
            if workers == 0:
                return 1.0
            return per_item_s / steady_state_time_per_batch(workers, per_item_s, 0.0, overhead_s, cores)
    """,
}


def _src(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def _indent(code: str, spaces: int) -> str:
    return textwrap.indent(_src(code), " " * spaces).lstrip()


_STAGE_CHECKS = '''
if not times:
    raise ValueError("the table is empty")
if any(t < 0 for t in times.values()):
    raise ValueError(f"times must be >= 0, got {times}")
if sum(times.values()) == 0:
    raise ValueError("every stage took 0 s")
'''


def _function(signature: str, *parts: str) -> str:
    """``def signature:`` with the body ``parts`` (each a block of code; empty ones left out)."""
    return "\n".join([f"def {signature}:", *(textwrap.indent(_src(part), " " * 4) for part in parts if part)])


def _stage_fractions(body: str, checks: str = _STAGE_CHECKS) -> str:
    return _function("stage_fractions(times)", checks, body)


def _slowest_stage(body: str) -> str:
    return _function("slowest_stage(times)", 'if not times:\n    raise ValueError("the table is empty")', body)


_EXPECTED_SPEEDUP = '''
def expected_speedup(per_item_s, overhead_s, workers, cores):
    {checks}
    if workers == 0:
        return 1.0
    {body}
'''

_SPEEDUP_CHECKS = '''
if per_item_s <= 0 or overhead_s < 0 or workers < 0 or cores <= 0:
    raise ValueError(f"bad input: {per_item_s}, {overhead_s}, {workers}, {cores}")
'''


def _expected_speedup(body: str, checks: str = _SPEEDUP_CHECKS) -> str:
    return _src(_EXPECTED_SPEEDUP).format(checks=_indent(checks, 4), body=_indent(body, 4))


def _seed_worker(body: str, main_check: bool = True) -> str:
    """``seed_worker`` that does ``body`` with ``info``; it returns in the main process if ``main_check``."""
    return _function("seed_worker(worker_id)", "info = get_worker_info()",
                     "if info is None:\n    return" if main_check else "", body)


WRONG_ANSWERS = [
    # ---------------------------------------------------------------- Part B: stage_fractions
    wrong("stage_fractions", "divides by the largest stage, not the total", _stage_fractions("""
            largest = max(times.values())
            return {stage: t / largest for stage, t in times.items()}
          """), "test_stage_fractions_values"),
    wrong("stage_fractions", "the stages sorted by name", _stage_fractions("""
            total = sum(times.values())
            return {stage: times[stage] / total for stage in sorted(times)}
          """), "test_stage_fractions_values"),
    wrong("stage_fractions", "divides the table it is given in place", _stage_fractions("""
            total = sum(times.values())
            for stage in times:
                times[stage] /= total
            return times
          """), "test_stage_fractions_values"),
    wrong("stage_fractions", "no checks (an empty table, a negative time, a zero total pass or divide by 0)",
          _stage_fractions("""
            total = sum(times.values())
            return {stage: t / total for stage, t in times.items()}
          """, checks=""), "test_stage_fractions_rejects_bad_tables"),
    # ---------------------------------------------------------------- Part B: slowest_stage
    wrong("slowest_stage", "the fastest stage", _slowest_stage("return min(times, key=times.get)"),
          "test_slowest_stage_largest", "test_slowest_stage_ties_and_empty"),
    wrong("slowest_stage", "the last of a tie (>=)", _slowest_stage("""
            best = None
            for stage, t in times.items():
                if best is None or t >= times[best]:
                    best = stage
            return best
          """), "test_slowest_stage_ties_and_empty"),
    wrong("slowest_stage", "the first by name on a tie", _slowest_stage("return max(sorted(times), key=times.get)"),
          "test_slowest_stage_ties_and_empty"),
    # ---------------------------------------------------------------- Part E: expected_speedup
    wrong("expected_speedup", "the hand-over spread over the workers: n * p / (p + t), capped by the cores",
          _expected_speedup("return min(workers * per_item_s / (per_item_s + overhead_s), "
                            "cores * per_item_s / (per_item_s + 2 * overhead_s))"),
          "test_expected_speedup_formula"),
    wrong("expected_speedup", "the worker's hand-over forgotten: p / w", _expected_speedup(
          "return per_item_s / max(overhead_s, per_item_s / workers, (per_item_s + 2 * overhead_s) / cores)"),
          "test_expected_speedup_formula"),
    wrong("expected_speedup", "ignores the cores", _expected_speedup(
          "return per_item_s / max(overhead_s, (per_item_s + overhead_s) / workers)"),
          "test_expected_speedup_formula", "test_expected_speedup_cores_cap"),
    wrong("expected_speedup", "the cores cap the workers only: min(workers, cores)", _expected_speedup(
          "return per_item_s / max(overhead_s, (per_item_s + overhead_s) / min(workers, cores))"),
          "test_expected_speedup_formula", "test_expected_speedup_cores_cap"),
    wrong("expected_speedup", "no input checks", _expected_speedup(
          "return per_item_s / max(overhead_s, (per_item_s + overhead_s) / workers, "
          "(per_item_s + 2 * overhead_s) / cores)", checks="pass"),
          "test_expected_speedup_rejects_bad_input"),
    # ---------------------------------------------------------------- Part G: seed_worker
    wrong("seed_worker", "seeds with the worker id (every epoch, every seed the same)",
          _seed_worker("info.dataset.rng = np.random.default_rng(info.id)"),
          "test_seed_worker_distinct", "test_seed_worker_reproducible"),
    wrong("seed_worker", "seeds numpy's global generator, not the dataset's",
          _seed_worker("np.random.seed(info.seed % 2**32)"),
          "test_seed_worker_distinct", "test_seed_worker_reproducible"),
    wrong("seed_worker", "fails in the main process (no check for get_worker_info() is None)",
          _seed_worker("info.dataset.rng = np.random.default_rng(info.seed)", main_check=False),
          "test_seed_worker_distinct"),
    wrong("seed_worker", "fresh entropy: np.random.default_rng() without a seed",
          _seed_worker("info.dataset.rng = np.random.default_rng()"),
          "test_seed_worker_reproducible"),
]
