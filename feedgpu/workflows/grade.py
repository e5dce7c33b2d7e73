"""Grade a class: every ``SUBMISSIONS/<student>/<assignment>/`` with nbgrader, on a Dask cluster.

Usage: ``feedgpu-grade SUBMISSIONS [--workdir grading] [--source solutions] [--jobs N |
--scheduler tcp://HOST:PORT] [--regrade] [--timeout 900] [--cell-timeout 120]
[--memory-mb 4096] [--max-processes 48]``

In a working folder (default ``grading/``, kept between runs so no grade is ever lost):

1. every assignment of the source folder (default ``solutions/``) is registered in
   ``gradebook.db`` (the instructor's tests, points and checksums) by one nbgrader run, and
   its release is kept in ``release/``;
2. each submission is sent to a worker of a Dask cluster (``--jobs N`` local worker
   processes, or the cluster at ``--scheduler``; see ``cluster.py``), which inspects it
   (test cells renamed, repeated, edited or deleted; code that tries to switch tests off;
   see ``inspection.py``) and autogrades it with nbgrader alone, in its own process session
   with a time limit, a per-cell time limit, a memory limit and a process limit
   (``sandbox.py``); every process it started is killed afterwards. One broken
   submission never stops the others. The notebooks nbgrader wrote come back, and this
   process alone records their grades in ``gradebook.db`` and saves ``status.json`` and
   ``grades.csv`` after each submission, so an interrupted run keeps every grade it made;
3. a run grades only what is missing: a submission graded before, with the same files,
   the same instructor's assignment and the same limits, is kept as it was (``--regrade``
   grades every one again). A submission whose worker died is graded again by another;
4. HTML feedback goes to ``feedback/<student>/<assignment>/``, made once for the whole class
   after grading (one nbgrader run, not one per submission);
5. ``grades.csv`` gets one row per student and assignment ever graded here: scores, the
   reason of a failure, the notes and flags of the inspection (``status.json`` keeps the
   same, with the seconds, memory and worker of each grading). A submission that could not
   be graded (the kernel died, a limit stopped it, the notebook is unreadable) scores 0
   beside its reason, so no score cell is ever empty: nbgrader records no grade for a run
   that stopped, so no test counts. The same class gives the same file with 1 or N
   workers. A summary is printed.

Each nbgrader run costs seconds before it does anything (it imports Jupyter, nbconvert and
SQLAlchemy), so a class of ``n`` submissions costs ``n + 2`` runs: ``n`` autogrades, each
alone in its sandbox, one registration and one feedback run.

Grading runs the students' code. Run it on machines (or in containers) you can afford
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
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from . import COURSE_ROOT as ROOT
from .cluster import Course, Graded, Submission, digest, grade_on_worker, open_client, read_tree, write_tree
from .inspection import inspect_and_repair
from .release import NBGRADER, SOURCE, assignments, nbgrader_env
from ..checks import check_int
from .sandbox import Limits, describe, reap_orphans, run_limited

logger = logging.getLogger("grade")

CSV_NAME = "grades.csv"
STATUS_NAME = "status.json"


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


#: The columns of ``grades.csv``: what the grade is, never how long it took or where it
#: ran (those are in ``status.json``), so the same class gives the same file on 1 or N workers.
CSV_FIELDS = ("student", "assignment", "status", "score", "max_score", "code_score", "max_code_score",
              "needs_manual_grade", "reason", "flags", "notes")


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


def _maxima(gb, assignment: str) -> tuple[float | None, float | None]:
    """``(max_score, max_code_score)`` of ``assignment`` in the open gradebook ``gb``
    (``(None, None)`` for an assignment it does not know)."""
    from nbgrader.api import MissingEntry

    try:
        found = gb.find_assignment(assignment)
    except MissingEntry:
        return None, None
    return float(found.max_score), float(found.max_code_score)


def _failed(student: str, assignment: str, reason: str, maxima: tuple[float | None, float | None]) -> Result:
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
        return _failed(student, assignment, reason, _maxima(gb, assignment))


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
    with tempfile.TemporaryDirectory(prefix="fg-", ignore_cleanup_errors=True) as tmp:
        out = run_limited(cmd, limits, cwd=ROOT, env={**_env(), "TMPDIR": tmp})
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
                results.append(_failed(student, assignment, "no grades recorded", _maxima(gb, assignment)))
                continue
            results.append(Result(student, assignment, "graded", sub.score, sub.max_score,
                                  sub.code_score, sub.max_code_score, sub.needs_manual_grade))
    return results


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
    known = {f.name for f in fields(Result)}
    rows = [Result(**{k: v for k, v in status[key].items() if k in known}) for key in sorted(status)]
    graded = [r for r in rows if r.status == "graded"]
    for saved, fresh in zip(graded, read_all_scores(workdir, [(r.student, r.assignment) for r in graded])):
        for name in ("score", "max_score", "code_score", "max_code_score", "needs_manual_grade"):
            setattr(saved, name, getattr(fresh, name))
    _write_atomically(workdir / STATUS_NAME, json.dumps(status, indent=1, sort_keys=True))
    with (workdir / (CSV_NAME + ".tmp")).open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            row = asdict(r)
            row["flags"], row["notes"] = "; ".join(r.flags), "; ".join(r.notes)
            writer.writerow(row)
    (workdir / (CSV_NAME + ".tmp")).replace(workdir / CSV_NAME)


def record(workdir: Path, graded: Graded) -> Result:
    """Keep what a worker sent back for one submission, and return its result as this
    gradebook has it.

    The notebooks nbgrader wrote go to ``autograded/``, and their grades into
    ``gradebook.db`` by nbgrader's own ``SaveAutoGrades``, as its autograde does on one
    machine: from each test cell's outputs, keeping the written answers graded by hand.
    The feedback of an earlier grading is removed, so none is left that this grade contradicts.
    """
    r = graded.result
    folder = workdir / "autograded" / r.student / r.assignment
    shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(workdir / "feedback" / r.student / r.assignment, ignore_errors=True)
    if r.status != "graded":
        return r
    write_tree(folder, graded.autograded)
    _save_autogrades(workdir, r.student, r.assignment, folder)
    fresh = read_scores(workdir, r.student, r.assignment)
    for name in ("reason", "flags", "notes", "seconds", "peak_memory_mb"):
        setattr(fresh, name, getattr(r, name))
    return fresh


def _save_autogrades(workdir: Path, student: str, assignment: str, folder: Path) -> None:
    """Record the grades of the autograded notebooks in ``folder`` in the gradebook."""
    import warnings

    import nbformat
    from nbgrader.api import Gradebook
    from nbgrader.preprocessors import SaveAutoGrades
    from sqlalchemy.exc import SAWarning

    url = f"sqlite:///{workdir / 'gradebook.db'}"
    # nbgrader 0.9.6's add_submission builds its rows in a way SQLAlchemy 2 warns about
    # (its own autograde warns the same); the rows are right, the warning is noise here.
    warnings.filterwarnings("ignore", category=SAWarning, module="nbgrader")
    with Gradebook(url) as gb:
        gb.update_or_create_student(student)
        gb.update_or_create_submission(assignment, student)
        graded = {p.stem for p in folder.glob("*.ipynb")}
        for notebook in gb.find_assignment(assignment).notebooks:
            if notebook.name not in graded:  # as nbgrader does: a notebook not handed in scores 0
                for grade in gb.find_submission_notebook(notebook.name, assignment, student).grades:
                    grade.auto_score, grade.needs_manual_grade = 0, False
        gb.db.commit()
    for path in sorted(folder.glob("*.ipynb")):
        resources = {"nbgrader": {"notebook": path.stem, "assignment": assignment, "student": student,
                                  "db_url": url}}
        SaveAutoGrades().preprocess(nbformat.read(path, as_version=4), resources)


def _worker_failure(student: str, assignment: str, err: BaseException, maxima) -> Result:
    """The result of a submission that no worker could grade (not the student's fault):
    0 beside the reason, and no fingerprint, so the next run grades it again."""
    from distributed import KilledWorker

    if isinstance(err, KilledWorker):
        why = (f"not graded: every worker that started it died ({err.allowed_failures + 1} tries, "
               f"the last on {err.last_worker.address}); grade again to retry")
    else:
        why = f"not graded: the grading failed on its worker ({type(err).__name__}: {err}); grade again to retry"
    return _failed(student, assignment, why[:300], maxima)


def _settings(limits: Limits, cell_timeout: float) -> str:
    """What else decides a grade: a submission graded with other limits is graded again."""
    return f"wall={limits.wall_s} memory={limits.memory_mb} processes={limits.max_processes} cell={cell_timeout}"


#: Where the working folder keeps each registration the workers grade with (a gradebook
#: with no student, and the release), by the version of the assignments it registered.
REGISTERED = ".registered"


def register_for_workers(workdir: Path, names: list[str], source: Path) -> Course:
    """Register ``names`` in the gradebook of ``workdir``, and return the :class:`Course`
    that the workers grade with: the same registration, in a gradebook with no student.

    Both are kept under ``workdir/.registered/``, by a digest of the assignments, the
    course's ``nbgrader_config.py`` and nbgrader's version: a run whose assignments did not
    change since the last one registers nothing (each registration is an nbgrader run of
    seconds). The workers' copy is the fresh gradebook itself when it has no student yet,
    else one more registration in a scratch folder.
    """
    import nbgrader
    from nbgrader.api import Gradebook

    config = (ROOT / "nbgrader_config.py").read_text() if (ROOT / "nbgrader_config.py").is_file() else ""
    key = digest(*(read_tree(source / name) for name in names),
                 extra="\0".join([*names, config, nbgrader.__version__]))[:16]
    store = workdir / REGISTERED
    kept, last = store / key, store / "last"
    head_current = (workdir / "gradebook.db").is_file() and last.is_file() and last.read_text() == key
    if not head_current:
        register_assignments(workdir, names, source)
    if not kept.is_dir():
        store.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=store))
        try:
            with Gradebook(f"sqlite:///{workdir / 'gradebook.db'}") as gb:
                fresh = not gb.students
            if fresh:
                shutil.copy2(workdir / "gradebook.db", scratch / "gradebook.db")
                for name in names:
                    shutil.copytree(workdir / "release" / name, scratch / "release" / name)
            else:
                register_assignments(scratch, names, source)
            scratch.rename(kept)  # whole or absent
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    if not head_current:
        last.write_text(key)
    return Course.from_registration(kept, source, names)


def grade_class(submissions: Path, workdir: Path, limits: Limits = Limits(),
                cell_timeout: float = 120, progress: bool = True,
                source: Path = SOURCE, jobs: int = 1, scheduler: str | None = None,
                regrade: bool = False) -> list[Result]:
    """Grade every submission under ``submissions`` that is not graded yet; return the
    results of this run (those kept from earlier runs are in ``grades.csv``).

    Submissions are graded on a Dask cluster (:mod:`~feedgpu.workflows.cluster`): a local
    one of ``jobs`` worker processes, or the running cluster at ``scheduler``. Each is
    graded alone, in its own sandbox with ``limits`` (budget ``jobs`` times the memory on
    one machine). Timing checks in the notebooks must then allow for a machine shared by
    ``jobs`` gradings, as the course's do (generous ratios on workloads of known cost).

    Args:
        submissions: holds ``<student>/<assignment>/`` folders.
        workdir: the grading folder (gradebook, copies, feedback, ``grades.csv``).
        limits: what one submission's autograde may use (:class:`~.sandbox.Limits`).
        cell_timeout: seconds one cell may run before it is interrupted.
        progress: show a progress bar (with the time left).
        source: the instructor's assignments, ``<assignment>/<notebook>.ipynb`` with
            solutions and hidden tests (default ``solutions/``).
        jobs: worker processes of the local cluster (ignored with ``scheduler``).
        scheduler: the address of a running Dask scheduler, ``tcp://HOST:PORT``.
        regrade: grade every submission again, also those graded before unchanged.
    """
    from distributed import as_completed
    from tqdm.auto import tqdm

    jobs = check_int("jobs", jobs, minimum=1)
    submissions, workdir = Path(submissions).resolve(), Path(workdir).resolve()
    source = Path(source).resolve()
    if not submissions.is_dir():
        raise FileNotFoundError(
            f"no submissions folder {submissions}: expected {submissions}/<student>/<assignment>/")
    if not source.is_dir():
        raise FileNotFoundError(
            f"no assignments folder {source}: expected {source}/<assignment>/<notebook>.ipynb")
    workdir.mkdir(parents=True, exist_ok=True)
    pairs = find_submissions(submissions, assignments(source))
    status = load_status(workdir)
    settings = _settings(limits, cell_timeout)
    sources = {name: read_tree(source / name) for name in sorted({a for _, a in pairs})}
    prints = {(s, a): digest(sources[a], read_tree(submissions / s / a), extra=f"{a}\0{settings}")
              for s, a in pairs}
    todo = [pair for pair in pairs if regrade or status.get("/".join(pair), {}).get("fingerprint") != prints[pair]]
    if len(todo) < len(pairs):
        logger.info("kept %d of %d submissions graded before, unchanged (--regrade grades them again)",
                    len(pairs) - len(todo), len(pairs))
    done: dict[tuple[str, str], Result] = {}
    if todo:
        course = register_for_workers(workdir, sorted({a for _, a in todo}), source)
        try:
            with open_client(jobs, scheduler) as client, \
                    tqdm(total=len(todo), desc="grading", unit="submission", disable=not progress) as bar:
                shared = client.scatter(course, broadcast=True, hash=False)
                waiting, running, by_key = iter(todo), as_completed(), {}

                def send_next() -> None:
                    pair = next(waiting, None)
                    if pair is None:
                        return
                    sub = Submission(*pair, read_tree(submissions / pair[0] / pair[1]), prints[pair])
                    future = client.submit(grade_on_worker, shared, sub, limits, cell_timeout, pure=False,
                                           key=f"grade-{pair[0]}/{pair[1]}-{prints[pair][:12]}")
                    by_key[future.key] = pair
                    running.add(future)

                for _ in range(max(4, 2 * sum(client.nthreads().values()))):  # a window, not the class
                    send_next()
                for future in running:
                    pair = by_key.pop(future.key)
                    try:
                        graded = future.result()
                    except Exception as err:  # noqa: BLE001 (no worker could grade it: say so, go on)
                        done[pair] = _worker_failure(*pair, err, _maxima_of(workdir, pair[1]))
                    else:
                        done[pair] = record(workdir, graded)
                        done[pair].worker, done[pair].fingerprint = graded.worker, prints[pair]
                    future.release()
                    status["/".join(pair)] = asdict(done[pair])
                    save(workdir, status)  # after each one: an interrupted run keeps what it graded
                    bar.update()
                    send_next()
        finally:
            reap_orphans()  # what the workers of a local cluster left when they were stopped
    results = [done[pair] for pair in todo if pair in done]
    generate_feedback(workdir, results, source)
    for r in results:  # the notes of feedback that could not be written
        status[f"{r.student}/{r.assignment}"] = asdict(r)
    save(workdir, status)
    return results


def _maxima_of(workdir: Path, assignment: str) -> tuple[float | None, float | None]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{workdir / 'gradebook.db'}") as gb:
        return _maxima(gb, assignment)


def summary(results: list[Result], workdir: Path) -> str:
    """A few lines for the instructor: counts, failures and flags of this run's gradings."""
    stopped = [r for r in results if r.status != "graded"]
    lines = [f"graded {len(results) - len(stopped)} of {len(results)} submissions from "
             f"{len({r.student for r in results})} students "
             f"({len({r.assignment for r in results})} assignments); {len(stopped)} failed"]
    lines += [f"  FAILED  {r.student}/{r.assignment} ({r.score} / {r.max_score}): {r.reason}" for r in stopped]
    lines += [f"  FLAGGED {r.student}/{r.assignment}: {'; '.join(r.flags)}" for r in results if r.flags]
    lines.append(f"grades: {workdir / CSV_NAME}; feedback: {workdir / 'feedback'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    defaults = Limits()
    parser = argparse.ArgumentParser(description="Grade every SUBMISSIONS/<student>/<assignment>/.")
    parser.add_argument("submissions", type=Path)
    parser.add_argument("--workdir", type=Path, default=ROOT / "grading",
                        help="gradebook, copies, feedback and grades.csv (default grading/)")
    parser.add_argument("--source", type=Path, default=SOURCE,
                        help="the assignments with solutions and hidden tests (default solutions/)")
    parser.add_argument("--timeout", type=float, default=defaults.wall_s, help="seconds per submission")
    parser.add_argument("--cell-timeout", type=float, default=120, help="seconds per cell")
    parser.add_argument("--memory-mb", type=float, default=defaults.memory_mb,
                        help="memory of the grading processes together, in MB")
    parser.add_argument("--max-processes", type=int, default=defaults.max_processes)
    parser.add_argument("--jobs", type=int, default=1,
                        help="worker processes of a local Dask cluster: submissions graded at once "
                             "(default 1; each gets the limits above)")
    parser.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                        help="grade on the running Dask cluster with this scheduler instead "
                             "(its workers need the course installed: make venv data)")
    parser.add_argument("--regrade", action="store_true",
                        help="grade every submission again, also those graded before and unchanged")
    parser.add_argument("--report-only", action="store_true",
                        help="grade nothing: rewrite grades.csv from the gradebook (after hand grading)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="grade: %(message)s")
    logger.setLevel(logging.INFO)  # our own news
    import distributed  # noqa: F401 (importing it sets its loggers to INFO: Dask's start-up chatter)

    logging.getLogger("distributed").setLevel(logging.WARNING)
    if args.report_only:
        save(args.workdir.resolve(), load_status(args.workdir.resolve()))
        print(f"grades: {args.workdir.resolve() / CSV_NAME}")
        return 0
    limits = Limits(wall_s=args.timeout, memory_mb=args.memory_mb, max_processes=args.max_processes)
    try:
        results = grade_class(args.submissions, args.workdir, limits, args.cell_timeout,
                              source=args.source, jobs=args.jobs, scheduler=args.scheduler,
                              regrade=args.regrade)
    except (OSError, ValueError) as err:  # a missing folder, a bad number, a scheduler out of reach
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(summary(results, args.workdir.resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
