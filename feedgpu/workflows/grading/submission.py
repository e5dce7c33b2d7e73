"""Grade one submission: inspect it, autograde it with nbgrader in a sandbox, read its scores.

:func:`grade_one` grades ``SUBMISSIONS/<student>/<assignment>/`` in a working folder whose
gradebook holds the assignment (:func:`register_assignments`): it inspects the notebook
(:mod:`.inspection`: test cells repaired, tampering flagged), runs nbgrader's autograde
alone in its own process session with the limits of :mod:`.sandbox`, and reads the
scores nbgrader recorded; a submission that could not be graded scores 0 beside its
reason, and the function never raises for the student's faults. The class on a cluster
(:mod:`.cluster`) and the command (:mod:`.grade`) are built on it, and so is a student's
check of their own notebook (:mod:`feedgpu.workflows.course.check`).
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import COURSE_ROOT as ROOT
from .course_layout import NBGRADER, SOURCE, nbgrader_env
from .inspection import inspect_and_repair
from .sandbox import Limits, describe, run_limited

logger = logging.getLogger("grade")


@dataclass
class Result:
    """The grade of one student's assignment (one row of ``grades.csv``)."""

    student: str
    assignment: str
    status: str  # "graded" or "failed" (a failed submission scores 0 of the assignment's points)
    score: float | None = None  # all points so far (written answers count 0 until graded)
    max_score: float | None = None
    code_score: float | None = None  # points of the autograded test cells
    max_code_score: float | None = None
    needs_manual_grade: bool | None = None
    reason: str = ""  # why grading failed
    flags: list[str] = field(default_factory=list)  # suspected tampering: look at these
    notes: list[str] = field(default_factory=list)  # repaired cells, cells that failed
    seconds: float | None = None
    peak_memory_mb: float | None = None
    worker: str = ""  # the host that graded it
    fingerprint: str = ""  # of what was graded (files, assignment, limits); "" when it must be graded again


def _nbgrader_cmd(args: list[str], workdir: Path, source: Path = SOURCE) -> list[str]:
    return [str(NBGRADER), *args, "--log-level=WARN",
            f"--CourseDirectory.root={workdir}",
            f"--CourseDirectory.source_directory={Path(source).resolve()}",
            f"--db=sqlite:///{workdir / 'gradebook.db'}"]


def _env() -> dict[str, str]:
    env = nbgrader_env()
    env.setdefault("MPLBACKEND", "Agg")
    env["PYTHONHASHSEED"] = "0"  # the same submission gets the same score twice
    return env


def register_assignments(workdir: Path, names: list[str], source: Path = SOURCE, pattern: str = "*") -> None:
    """Record the assignments' notebooks, cells and points in the gradebook.

    One nbgrader run registers every assignment of ``source`` that ``pattern`` matches (an
    assignment id, or ``*`` for all); only a failure on one of ``names`` is an error, so an
    assignment that is being written cannot stop the grading of the others.

    Raises:
        RuntimeError: nbgrader could not register one of ``names``.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    if not names:
        return
    released = workdir / "release"
    for name in names:  # what is left from an earlier run must not pass for this one
        shutil.rmtree(released / name, ignore_errors=True)
    out = run_limited(_nbgrader_cmd(["generate_assignment", pattern, "--force",
                                     f"--CourseDirectory.release_directory={released}"],
                                    workdir, source), Limits(wall_s=600), cwd=ROOT, env=_env())
    missing = [name for name in names if not any((released / name).glob("*.ipynb"))]
    if missing:
        raise RuntimeError(f"nbgrader could not register {', '.join(missing)} from {source}:\n"
                           f"{(out.stderr + out.stdout)[-2000:]}")


#: nbgrader's fatal errors, and what they mean for the student.
KNOWN_FAILURES = {
    "DeadKernelError": "the kernel died while running the notebook (os._exit, a crash, or out of memory)",
    "CellTimeoutError": "a cell ran past the time limit per cell and did not stop when interrupted",
}


#: What jupyter_client says (``client.py``, ``wait_for_ready``) when the kernel process ended
#: before it answered its first request, the kernel_info request nbclient sends first:
#: before any cell of the notebook ran, so never the student's doing. Seen once on a fresh
#: clone, two submissions graded at once; a likely cause: jupyter_client picks a kernel's
#: ports by binding port 0 and closing it, and keeps them from its other kernels only
#: within one process (``jupyter_client/connect.py``, ``LocalPortCache``, its issue 487),
#: so two gradings side by side can hand two kernels the same port.
KERNEL_NEVER_STARTED = "Kernel died before replying to kernel_info"
#: How many times a submission whose kernel never started is graded again.
KERNEL_START_RETRIES = 1


def kernel_never_started(text: str) -> bool:
    """Whether nbgrader's output says the kernel ended before it ran anything."""
    return KERNEL_NEVER_STARTED in text


