"""Notebook 00 (orientation): wrong answers and delegations (see ``__init__.py``)."""

from wrong_answers import wrong

DELEGATIONS = {
    "time_per_step": "from feedgpu.workflows.grading.testing import overlap_model as time_per_step",
    "epoch_time": """
        from feedgpu.models.pipeline import simulate


        def epoch_time(n_steps, load_s, step_s, overlapped):
            run = simulate(1 if overlapped else 0, load_s, step_s, n_batches=max(n_steps, 1))
            if n_steps < 0:
                raise ValueError(n_steps)
            return run.total_s if n_steps else 0.0
    """,
}


def _time_per_step(checks: str, result: str) -> str:
    return f"""
        def time_per_step(load_s, step_s, overlapped):
            {checks}
            return {result}
    """


def _epoch_time(body: str) -> str:
    return """
        def epoch_time(n_steps, load_s, step_s, overlapped):
    """ + body


_CHECKS = "if load_s < 0 or step_s < 0:\n                raise ValueError('negative time')"

WRONG_ANSWERS = [
    wrong("time_per_step", "ignores overlapped: always the max",
          _time_per_step(_CHECKS, "max(load_s, step_s)"), "test_time_per_step_serial"),
    wrong("time_per_step", "overlapped returns the load time",
          _time_per_step(_CHECKS, "load_s if overlapped else load_s + step_s"), "test_time_per_step_overlapped"),
    wrong("time_per_step", "overlapped still pays load + step",
          _time_per_step(_CHECKS, "load_s + step_s"), "test_time_per_step_overlapped"),
    wrong("time_per_step", "checks only the load for a negative time",
          _time_per_step("if load_s < 0:\n                raise ValueError('negative load')",
                         "max(load_s, step_s) if overlapped else load_s + step_s"),
          "test_time_per_step_rejects_negative"),
    wrong("epoch_time", "in turns, pays the load once (load + n * step)", _epoch_time("""
            if n_steps < 0:
                raise ValueError(n_steps)
            if n_steps == 0:
                return 0.0
            if not overlapped:
                return load_s + n_steps * step_s
            return load_s + step_s + (n_steps - 1) * time_per_step(load_s, step_s, True)
    """), "test_epoch_time_serial"),
    wrong("epoch_time", "overlapped, the first load is not paid (n * max)", _epoch_time("""
            if n_steps < 0:
                raise ValueError(n_steps)
            return n_steps * time_per_step(load_s, step_s, overlapped)
    """), "test_epoch_time_overlapped"),
    wrong("epoch_time", "overlapped, the last step is not paid (load + n * max)", _epoch_time("""
            if n_steps < 0:
                raise ValueError(n_steps)
            if n_steps == 0 or not overlapped:
                return n_steps * time_per_step(load_s, step_s, overlapped)
            return load_s + n_steps * time_per_step(load_s, step_s, True)
    """), "test_epoch_time_overlapped"),
    wrong("epoch_time", "0 steps still pay the first load and the last step", _epoch_time("""
            if n_steps < 0:
                raise ValueError(n_steps)
            if not overlapped:
                return n_steps * time_per_step(load_s, step_s, False)
            return load_s + step_s + max(n_steps - 1, 0) * time_per_step(load_s, step_s, True)
    """), "test_epoch_time_edge_cases"),
    wrong("epoch_time", "a negative number of steps is accepted", _epoch_time("""
            if n_steps <= 0:
                return 0.0
            if not overlapped:
                return n_steps * time_per_step(load_s, step_s, False)
            return load_s + step_s + (n_steps - 1) * time_per_step(load_s, step_s, True)
    """), "test_epoch_time_edge_cases"),
]
