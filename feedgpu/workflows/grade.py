"""Grade a class: every ``SUBMISSIONS/<student>/<assignment>/`` with nbgrader.

Usage: ``feedgpu-grade SUBMISSIONS [--workdir grading] [--timeout 900]
[--cell-timeout 120] [--memory-mb 4096] [--max-processes 48]``

In a working folder (default ``grading/``, kept between runs so no grade is ever lost):

1. every assignment of ``solutions/`` is registered in ``gradebook.db`` (the instructor's
   tests, points and checksums), and its release is kept in ``release/``;
2. each submission is copied to ``submitted/<student>/<assignment>/``, inspected (test
   cells renamed, repeated, edited or deleted; code that tries to switch tests off; see
   ``inspection.py``), and autograded by nbgrader alone, in its own process
   session with a time limit, a per-cell time limit, a memory limit and a process limit
   (``sandbox.py``); every process it started is killed afterwards. One broken
   submission never stops the others;
3. HTML feedback goes to ``feedback/<student>/<assignment>/``;
4. ``grades.csv`` gets one row per student and assignment ever graded here: scores, the
   reason of a failure, the notes and flags of the inspection; ``status.json`` keeps the
   same per submission. A summary is printed.

Grading runs the students' code. Run it on a machine (or in a container) you can afford
to lose, without secrets and without network; see the README's instructor guide.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import re
import shutil
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from . import COURSE_ROOT as ROOT
from .inspection import inspect_and_repair
from .release import NBGRADER, SOURCE, assignments, nbgrader_env
from .sandbox import Limits, describe, run_limited

logger = logging.getLogger("grade")

CSV_NAME = "grades.csv"
STATUS_NAME = "status.json"


@dataclass
class Result:
    """The grade of one student's assignment (one row of ``grades.csv``)."""

    student: str
    assignment: str
    status: str  # "graded" or "failed"
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


def _nbgrader_cmd(args: list[str], workdir: Path) -> list[str]:
    return [str(NBGRADER), *args, "--log-level=WARN",
            f"--CourseDirectory.root={workdir}",
            f"--CourseDirectory.source_directory={SOURCE}",
            f"--db=sqlite:///{workdir / 'gradebook.db'}"]


def _env() -> dict[str, str]:
    env = nbgrader_env()
    env.setdefault("MPLBACKEND", "Agg")
    env["PYTHONHASHSEED"] = "0"  # the same submission gets the same score twice
    return env


def register_assignments(workdir: Path, names: list[str]) -> None:
    """Record each assignment's notebooks, cells and points in the gradebook."""
    workdir.mkdir(parents=True, exist_ok=True)
    for name in names:
        out = run_limited(_nbgrader_cmd(["generate_assignment", name, "--force",
                                         f"--CourseDirectory.release_directory={workdir / 'release'}"],
                                        workdir), Limits(wall_s=600), cwd=ROOT, env=_env())
        if out.returncode:
            raise RuntimeError(f"nbgrader could not register {name}:\n{out.stderr[-2000:]}")