def _reason(text: str) -> str:
    """The most telling line of nbgrader's output for a failed submission."""
    for name, meaning in KNOWN_FAILURES.items():
        if name in text:
            return meaning
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    exceptions = [l for l in lines if re.match(r"^[\w.]+(Error|Exception|Exit)\b", l)]
    return (exceptions or [l for l in lines if "error" in l.lower()] or lines
            or ["nbgrader failed without a message"])[-1][:300]


def cell_errors(notebook: Path, cell_timeout: float) -> list[str]:
    """One note per cell of the autograded ``notebook`` that ended in an error, and per
    test cell that lost its points only by writing to stderr (nbgrader scores any test
    cell with stderr output zero, so a warning costs the points of a passing test)."""
    import nbformat

    notes = []
    for i, cell in enumerate(nbformat.read(notebook, as_version=4).cells):
        where = cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {i}"
        outputs = cell.get("outputs", [])
        errors = [out for out in outputs if out.get("output_type") == "error"]
        error = next(iter(errors), None)
        if error is not None:
            timeout = next((out for out in errors if out.get("ename") == "CellTimeoutError"), None)
            if timeout is not None and timeout.get("evalue"):  # execution.py says which limit
                notes.append(f"{where}: {timeout['evalue']}")
            elif error.get("ename") in ("KeyboardInterrupt", "CellTimeoutError"):
                notes.append(f"{where} ran past the {cell_timeout:.0f} s limit per cell")
            elif not where.startswith("test_"):  # failed tests are in the feedback already
                notes.append(f"{where} raised {error.get('ename')}")
            continue
        stderr = [out for out in outputs if out.get("output_type") == "stream" and out.get("name") == "stderr"]
        if stderr and cell.metadata.get("nbgrader", {}).get("grade"):
            first = next((line.strip() for out in stderr for line in out.get("text", "").splitlines()
                          if line.strip()), "")
            notes.append(f"{where} passed but scored 0 because it wrote to stderr: {first[:160]}")
    return notes


