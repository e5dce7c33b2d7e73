"""What grading costs: where one submission's time goes, and a class on 1 and 2 workers.

* ``grading`` (in ``make bench``): for each solution notebook, its execution alone
  (nbclient, a fresh kernel: what a student waits for), split by what the cells are
  (the notebook's demonstrations, the answers, the tests; the kernel's start and stop are
  the rest), against grading it as ``feedgpu-grade`` does (inspection, nbgrader's
  autograde in the sandbox) and making its feedback (one nbgrader run, which a class
  shares). The full submission's grading / execution is the budget's ratio (<= 1.2).
* ``grading_class`` (``--only grading_class``): submissions per minute on a local Dask
  cluster of 1 and of 2 workers, the same class graded from scratch each time.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from datetime import datetime
from pathlib import Path

from . import ROOT, Figure, figure

ROLES = ("demonstrations", "answers", "tests")


def _role(cell) -> str:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    if meta.get("solution"):
        return "answers"
    return "tests" if meta.get("grade") else "demonstrations"


def _seconds(execution: dict) -> float:
    """A cell's own time, from nbclient's timestamps (input received to reply sent)."""
    start = execution.get("iopub.execute_input") or execution.get("iopub.status.busy")
    end = execution.get("shell.execute_reply")
    if not (start and end):
        return 0.0
    return (datetime.fromisoformat(end.replace("Z", "+00:00"))
            - datetime.fromisoformat(start.replace("Z", "+00:00"))).total_seconds()


def execute_by_role(path: Path) -> dict[str, float]:
    """Execute a solution notebook as a student would; seconds in all, and per role."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    took = {"total": time.perf_counter() - start, **{role: 0.0 for role in ROLES}}
    for cell in nb.cells:
        if cell.cell_type == "code":
            took[_role(cell)] += _seconds(cell.metadata.get("execution", {}))
    took["kernel start and stop"] = took["total"] - sum(took[role] for role in ROLES)
    return took


def _class_of(students: int, names: list[str], root: Path) -> Path:
    """``root/submitted/<student>/<assignment>/`` holding the solutions, for ``students`` students."""
    subs = root / "submitted"
    for k in range(students):
        for name in names:
            (subs / f"student{k:03d}" / name).mkdir(parents=True)
            shutil.copy(ROOT / "solutions" / name / f"{name}.ipynb", subs / f"student{k:03d}" / name)
    return subs


def bench_grading(names: tuple[str, ...] | None = None) -> list[Figure]:
    """Each notebook executed, then graded and given feedback; the full submission's ratio."""
    from ..grading import submission
    from ..grading.course_layout import assignments
    from ..grading.sandbox import Limits

    names = list(names or assignments())
    out, executed, graded = [], 0.0, 0.0
    with tempfile.TemporaryDirectory(dir=ROOT / "build") as tmp:
        subs = _class_of(1, names, Path(tmp))
        workdir = Path(tmp) / "grading"
        submission.register_assignments(workdir, names)
        for name in names:
            took = execute_by_role(ROOT / "solutions" / name / f"{name}.ipynb")
            start = time.perf_counter()
            result = submission.grade_one(workdir, subs, "student000", name, Limits(), 120)
            grading = time.perf_counter() - start
            start = time.perf_counter()
            submission.generate_feedback(workdir, [result])
            feedback = time.perf_counter() - start
            executed, graded = executed + took["total"], graded + grading
            parts = ", ".join(f"{role} {took[role]:.1f} s" for role in (*ROLES, "kernel start and stop"))
            out += [figure(f"execute {name}", took["total"], "s", parts),
                    figure(f"grade {name}", grading, "s", f"inspection + autograde in the sandbox; {result.status}"),
                    figure(f"grade/execute {name}", grading / took["total"], "x"),
                    figure(f"feedback {name}", feedback, "s", "one nbgrader run (a class shares one)"),
                    figure(f"peak grading memory {name}", result.peak_memory_mb or 0.0, "MB",
                           "nbgrader, kernel and workers together")]
    out += [figure("execute a full submission", executed, "s", f"{len(names)} notebooks"),
            figure("grade a full submission", graded, "s", "feedback not included"),
            figure("grade/execute, full submission", graded / executed, "x", "budget <= 1.2")]
    return out


def bench_grading_class(students: int = 8, workers: tuple[int, ...] = (1, 2)) -> list[Figure]:
    """Submissions per minute on a local Dask cluster of 1 and of 2 workers: the same class,
    ``students`` x (00, 01) submissions of the solutions, graded from scratch each time."""
    from ..grading import grade

    out, rate = [], {}
    with tempfile.TemporaryDirectory(dir=ROOT / "build") as tmp:
        subs = _class_of(students, ["00_orientation", "01_dataset"], Path(tmp))
        for n in workers:
            start = time.perf_counter()
            results = grade.grade_class(subs, Path(tmp) / f"grading-{n}", progress=True, jobs=n)
            seconds = time.perf_counter() - start
            graded = sum(r.status == "graded" for r in results)
            rate[n] = len(results) / seconds * 60
            out += [figure(f"grade {len(results)} submissions, {n} worker(s)", seconds, "s",
                           f"{graded} graded; registration, cluster start and feedback included"),
                    figure(f"submissions per minute, {n} worker(s)", rate[n], "1/min"),
                    figure(f"peak grading memory, {n} worker(s)", max(r.peak_memory_mb or 0 for r in results), "MB",
                           "of one submission's processes")]
    if len(workers) > 1:
        out.append(figure(f"grading speed-up, {workers[-1]} vs {workers[0]} worker(s)",
                          rate[workers[-1]] / rate[workers[0]], "x", f"on {os.cpu_count()} cores"))
    return out