def find_submissions(submissions: Path, known: list[str]) -> list[tuple[str, str]]:
    """``(student, assignment)`` for every ``submissions/<student>/<assignment>/``, sorted."""
    pairs = []
    for student in sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for folder in sorted(p for p in student.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if folder.name in known:
                pairs.append((student.name, folder.name))
            else:
                logger.warning("skipping %s: no assignment named %r", folder, folder.name)
    return pairs


#: nbgrader's fatal errors, and what they mean for the student.
KNOWN_FAILURES = {
    "DeadKernelError": "the kernel died while running the notebook (os._exit, a crash, or out of memory)",
    "CellTimeoutError": "a cell ran past the time limit per cell and did not stop when interrupted",
}


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
        error = next((out for out in outputs if out.get("output_type") == "error"), None)
        if error is not None:
            if error.get("ename") in ("KeyboardInterrupt", "CellTimeoutError"):
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


def grade_one(workdir: Path, submissions: Path, student: str, assignment: str,
              limits: Limits, cell_timeout: float) -> Result:
    """Autograde one submission and make its feedback; never raises for the student's faults."""
    notes, flags = _prepare_copy(workdir, submissions, student, assignment)
    cmd = _nbgrader_cmd(["autograde", assignment, f"--student={student}", "--force",
                         "--OverwriteCells.add_missing_cells=True",
                         f"--ExecutePreprocessor.timeout={int(cell_timeout)}"], workdir)
    out = run_limited(cmd, limits, cwd=ROOT, env=_env())
    failed = ""
    if out.killed_for:
        failed = describe(out, limits)
    elif out.returncode:
        failed = _reason(out.stderr + out.stdout)
    if not failed:
        run_limited(_nbgrader_cmd(["generate_feedback", assignment, f"--student={student}", "--force"],
                                  workdir), Limits(wall_s=300), cwd=ROOT, env=_env())
    result = read_scores(workdir, student, assignment) if not failed else \
        Result(student, assignment, "failed", reason=failed)
    result.notes, result.flags = notes, flags
    result.seconds, result.peak_memory_mb = round(out.seconds, 2), round(out.peak_memory_mb, 1)
    for graded in sorted((workdir / "autograded" / student / assignment).glob("*.ipynb")):
        result.notes += cell_errors(graded, cell_timeout)
    return result


def read_scores(workdir: Path, student: str, assignment: str) -> Result:
    """The scores nbgrader recorded for one submission."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{workdir / 'gradebook.db'}") as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return Result(student, assignment, "failed", reason="no grades recorded")
        return Result(student, assignment, "graded", sub.score, sub.max_score,
                      sub.code_score, sub.max_code_score, sub.needs_manual_grade)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def load_status(workdir: Path) -> dict[str, dict]:
    """Every result recorded in ``workdir`` so far, by ``student/assignment``."""
    path = workdir / STATUS_NAME
    return json.loads(path.read_text()) if path.is_file() else {}


def save(workdir: Path, status: dict[str, dict]) -> None:
    """Write ``status.json`` and ``grades.csv`` (every submission ever graded here).

    Scores are read again from the gradebook, so written answers graded by hand in the
    formgrader since appear too.
    """
    rows = []
    for key in sorted(status):
        saved = Result(**status[key])
        if saved.status == "graded":
            fresh = read_scores(workdir, saved.student, saved.assignment)
            for name in ("score", "max_score", "code_score", "max_code_score", "needs_manual_grade"):
                setattr(saved, name, getattr(fresh, name))
        rows.append(saved)
    _write_atomically(workdir / STATUS_NAME, json.dumps(status, indent=1, sort_keys=True))
    names = [f.name for f in fields(Result)]
    with (workdir / (CSV_NAME + ".tmp")).open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=names)
        writer.writeheader()
        for r in rows:
            row = asdict(r)
            row["flags"], row["notes"] = "; ".join(r.flags), "; ".join(r.notes)
            writer.writerow(row)
    (workdir / (CSV_NAME + ".tmp")).replace(workdir / CSV_NAME)


def grade_class(submissions: Path, workdir: Path, limits: Limits = Limits(),
                cell_timeout: float = 120, progress: bool = True) -> list[Result]:
    """Grade every submission under ``submissions``; return this run's results."""
    from tqdm.auto import tqdm

    submissions, workdir = Path(submissions).resolve(), Path(workdir).resolve()
    if not submissions.is_dir():
        raise FileNotFoundError(
            f"no submissions folder {submissions}: expected {submissions}/<student>/<assignment>/")
    workdir.mkdir(parents=True, exist_ok=True)
    pairs = find_submissions(submissions, assignments())
    register_assignments(workdir, sorted({a for _, a in pairs}))
    status = load_status(workdir)
    results = []
    for student, assignment in tqdm(pairs, desc="grading", unit="submission", disable=not progress):
        result = grade_one(workdir, submissions, student, assignment, limits, cell_timeout)
        results.append(result)
        status[f"{student}/{assignment}"] = asdict(result)
        save(workdir, status)  # after each one: an interrupted run keeps what it graded
    if not pairs:
        save(workdir, status)
    return results


def summary(results: list[Result], workdir: Path) -> str:
    """A few lines for the instructor: counts, failures and flags."""
    failed = [r for r in results if r.status != "graded"]
    lines = [f"graded {len(results) - len(failed)} of {len(results)} submissions from "
             f"{len({r.student for r in results})} students "
             f"({len({r.assignment for r in results})} assignments); {len(failed)} failed"]
    lines += [f"  FAILED  {r.student}/{r.assignment}: {r.reason}" for r in failed]
    lines += [f"  FLAGGED {r.student}/{r.assignment}: {'; '.join(r.flags)}" for r in results if r.flags]
    lines.append(f"grades: {workdir / CSV_NAME}; feedback: {workdir / 'feedback'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    defaults = Limits()
    parser = argparse.ArgumentParser(description="Grade every SUBMISSIONS/<student>/<assignment>/.")
    parser.add_argument("submissions", type=Path)
    parser.add_argument("--workdir", type=Path, default=ROOT / "grading",
                        help="gradebook, copies, feedback and grades.csv (default grading/)")
    parser.add_argument("--timeout", type=float, default=defaults.wall_s, help="seconds per submission")
    parser.add_argument("--cell-timeout", type=float, default=120, help="seconds per cell")
    parser.add_argument("--memory-mb", type=float, default=defaults.memory_mb,
                        help="memory of the grading processes together, in MB")
    parser.add_argument("--max-processes", type=int, default=defaults.max_processes)
    parser.add_argument("--report-only", action="store_true",
                        help="grade nothing: rewrite grades.csv from the gradebook (after hand grading)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="grade: %(message)s")
    if args.report_only:
        save(args.workdir.resolve(), load_status(args.workdir.resolve()))
        print(f"grades: {args.workdir.resolve() / CSV_NAME}")
        return 0
    limits = Limits(wall_s=args.timeout, memory_mb=args.memory_mb, max_processes=args.max_processes)
    try:
        results = grade_class(args.submissions, args.workdir, limits, args.cell_timeout)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(summary(results, args.workdir.resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
