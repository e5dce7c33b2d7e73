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
   grades every one again). A submission whose worker died is graded again by another,
   and one whose kernel died before it ran anything is graded again once (``submission.py``);
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

import csv
import io
import json
import logging
import shutil
import sys
from dataclasses import asdict, fields
from pathlib import Path

from .. import COURSE_ROOT as ROOT
from ...base.checks import check_int
from ...base.cli import OneLineParser, UsageError, run_command
from ...base.files import replacing_folder, write_atomically
from .cluster import (ALLOWED_FAILURES, Course, CourseOnWorkers, Graded, Submission, digest, grade_on_worker,
                      lost_dependencies, open_client, read_tree, write_tree)
from .course_layout import SOURCE, assignments
from .sandbox import Limits, reap_orphans
from .submission import (Result, assignment_maxima, failed_result, generate_feedback, read_all_scores, read_scores,
                         register_assignments)

logger = logging.getLogger("grade")

CSV_NAME = "grades.csv"
STATUS_NAME = "status.json"


#: The columns of ``grades.csv``: what the grade is, never how long it took or where it
#: ran (those are in ``status.json``), so the same class gives the same file on 1 or N workers.
CSV_FIELDS = ("student", "assignment", "status", "score", "max_score", "code_score", "max_code_score",
              "needs_manual_grade", "reason", "flags", "notes")


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
    write_atomically(workdir / STATUS_NAME, json.dumps(status, indent=1, sort_keys=True))
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=CSV_FIELDS, extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        row = asdict(r)
        row["flags"], row["notes"] = "; ".join(r.flags), "; ".join(r.notes)
        writer.writerow(row)
    write_atomically(workdir / CSV_NAME, table.getvalue())


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
    return failed_result(student, assignment, why[:300], maxima)


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
        with replacing_folder(kept, keep_existing=True) as scratch:  # whole or absent
            with Gradebook(f"sqlite:///{workdir / 'gradebook.db'}") as gb:
                fresh = not gb.students
            if fresh:
                shutil.copy2(workdir / "gradebook.db", scratch / "gradebook.db")
                for name in names:
                    shutil.copytree(workdir / "release" / name, scratch / "release" / name)
            else:
                register_assignments(scratch, names, source)
    if not head_current:
        write_atomically(last, key)
    return Course.from_registration(kept, source, names)


def grade_class(submissions: Path, workdir: Path, limits: Limits = Limits(),
                cell_timeout: float = 120, progress: bool = True,
                source: Path = SOURCE, jobs: int = 1, scheduler: str | None = None,
                regrade: bool = False) -> list[Result]:
    """Grade every submission under ``submissions`` that is not graded yet; return the
    results of this run (those kept from earlier runs are in ``grades.csv``).

    Submissions are graded on a Dask cluster (:mod:`~feedgpu.workflows.grading.cluster`): a local
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
                shared = CourseOnWorkers(client, course)
                waiting, running, by_key, resent = iter(todo), as_completed(), {}, {}

                def send(pair: tuple[str, str]) -> None:
                    sub = Submission(*pair, read_tree(submissions / pair[0] / pair[1]), prints[pair])
                    again = f"-again{resent[pair]}" if pair in resent else ""
                    future = client.submit(grade_on_worker, shared.future(), sub, limits, cell_timeout, pure=False,
                                           key=f"grade-{pair[0]}/{pair[1]}-{prints[pair][:12]}{again}")
                    by_key[future.key] = pair
                    running.add(future)

                def send_next() -> None:
                    pair = next(waiting, None)
                    if pair is not None:
                        send(pair)

                for _ in range(max(4, 2 * sum(client.nthreads().values()))):  # a window, not the class
                    send_next()
                for future in running:
                    pair = by_key.pop(future.key)
                    try:
                        graded = future.result()
                    except Exception as err:  # noqa: BLE001 (no worker could grade it: say so, go on)
                        if lost_dependencies(err) and resent.get(pair, 0) < ALLOWED_FAILURES:
                            # the course's last copy went with a lost worker before this one started:
                            # nothing was graded, so it is sent again with the course scattered again
                            resent[pair] = resent.get(pair, 0) + 1
                            future.release()
                            shared.lost()
                            send(pair)
                            continue
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
        return assignment_maxima(gb, assignment)


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
    return run_command("feedgpu-grade", _main, argv, interrupted="interrupted: every grade made so far is kept")


def _main(argv: list[str]) -> int:
    defaults = Limits()
    parser = OneLineParser(prog="feedgpu-grade", description="Grade every SUBMISSIONS/<student>/<assignment>/.")
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
        raise UsageError(str(err)) from None
    print(summary(results, args.workdir.resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
