"""Check your own notebook with the instructor's tests, hidden ones included.

Usage: ``make check NB=03`` or ``feedgpu-check 03`` (any unique prefix of a notebook's
folder under ``work/``, the student's working copy, or its whole name; every notebook when
none is given; ``--notebooks`` names another folder).

A self-learner has no instructor to run ``make grade``. This runs the same pipeline on
one learner's working notebook: a copy of it is inspected and autograded by nbgrader in
a sandbox with the same limits (:func:`feedgpu.workflows.grading.submission.grade_one`), against the
tests of ``solutions/`` (the hidden ones too), in a scratch gradebook that is thrown
away. It then prints, per task (each answer and the tests after it), the points earned
and possible and the first message of each failing test; the total; and what the
inspection noted or flagged. The HTML feedback is kept in ``build/check/``.

Nothing under ``work/`` is written: the notebook is read once and its bytes are
graded from a copy (a notebook saved from JupyterLab meanwhile gets a note saying which
version the points are of). Every process the grading started is stopped with it.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import COURSE_ROOT as ROOT
from ...base.cli import OneLineParser, UsageError, run_command
from ...base.files import replacing_folder, write_atomically
from ..grading.course_layout import SOURCE, assignments
from ..grading.sandbox import Limits
from ..grading.submission import Result, generate_feedback, grade_one, register_assignments
from .release import RELEASE
from .workcopy import WORK

__all__ = ["CheckError", "Task", "Check", "find_notebook", "check_notebook", "format_check", "main"]

STUDENT = "self"
FEEDBACK_DIR = ROOT / "build" / "check"


class CheckError(Exception):
    """A notebook that cannot be checked; the message is one line that says how to fix it."""


@dataclass
class Task:
    """One answer of the notebook and the tests that grade it (or a written answer)."""

    name: str
    score: float
    max_score: float
    failing: list[str] = field(default_factory=list)  # "test_id: first line of its error"
    by_hand: bool = False  # graded by a person: 0 until then


@dataclass
class Check:
    """What checking one notebook found."""

    assignment: str
    notebook: Path
    result: Result
    tasks: list[Task]
    feedback: Path | None
    seconds: float


def _folders(notebooks: Path) -> list[str]:
    if not notebooks.is_dir():
        raise CheckError(f"no folder {notebooks}: run `make release` (or clone the course again)")
    return sorted(p.name for p in notebooks.iterdir() if p.is_dir() and not p.name.startswith("."))


def find_notebook(name: str, notebooks: Path = RELEASE) -> tuple[str, Path]:
    """``(assignment, path)`` of the notebook folder under ``notebooks`` that ``name`` names:
    its whole name or a unique prefix (``"03"``, ``"03_prefetch"``).

    Raises:
        CheckError: no folder or several match, the notebook is missing, or it is not a
            valid notebook (JSON).
    """
    import nbformat

    folders = _folders(notebooks)
    name = name.strip().rstrip("/").split("/")[-1]
    if name.endswith(".ipynb"):
        name = name[:-len(".ipynb")]
    matches = [f for f in folders if f == name] or [f for f in folders if f.startswith(name)]
    if not name or not matches:
        raise CheckError(f"no notebook matches {name!r}: use one of {', '.join(folders)} (or a prefix, e.g. NB=03)")
    if len(matches) > 1:
        raise CheckError(f"{name!r} matches {len(matches)} notebooks ({', '.join(matches)}): give more of the name")
    assignment = matches[0]
    path = notebooks / assignment / f"{assignment}.ipynb"
    if not path.is_file():
        raise CheckError(f"{path} is missing: restore it with `git checkout -- {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}`")
    try:
        nbformat.read(path, as_version=4)
    except Exception as err:  # noqa: BLE001 (any unreadable file: say so in one line)
        raise CheckError(f"{path} is not a valid notebook ({type(err).__name__}): open it in JupyterLab and save it "
                         "again, or start over from `git checkout -- <that path>`") from None
    return assignment, path


def _first_line(error: dict) -> str:
    value = (error.get("evalue") or "").strip().splitlines()
    return f"{error.get('ename', 'Error')}: {value[0] if value else ''}".strip().rstrip(":")[:200]


def _tasks(source_nb: Path, autograded: Path | None, grades: dict[str, tuple[float, float]]) -> list[Task]:
    """The notebook's tasks in order: each answer with the tests after it, and each written
    answer; points from ``grades`` (grade id -> (score, max)), errors from ``autograded``."""
    import nbformat

    errors: dict[str, str] = {}
    if autograded is not None and autograded.is_file():
        for cell in nbformat.read(autograded, as_version=4).cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            for out in cell.get("outputs", []):
                if gid and out.get("output_type") == "error":
                    errors[gid] = _first_line(out)
                    break
    tasks: list[Task] = []
    current: Task | None = None
    for cell in nbformat.read(source_nb, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        gid = meta.get("grade_id")
        if meta.get("solution") and cell.cell_type == "code":
            current = Task(gid, 0.0, 0.0)
            tasks.append(current)
        elif meta.get("solution") and meta.get("grade"):  # a written answer
            score, max_score = grades.get(gid, (0.0, float(meta.get("points", 0))))
            tasks.append(Task(gid, score, max_score, by_hand=True))
            current = None
        elif meta.get("grade") and current is not None:
            score, max_score = grades.get(gid, (0.0, float(meta.get("points", 0))))
            current.score += score
            current.max_score += max_score
            if score < max_score:
                current.failing.append(f"{gid}: {errors.get(gid, 'failed (no error shown: it wrote to stderr?)')}")
    return [t for t in tasks if t.max_score or t.by_hand]


def _grades(workdir: Path, assignment: str) -> dict[str, tuple[float, float]]:
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{workdir / 'gradebook.db'}") as gb:
        try:
            sub = gb.find_submission_notebook(assignment, assignment, STUDENT)
        except MissingEntry:
            return {}
        return {g.name: (float(g.score or 0.0), float(g.max_score or 0.0)) for g in sub.grades}


def _register(workdir: Path, assignment: str, source: Path, cache: Path) -> None:
    """Register ``assignment`` in a fresh gradebook in ``workdir``, from a copy kept in
    ``cache`` when the instructor's notebook is unchanged (registering costs seconds)."""
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted((source / assignment).glob("*.ipynb"))))
    kept = cache / f"{assignment}-{digest.hexdigest()[:16]}"
    if not kept.is_dir():
        register_assignments(workdir, [assignment], source, pattern=assignment)
        # whole or absent: another check may have made it meanwhile, and then it stands
        with replacing_folder(kept, keep_existing=True) as scratch:
            shutil.copy2(workdir / "gradebook.db", scratch / "gradebook.db")
            shutil.copytree(workdir / "release", scratch / "release")
        return
    workdir.mkdir(parents=True)
    shutil.copy2(kept / "gradebook.db", workdir / "gradebook.db")
    shutil.copytree(kept / "release", workdir / "release")


