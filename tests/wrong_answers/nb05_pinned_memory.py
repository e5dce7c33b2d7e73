"""Notebook 05 (pinned memory and the GPU): wrong answers and delegations (see ``__init__.py``)."""

from wrong_answers import wrong

DELEGATIONS = {
    "transfer_time_s": """
        def transfer_time_s(nbytes, latency_s, bytes_per_s):
            return LinearCost(latency_s, bytes_per_s).time_s(nbytes)
    """,
    "fit_transfer": """
        from feedgpu.copies import fit_linear_cost


        def fit_transfer(nbytes, seconds):
            cost = fit_linear_cost(nbytes, seconds).cost
            return cost.latency_s, cost.bytes_per_s
    """,
    "strategy_time_s": "from feedgpu.copies import strategy_time_s",
    "loop_time_s": """
        import feedgpu.copies as copies


        def loop_time_s(n_batches, copy_s, compute_s, overlapped):
            return copies.training_loop_s(n_batches, copy_s, compute_s, overlapped=overlapped)
    """,
}

WRONG_ANSWERS = []
