"""Notebook 03 (prefetching and transfer cost): wrong answers and delegations (see ``__init__.py``)."""

from wrong_answers import wrong

DELEGATIONS = {
    "time_per_batch": "time_per_batch = steady_state_time_per_batch",
    "workers_needed": """
        def workers_needed(load_s, step_s, transfer_s=0.0):
            if step_s + transfer_s <= 0:
                raise ValueError('no count keeps up')
            return next(w for w in range(1, 10**6)
                        if steady_state_time_per_batch(w, load_s, step_s, transfer_s) <= (step_s + transfer_s) * (1 + 1e-9))
    """,
    "collate_to_tensor": "collate_to_tensor = collate_tensor",
}

WRONG_ANSWERS = []