def check_notebook(name: str, *, notebooks: Path = RELEASE, source: Path = SOURCE, limits: Limits = Limits(),
                   cell_timeout: float = 120, feedback_dir: Path = FEEDBACK_DIR) -> Check:
    """Grade the learner's notebook ``name`` (see :func:`find_notebook`) with the tests of
    ``source``, in a scratch folder; keep its feedback in ``feedback_dir``.

    Raises:
        CheckError: the notebook cannot be found or read, or ``source`` has no such
            assignment.
    """
    notebooks, source = Path(notebooks).resolve(), Path(source).resolve()
    assignment, path = find_notebook(name, notebooks)
    if not source.is_dir():
        raise CheckError(f"no instructor's tests at {source}: run the check from a clone of the course "
                         "(it holds solutions/), or point --source at them")
    if assignment not in assignments(source):
        raise CheckError(f"{source} has no assignment {assignment}: the instructor's tests are not in this copy; "
                         "update it (git pull) or point --source at a copy that has them")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="feedgpu-check-") as tmp:
        submitted = Path(tmp) / "submitted_in" / STUDENT / assignment
        submitted.mkdir(parents=True)
        (submitted / path.name).write_bytes(path.read_bytes())
        workdir = Path(tmp) / "grading"
        try:
            _register(workdir, assignment, source, feedback_dir / ".registered")
        except RuntimeError as err:  # nbgrader could not read the instructor's notebook
            raise CheckError(f"nbgrader could not register {assignment} from {source}: "
                             f"{str(err).splitlines()[-1][:200]}") from None
        result = grade_one(workdir, submitted.parents[1], STUDENT, assignment, limits, cell_timeout, source)
        generate_feedback(workdir, [result], source)
        autograded = workdir / "autograded" / STUDENT / assignment / path.name
        tasks = _tasks(source / assignment / path.name, autograded if result.status == "graded" else None,
                       _grades(workdir, assignment) if result.status == "graded" else {})
        html = workdir / "feedback" / STUDENT / assignment / f"{path.stem}.html"
        kept = None
        if html.is_file():
            kept = write_atomically(feedback_dir / f"{assignment}.html", html.read_bytes())
    if hashlib.sha256(path.read_bytes()).hexdigest() != before:  # saved from JupyterLab meanwhile
        result.notes.append("the notebook was saved while it was checked: these are the points of the version "
                            "saved when the check began; check again for the new one")
    return Check(assignment, path, result, tasks, kept, time.perf_counter() - start)


