"""Notebook 00 (orientation): wrong answers and delegations (see ``__init__.py``)."""

import textwrap

from wrong_answers import wrong

DELEGATIONS = {
    "time_per_step": """
        from feedgpu.measure.timing import time_loader


        def time_per_step(loader, step, steps):
            if steps < 1:
                raise ValueError(steps)
            return time_loader(loader, batches=steps, warmup=1, repeats=1, step=step).mean_s_per_batch
    """,
}


def _face_loader(arguments: str) -> str:
    return f"""
        def face_loader(dataset, num_workers):
            return DataLoader(dataset, {arguments})
    """


_GOOD_CHECK = """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps!r}")
"""


def _time_per_step(body: str, check: str = _GOOD_CHECK) -> str:
    lines = textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
    return "def time_per_step(loader, step, steps):\n" + (check.strip("\n") + "\n" if check.strip() else "") + lines + "\n"


WRONG_ANSWERS = [
    # ---------------------------------------------------------------- Part C: face_loader
    wrong("face_loader", "not shuffled",
          _face_loader("batch_size=BATCH_SIZE, num_workers=num_workers"),
          "test_face_loader_settings"),
    wrong("face_loader", "shuffled by an unseeded generator: another order every run",
          _face_loader("batch_size=BATCH_SIZE, shuffle=True, num_workers=num_workers"),
          "test_face_loader_settings"),
    wrong("face_loader", "the default batch size (1)",
          _face_loader("shuffle=True, num_workers=num_workers, generator=torch.Generator().manual_seed(SEED)"),
          "test_face_loader_settings", "test_face_loader_epoch"),
    wrong("face_loader", "the last, smaller batch dropped",
          _face_loader("batch_size=BATCH_SIZE, shuffle=True, num_workers=num_workers, drop_last=True, "
                       "generator=torch.Generator().manual_seed(SEED)"),
          "test_face_loader_epoch"),
    wrong("face_loader", "no workers, whatever num_workers says",
          _face_loader("batch_size=BATCH_SIZE, shuffle=True, generator=torch.Generator().manual_seed(SEED)"),
          "test_face_loader_settings"),
    # ---------------------------------------------------------------- Part D: time_per_step
    wrong("time_per_step", "the clock started before the first batch", _time_per_step("""
        start = time.perf_counter()
        batches = iter(loader)
        step(next(batches))
        for _ in range(steps):
            step(next(batches))
        return (time.perf_counter() - start) / steps
    """), "test_time_per_step_first_batch"),
    wrong("time_per_step", "batches taken, the step never called", _time_per_step("""
        batches = iter(loader)
        next(batches)
        start = time.perf_counter()
        for _ in range(steps):
            next(batches)
        return (time.perf_counter() - start) / steps
    """), "test_time_per_step_in_turns", "test_time_per_step_first_batch"),
    wrong("time_per_step", "divided by steps + 1", _time_per_step("""
        batches = iter(loader)
        step(next(batches))
        start = time.perf_counter()
        for _ in range(steps):
            step(next(batches))
        return (time.perf_counter() - start) / (steps + 1)
    """), "test_time_per_step_in_turns"),
    wrong("time_per_step", "the whole time of the timed steps, not per step", _time_per_step("""
        batches = iter(loader)
        step(next(batches))
        start = time.perf_counter()
        for _ in range(steps):
            step(next(batches))
        return time.perf_counter() - start
    """), "test_time_per_step_in_turns", "test_time_per_step_overlapped"),
    wrong("time_per_step", "a whole pass over the loader, whatever steps says", _time_per_step("""
        batches = iter(loader)
        step(next(batches))
        start = time.perf_counter()
        count = 0
        for batch in batches:
            step(batch)
            count += 1
        return (time.perf_counter() - start) / count
    """), "test_time_per_step_first_batch"),
    wrong("time_per_step", "a new pass (and new workers) for every step", _time_per_step("""
        step(next(iter(loader)))
        start = time.perf_counter()
        for _ in range(steps):
            step(next(iter(loader)))
        return (time.perf_counter() - start) / steps
    """), "test_time_per_step_overlapped", "test_time_per_step_first_batch"),
    wrong("time_per_step", "no error for steps < 1", _time_per_step("""
        batches = iter(loader)
        step(next(batches))
        start = time.perf_counter()
        for _ in range(steps):
            step(next(batches))
        return (time.perf_counter() - start) / max(steps, 1)
    """, check=""), "test_time_per_step_first_batch"),
]
