"""Notebook 02 (single vs multi-process): wrong answers and delegations (see ``__init__.py``)."""

from wrong_answers import wrong

DELEGATIONS = {
    "measure": """
        def measure(loader, batches, warmup=2, repeats=3):
            timing = time_loader(loader, batches=batches, warmup=max(warmup - 1, 0), repeats=repeats)
            return timing.mean_s_per_batch, timing.std_s_per_batch
    """,
    "time_epochs": """
        def time_epochs(loader, epochs):
            if epochs < 1:
                raise ValueError(epochs)
            timings = [time_loader(loader, warmup=0, repeats=1) for _ in range(epochs)]
            return [(t.startup_s[0], t.startup_s[0] + t.s_per_batch[0] * t.n_batches[0]) for t in timings]
    """,
}

WRONG_ANSWERS = []