def format_check(found: Check) -> str:
    """The lines ``make check`` prints for one notebook."""
    r = found.result
    lines = [f"{found.assignment}: {found.notebook}"]
    if r.status != "graded":
        lines.append(f"  could not be graded: {r.reason} (0 of {r.max_score:g} points)")
    width = max([len(t.name) for t in found.tasks] + [4])
    for t in found.tasks:
        mark = "by hand" if t.by_hand else ("ok" if t.score >= t.max_score else "")
        lines.append(f"  {t.name:<{width}}  {t.score:>4g} / {t.max_score:<4g} {mark}".rstrip())
        lines += [f"      {failing}" for failing in t.failing]
    auto = sum(t.score for t in found.tasks if not t.by_hand)
    auto_max = sum(t.max_score for t in found.tasks if not t.by_hand)
    hand = sum(t.max_score for t in found.tasks if t.by_hand)
    lines.append(f"  total: {auto:g} / {auto_max:g} points from the tests"
                 + (f" (+ {hand:g} for the written answers, graded by a person)" if hand else ""))
    lines += [f"  note: {note}" for note in r.notes]
    lines += [f"  FLAG: {flag}" for flag in r.flags]
    if found.feedback:
        lines.append(f"  feedback: {found.feedback}")
    lines.append(f"  ({found.seconds:.0f} s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return run_command("", _main, argv)


def _main(argv: list[str]) -> int:
    parser = OneLineParser(prog="feedgpu-check", description="Check your own notebook with the instructor's tests.")
    parser.add_argument("notebook", nargs="?", default="",
                        help="a notebook folder under work/ or a unique prefix (03); all when left out")
    parser.add_argument("--notebooks", type=Path, default=WORK,
                        help="your notebooks (default work/, made by make lab)")
    parser.add_argument("--source", type=Path, default=SOURCE, help="the tests (default solutions/)")
    parser.add_argument("--cell-timeout", type=float, default=120, help="seconds per cell")
    args = parser.parse_args(argv)
    try:
        names = [args.notebook] if args.notebook.strip() else _folders(args.notebooks)
        for name in names:
            print(format_check(check_notebook(name, notebooks=args.notebooks, source=args.source,
                                              cell_timeout=args.cell_timeout)), flush=True)
    except CheckError as err:
        raise UsageError(str(err)) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
