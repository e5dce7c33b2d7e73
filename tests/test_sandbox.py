"""The grader's sandbox: time, memory and process limits, and no process left behind.

No test bounds a wall-clock time: each checks which limit fired (``killed_for``); the time
limit is checked by what it stops (an endless loop, not before its limit) and by what it
leaves alone (a sleep of known length inside it).
"""

from __future__ import annotations

import sys

import psutil

from feedgpu.workflows.grading.sandbox import Limits, describe, processes_in, run_limited

PY = sys.executable


def test_normal_command_returns_its_output():
    o = run_limited([PY, "-c", "print('hello'); import sys; sys.exit(3)"], Limits(wall_s=60))
    assert o.returncode == 3 and o.stdout.strip() == "hello" and o.killed_for is None, o


def test_infinite_loop_is_stopped_by_the_time_limit():
    o = run_limited([PY, "-c", "while True: pass"], Limits(wall_s=2))
    assert o.killed_for == "time" and o.returncode is not None, o
    assert o.seconds >= 2, f"not stopped before its limit: {o.seconds:.2f} s"
    assert "time limit" in describe(o, Limits(wall_s=2)), describe(o, Limits(wall_s=2))


def test_a_command_within_its_time_limit_is_left_alone():
    """A sleep of known length, well inside the limit, ends by itself."""
    o = run_limited([PY, "-c", "import time; time.sleep(1.0); print('done')"], Limits(wall_s=60))
    assert o.killed_for is None and o.returncode == 0 and o.stdout.strip() == "done", o
    assert o.seconds >= 1.0, f"the sleep of 1 s was cut short: {o.seconds:.2f} s"


def test_loop_that_swallows_interrupts_is_still_stopped():
    code = ("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.01)")
    o = run_limited([PY, "-c", code], Limits(wall_s=2))
    assert o.killed_for == "time" and o.returncode is not None, o


def test_memory_bomb_is_stopped():
    code = "x = []\nwhile True:\n    x.append(bytearray(50 * 2**20))"
    o = run_limited([PY, "-c", code], Limits(wall_s=60, memory_mb=400))
    assert o.killed_for == "memory", o
    assert o.peak_memory_mb > 400, o.peak_memory_mb
    assert "memory limit 400 MB" in describe(o, Limits(memory_mb=400)), describe(o, Limits(memory_mb=400))


def test_fork_bomb_is_stopped_and_cleaned_up():
    code = ("import subprocess, sys, time\nps = [subprocess.Popen(['sleep', '300']) for _ in range(30)]\n"
            "time.sleep(300)")
    o = run_limited([PY, "-c", code], Limits(wall_s=60, max_processes=10))
    assert o.killed_for == "processes", o
    assert o.peak_processes > 10, o.peak_processes
    assert processes_in(o.sessions) == [], "every child is gone"


def test_orphans_and_new_sessions_are_killed_at_the_end():
    # durations no other process on the machine sleeps for: the check below looks at every process
    escaped, orphan = "300.0417", "301.0417"
    code = ("import subprocess, time\n"
            f"subprocess.Popen(['sleep', '{escaped}'], start_new_session=True)\n"  # escapes the session
            f"subprocess.Popen(['sh', '-c', 'sleep {orphan} &'])\n"  # an orphan, re-parented to init
            "time.sleep(3)")  # the watchdog must see the children while their parent lives (busy CI)
    o = run_limited([PY, "-c", code], Limits(wall_s=60))
    assert o.returncode == 0 and o.killed_for is None, o
    assert o.leftovers_killed >= 2, o.leftovers_killed
    alive = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
             if p.info["cmdline"] and p.info["cmdline"][:2] in (["sleep", escaped], ["sleep", orphan])]
    assert alive == [], alive


# A grading whose own process dies: the watchdog runs inside it (a Dask worker), so it
# cannot stop what it started. The command it ran dies with it (Linux's parent-death
# signal); a process of another session that the command started survives, listed in
# the registry, until reap_orphans() stops it.
DIES_WITH_ITS_COMMAND = """
import subprocess, sys, time
from feedgpu.workflows.grading.sandbox import Limits, run_limited
run_limited(["sh", "-c", "setsid sleep 300 & echo $! > " + sys.argv[1] + "; sleep 300"], Limits(wall_s=600))
"""


def test_what_a_dead_watchdog_started_is_reaped(tmp_path):
    import os
    import signal
    import subprocess
    import time

    from feedgpu.workflows.grading.sandbox import reap_orphans

    pid_file = tmp_path / "orphan.pid"
    owner = subprocess.Popen([PY, "-c", DIES_WITH_ITS_COMMAND, str(pid_file)])
    deadline = time.monotonic() + 60
    while not (pid_file.is_file() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    orphan = psutil.Process(int(pid_file.read_text()))
    shell = [p for p in psutil.Process(owner.pid).children() if p.name() == "sh"]
    assert shell, "the command runs under the watchdog's process"
    time.sleep(1.5)  # the watchdog has recorded the orphan's session by now (it polls every 0.1 s)
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    psutil.wait_procs(shell, timeout=10)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in shell), \
        "the command dies with the process that watched it"
    assert orphan.is_running() and os.getsid(orphan.pid) == orphan.pid, \
        "the sleep in a session of its own outlives the watchdog until it is reaped"
    assert reap_orphans() >= 1
    psutil.wait_procs([orphan], timeout=10)
    assert not orphan.is_running() or orphan.status() == psutil.STATUS_ZOMBIE, "reaped"
    assert reap_orphans() == 0, "nothing is reaped twice"
