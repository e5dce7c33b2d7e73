"""Notebook 05 (pinned memory and the GPU): wrong answers and delegations (see ``__init__.py``)."""

from wrong_answers import wrong

DELEGATIONS = {
    "transfer_time_s": """
        def transfer_time_s(nbytes, latency_s, bytes_per_s):
            return LinearCost(latency_s, bytes_per_s).time_s(nbytes)
    """,
    "fit_transfer": """
        from feedgpu.models.copies import fit_linear_cost


        def fit_transfer(nbytes, seconds):
            cost = fit_linear_cost(nbytes, seconds).cost
            return cost.latency_s, cost.bytes_per_s
    """,
    # The simulated device, imported by the notebook's first cell, replayed step by step.
    "strategy_time_s": """
        def strategy_time_s(strategy, n_tensors, tensor_bytes, costs):
            device = SimDevice(costs)
            if strategy not in ("pageable", "pageable_nb", "pin_then_copy", "pin_then_copy_nb"):
                raise KeyError(strategy)
            for _ in range(n_tensors):
                if strategy.startswith("pin_then_copy"):
                    device.pin(tensor_bytes)
                device.copy(tensor_bytes, pinned=strategy.startswith("pin"), non_blocking=strategy.endswith("_nb"))
            if strategy.endswith("_nb"):
                device.synchronize()
            return device.host_s
    """,
    # One call of the simulated training loop, with a copy of exactly copy_s and no waits.
    "loop_time_s": """
        def loop_time_s(n_batches, copy_s, compute_s, overlapped):
            costs = CopyCosts(pinned=LinearCost(copy_s, 1e30), sync_s=0.0)
            return simulate_training(n_batches, 0, compute_s, costs, pinned=True,
                                     non_blocking=overlapped, prefetch=overlapped).total_s
    """,
}


def _transfer_time_s(checks: str, result: str) -> str:
    return f"""
        def transfer_time_s(nbytes, latency_s, bytes_per_s):
            if {checks}:
                raise ValueError("bad input")
            return {result}
    """


_ALL_CHECKS = "nbytes < 0 or latency_s < 0 or not bytes_per_s > 0"


def _fit_transfer(body: str) -> str:
    return """
        def fit_transfer(nbytes, seconds):
            x = np.asarray(nbytes, dtype=float)
            y = np.asarray(seconds, dtype=float)
    """ + body


def _strategy_time_s(pin_then_copy_nb: str, unknown: str = "raise KeyError(strategy)",
                     pageable_nb: str = "n * costs.copy_s(tensor_bytes, pinned=False) + s") -> str:
    return f"""
        def strategy_time_s(strategy, n_tensors, tensor_bytes, costs):
            n, s = n_tensors, costs.sync_s
            p = costs.pin_s(tensor_bytes)
            c = costs.copy_s(tensor_bytes, pinned=True)
            if strategy == "pageable":
                return n * (costs.copy_s(tensor_bytes, pinned=False) + s)
            if strategy == "pageable_nb":
                return {pageable_nb}
            if strategy == "pin_then_copy":
                return n * (p + c + s)
            if strategy == "pin_then_copy_nb":
                return {pin_then_copy_nb}
            {unknown}
    """


_PIPELINE = "p + c + (n - 1) * max(p, c) + s"


def _loop_time_s(overlapped: str, check: str = "n_batches < 1") -> str:
    return f"""
        def loop_time_s(n_batches, copy_s, compute_s, overlapped):
            if {check}:
                raise ValueError(n_batches)
            if not overlapped:
                return n_batches * (copy_s + compute_s)
            return {overlapped}
    """


def _time_copy(body: str) -> str:
    return """
        def time_copy(copy, synchronize, clock=time.perf_counter):
    """ + body


