"""Notebook 04 (augmentation cost): wrong answers and delegations (see ``__init__.py``)."""

from wrong_answers import wrong

DELEGATIONS = {
    "expected_speedup": """
        from feedgpu.model import steady_state_time_per_batch


        def expected_speedup(per_item_s, overhead_s, workers, cores):
            if workers == 0:
                return 1.0
            return per_item_s / steady_state_time_per_batch(workers, per_item_s, 0.0, overhead_s, cores)
    """,
}

WRONG_ANSWERS = []