def _prepare_copy(workdir: Path, submissions: Path, student: str, assignment: str) -> tuple[list, list]:
    """Copy the submission into the course folder and inspect its notebooks."""
    dst = workdir / "submitted" / student / assignment
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(submissions / student / assignment, dst, symlinks=False,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    notes, flags = [], []
    for released in sorted((workdir / "release" / assignment).glob("*.ipynb")):
        mine = dst / released.name
        if not mine.is_file():
            notes.append(f"{released.name} is missing from the submission")
            continue
        found = inspect_and_repair(mine, released)
        notes += found.notes
        flags += found.flags
    return notes, flags


def _unreadable(folder: Path) -> str:
    """Why a notebook of ``folder`` cannot be graded at all (not JSON, not a notebook), or ''."""
    import nbformat

    for path in sorted(folder.glob("*.ipynb")):
        try:
            nbformat.read(path, as_version=4)
        except Exception as err:  # noqa: BLE001 (any unreadable file is the student's problem)
            return f"{path.name} is not a readable notebook ({type(err).__name__}): nothing could be graded"
    return ""


def assignment_maxima(gb, assignment: str) -> tuple[float | None, float | None]:
    """``(max_score, max_code_score)`` of ``assignment`` in the open gradebook ``gb``
    (``(None, None)`` for an assignment it does not know)."""
    from nbgrader.api import MissingEntry

    try:
        found = gb.find_assignment(assignment)
    except MissingEntry:
        return None, None
    return float(found.max_score), float(found.max_code_score)


def failed_result(student: str, assignment: str, reason: str, maxima: tuple[float | None, float | None]) -> Result:
    """A submission that could not be graded: 0 points and ``reason``, out of ``maxima``
    (:func:`assignment_maxima`)."""
    return Result(student, assignment, "failed", score=0.0, max_score=maxima[0], code_score=0.0,
                  max_code_score=maxima[1], needs_manual_grade=False, reason=reason)


def failed(workdir: Path, student: str, assignment: str, reason: str) -> Result:
    """The result of a submission that could not be graded: 0 points beside the reason.

    nbgrader records no grade for an autograde that stopped (a dead kernel, a limit, an
    unreadable notebook), so none of its tests counts; the maximum is the assignment's, so
    a grades CSV has no empty score.
    """
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{workdir / 'gradebook.db'}") as gb:
        return failed_result(student, assignment, reason, assignment_maxima(gb, assignment))


def grade_one(workdir: Path, submissions: Path, student: str, assignment: str,
              limits: Limits, cell_timeout: float, source: Path = SOURCE) -> Result:
    """Autograde one submission; never raises for the student's faults.

    Its feedback is made later, with everyone's (:func:`generate_feedback`); the feedback
    of an earlier grading of it is removed now, so none is left that this grade contradicts.
    """
    notes, flags = _prepare_copy(workdir, submissions, student, assignment)
    shutil.rmtree(workdir / "feedback" / student / assignment, ignore_errors=True)
    unreadable = _unreadable(workdir / "submitted" / student / assignment)
    if unreadable:  # nbgrader would stop on it too, after seconds of starting up
        shutil.rmtree(workdir / "autograded" / student / assignment, ignore_errors=True)
        result = failed(workdir, student, assignment, unreadable)
        result.notes, result.flags = notes, flags
        return result
    # The kernel is killed after the last cell, not asked to exit: a graceful exit runs the
    # notebook's own clean-up (its loaders' workers, servers, atexit) for nothing, seconds a
    # notebook. What it would have removed is in a temporary folder of this grading's own,
    # removed here however the run ended (a limit kills the kernel too); the sandbox kills
    # the processes the kernel's end left behind.
    cmd = _nbgrader_cmd(["autograde", assignment, f"--student={student}", "--force",
                         "--OverwriteCells.add_missing_cells=True",
                         f"--ExecutePreprocessor.timeout={int(cell_timeout)}",
                         "--ExecutePreprocessor.shutdown_kernel=immediate"], workdir, source)
    # (a short name: multiprocessing puts its Unix sockets under it, 104 characters at most on macOS)
    for attempt in range(1 + KERNEL_START_RETRIES):
        with tempfile.TemporaryDirectory(prefix="fg-", ignore_cleanup_errors=True) as tmp:
            out = run_limited(cmd, limits, cwd=ROOT, env={**_env(), "TMPDIR": tmp})
        if out.killed_for or not out.returncode or not kernel_never_started(out.stderr + out.stdout):
            break
        if attempt < KERNEL_START_RETRIES:
            notes = notes + [f"the kernel died before it started ({KERNEL_NEVER_STARTED}): graded again"]
    why = ""
    if out.killed_for:
        why = describe(out, limits)
    elif out.returncode:
        why = _reason(out.stderr + out.stdout)
    result = failed(workdir, student, assignment, why) if why else read_scores(workdir, student, assignment)
    result.notes, result.flags = notes, flags
    result.seconds, result.peak_memory_mb = round(out.seconds, 2), round(out.peak_memory_mb, 1)
    autograded = workdir / "autograded" / student / assignment
    for graded in sorted(autograded.glob("*.ipynb")):
        result.notes += cell_errors(graded, cell_timeout)
    if why:  # a half-written notebook of a stopped run gets no feedback
        shutil.rmtree(autograded, ignore_errors=True)
    return result


def generate_feedback(workdir: Path, results: list[Result], source: Path = SOURCE) -> None:
    """Write the HTML feedback of every graded submission in ``results``, in one nbgrader run.

    nbgrader skips a submission whose feedback exists, and :func:`grade_one` removed the
    feedback of each submission it graded, so the run converts exactly the new ones (and
    any that an interrupted run left without). A graded submission that still has no
    feedback afterwards gets a note that says why.
    """
    graded = [r for r in results if r.status == "graded"]
    if not graded:
        return
    out = run_limited(_nbgrader_cmd(["generate_feedback", "*"], workdir, source),
                      Limits(wall_s=300 + 10 * len(graded)), cwd=ROOT, env=_env())
    for r in graded:
        missing = [nb.name for nb in sorted((workdir / "autograded" / r.student / r.assignment).glob("*.ipynb"))
                   if not (workdir / "feedback" / r.student / r.assignment / f"{nb.stem}.html").is_file()]
        if missing:
            why = describe(out, Limits(wall_s=300 + 10 * len(graded))) or _reason(out.stderr + out.stdout)
            r.notes.append(f"no feedback was written for {', '.join(missing)}: {why}")


def read_scores(workdir: Path, student: str, assignment: str) -> Result:
    """The scores nbgrader recorded for one submission."""
    return read_all_scores(workdir, [(student, assignment)])[0]


def read_all_scores(workdir: Path, pairs: list[tuple[str, str]]) -> list[Result]:
    """The scores nbgrader recorded for each ``(student, assignment)``, read in one session."""
    from nbgrader.api import Gradebook, MissingEntry

    results = []
    with Gradebook(f"sqlite:///{workdir / 'gradebook.db'}") as gb:
        for student, assignment in pairs:
            try:
                sub = gb.find_submission(assignment, student)
            except MissingEntry:
                results.append(failed_result(student, assignment, "no grades recorded",
                                             assignment_maxima(gb, assignment)))
                continue
            results.append(Result(student, assignment, "graded", sub.score, sub.max_score,
                                  sub.code_score, sub.max_code_score, sub.needs_manual_grade))
    return results