WRONG_ANSWERS = [
    # transfer_time_s
    wrong("transfer_time_s", "multiplies by the bandwidth",
          _transfer_time_s(_ALL_CHECKS, "latency_s + nbytes * bytes_per_s"), "test_transfer_time_values"),
    wrong("transfer_time_s", "leaves out the latency",
          _transfer_time_s(_ALL_CHECKS, "nbytes / bytes_per_s"), "test_transfer_time_values"),
    wrong("transfer_time_s", "lets a zero bandwidth through (ZeroDivisionError)",
          _transfer_time_s("nbytes < 0 or latency_s < 0 or bytes_per_s < 0", "latency_s + nbytes / bytes_per_s"),
          "test_transfer_time_rejects_bad_input"),
    wrong("transfer_time_s", "accepts a negative latency",
          _transfer_time_s("nbytes < 0 or not bytes_per_s > 0", "latency_s + nbytes / bytes_per_s"),
          "test_transfer_time_rejects_bad_input"),
    # fit_transfer
    wrong("fit_transfer", "returns seconds per byte, not bytes per second", _fit_transfer("""
            per_byte, latency_s = np.polyfit(x, y, 1, w=1 / y)
            return max(float(latency_s), 0.0), float(per_byte)
    """), "test_fit_transfer_exact", "test_fit_transfer_noisy"),
    wrong("fit_transfer", "takes polyfit's coefficients in the wrong order", _fit_transfer("""
            latency_s, per_byte = np.polyfit(x, y, 1, w=1 / y)
            return max(float(latency_s), 0.0), 1.0 / float(per_byte)
    """), "test_fit_transfer_exact", "test_fit_transfer_noisy"),
    wrong("fit_transfer", "ordinary least squares (no weights): the large copies decide the latency", _fit_transfer("""
            per_byte, latency_s = np.polyfit(x, y, 1)
            return max(float(latency_s), 0.0), 1.0 / float(per_byte)
    """), "test_fit_transfer_noisy"),
    wrong("fit_transfer", "weights 1 / seconds**2: the smallest copies decide the line", _fit_transfer("""
            per_byte, latency_s = np.polyfit(x, y, 1, w=1 / y**2)
            return max(float(latency_s), 0.0), 1.0 / float(per_byte)
    """), "test_fit_transfer_noisy"),
    wrong("fit_transfer", "a line through the first and last points only", _fit_transfer("""
            per_byte = (y[-1] - y[0]) / (x[-1] - x[0])
            latency_s = y[0] - per_byte * x[0]
            return max(float(latency_s), 0.0), 1.0 / float(per_byte)
    """), "test_fit_transfer_noisy"),
    wrong("fit_transfer", "returns a negative intercept as the latency", _fit_transfer("""
            per_byte, latency_s = np.polyfit(x, y, 1, w=1 / y)
            return float(latency_s), 1.0 / float(per_byte)
    """), "test_fit_transfer_noisy"),
    # strategy_time_s
    wrong("strategy_time_s", "pin_then_copy_nb without the pipeline: n (p + c) + s",
          _strategy_time_s("n * (p + c) + s"), "test_strategy_time_matches_the_device"),
    wrong("strategy_time_s", "the pipeline paced by the pinning alone, even when the copy is slower",
          _strategy_time_s("p + c + (n - 1) * p + s"), "test_strategy_time_matches_the_device"),
    wrong("strategy_time_s", "pin_then_copy_nb leaves out the final synchronize",
          _strategy_time_s("p + c + (n - 1) * max(p, c)"), "test_strategy_time_matches_the_device"),
    wrong("strategy_time_s", "pageable_nb taken as truly asynchronous: one copy's time",
          _strategy_time_s(_PIPELINE, pageable_nb="costs.copy_s(tensor_bytes, pinned=False) + s"),
          "test_strategy_time_matches_the_device"),
    wrong("strategy_time_s", "an unknown strategy raises ValueError, not KeyError",
          _strategy_time_s(_PIPELINE, unknown="raise ValueError(strategy)"), "test_strategy_time_rejects_unknown"),
    wrong("strategy_time_s", "an unknown strategy returns None",
          _strategy_time_s(_PIPELINE, unknown="return None"), "test_strategy_time_rejects_unknown"),
    # loop_time_s
    wrong("loop_time_s", "overlapped, the first copy is not paid (n max)",
          _loop_time_s("n_batches * max(copy_s, compute_s)"), "test_loop_time_matches_the_device"),
    wrong("loop_time_s", "overlapped, always adds the copy instead of the shorter of the two",
          _loop_time_s("n_batches * max(copy_s, compute_s) + copy_s"), "test_loop_time_matches_the_device"),
    wrong("loop_time_s", "overlapped, pays the longer of the two twice over (n + 1) max",
          _loop_time_s("(n_batches + 1) * max(copy_s, compute_s)"), "test_loop_time_matches_the_device"),
    wrong("loop_time_s", "0 batches accepted",
          _loop_time_s("n_batches * max(copy_s, compute_s) + min(copy_s, compute_s)", check="n_batches < 0"),
          "test_loop_time_matches_the_device"),
    # time_copy
    wrong("time_copy", "reads the clock right after the copy returns (no synchronisation)", _time_copy("""
            start = clock()
            copy()
            return clock() - start
    """), "test_time_copy_waits_for_the_device", "test_time_copy_leaves_out_earlier_work"),
    wrong("time_copy", "synchronises before the clock starts but not before it is read", _time_copy("""
            synchronize()
            start = clock()
            copy()
            return clock() - start
    """), "test_time_copy_waits_for_the_device", "test_time_copy_leaves_out_earlier_work"),
    wrong("time_copy", "starts the clock with earlier work still queued on the device", _time_copy("""
            start = clock()
            copy()
            synchronize()
            return clock() - start
    """), "test_time_copy_leaves_out_earlier_work"),
    wrong("time_copy", "reads time.perf_counter, not the clock it is given", _time_copy("""
            synchronize()
            start = time.perf_counter()
            copy()
            synchronize()
            return time.perf_counter() - start
    """), "test_time_copy_waits_for_the_device", "test_time_copy_leaves_out_earlier_work"),
]
