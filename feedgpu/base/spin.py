"""The spin loop: CPU work of a known length, counted on the calling thread's own clock.

The course's workloads of known cost (:class:`feedgpu.workloads.SpinDataset`) and the
diagnosis's replayed step (:class:`feedgpu.diagnosis.sensing.steps.ReplayedStep`) both
burn CPU time this way.
"""

from __future__ import annotations

import time

from .checks import check_seconds

__all__ = ["spin_cpu"]


def spin_cpu(seconds: float) -> None:
    """Keep the calling thread busy until it has used ``seconds`` of CPU time.

    The cost is counted in CPU time of this thread (``time.thread_time``), not wall-clock
    time, so it is a fixed amount of *work*: when more threads or processes than cores
    compete, each spin takes longer on the wall clock, as real decoding would.

    Args:
        seconds: CPU seconds to burn; 0 returns at once.

    Raises:
        ValueError: if ``seconds`` is negative, nan or infinite.
        TypeError: if ``seconds`` is not a number.

    Note:
        On Windows the thread clock ticks about every 15.6 ms, so spins shorter than
        that are rounded up to a tick there.
    """
    deadline = time.thread_time() + check_seconds("seconds", seconds)
    x = 0
    while time.thread_time() < deadline:
        for _ in range(200):  # a little arithmetic between clock reads
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
