"""``feedgpu-diagnose run`` from the tests, run as a user would run it, its advice included.

A run whose script's loop took too few batches in its budget is refused (exit 2), with
the budget that would do: "... run with --max-seconds 34". A user runs it again with
that budget, and so do the tests, once: on CI a 4 s budget once timed 1 batch of the
reference-style script (its first step had not ended 3.8 s after its loop began, in a run
where everything took a quarter longer than here), and that refusal was the diagnosis
doing what it should. The advised run must then succeed like any other.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIAGNOSE = Path(sys.executable).parent / "feedgpu-diagnose"

#: The last line of a run refused for want of timed batches, and the budget it advises.
ADVICE = re.compile(r"before a loop over a DataLoader took enough batches to time .*"
                    r"; run with --max-seconds (\d+(?:\.\d+)?)$")


def advised_budget(stderr: str) -> str | None:
    """The budget a refused run advises, from its last line of stderr; None if it gave none."""
    lines = stderr.strip().splitlines()
    found = ADVICE.search(lines[-1]) if lines else None
    return found.group(1) if found else None


def diagnose_run(budget: str, options: list[str], out: Path, command: list[str],
                 timeout: float = 240) -> subprocess.CompletedProcess:
    """``feedgpu-diagnose run --max-seconds BUDGET OPTIONS --json OUT -- COMMAND`` from the
    repository's root; once more with the advised budget where the first is refused."""
    def run(seconds: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(DIAGNOSE), "run", "--max-seconds", seconds, *options, "--json", str(out), "--",
                               *command], cwd=ROOT, capture_output=True, text=True, timeout=timeout)

    done = run(budget)
    again = advised_budget(done.stderr) if done.returncode == 2 else None
    return done if again is None else run(again)
