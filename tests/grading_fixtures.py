"""Helpers for the tests that grade notebooks: nbgrader cell roles, student versions of a
solution, and one Jupyter kernel that runs chosen cells of a notebook.

Grading a whole notebook with nbgrader costs a start-up of nbgrader (seconds), a kernel
and every demonstration in the notebook. The tests pay for that once per notebook (the
session fixture ``course_grading`` in ``conftest.py``); everything else that needs to run
answers and tests does it in one kernel per notebook, with :class:`OneKernel`.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import psutil
from nbclient import NotebookClient

from feedgpu.workflows.grading.sandbox import Limits
from wrong_answers import delegations

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
RELEASE = ROOT / "notebooks"


def course_notebooks() -> list[str]:
    """The course's assignments (folders of ``solutions/`` with a notebook), sorted.

    While working on one notebook, ``FEEDGPU_NOTEBOOKS=06_copy_on_write,00_orientation``
    narrows the notebook tests and the session's grading to those (the checks that
    ``notebooks/`` matches ``solutions/`` then fail: it is for development, never CI).
    """
    names = sorted(p.name for p in SOLUTIONS.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))
    wanted = os.environ.get("FEEDGPU_NOTEBOOKS", "").strip()
    if wanted:
        names = [n for n in names if n in {w.strip() for w in wanted.split(",")}]
    return names
#: The grader's fixture assignment: a tiny nbgrader source folder with one assignment.
FIXTURE_SOURCE = Path(__file__).resolve().parent / "fixtures" / "source"
TINY = "tiny"

#: Small limits for gradings of the fixture, so that each bad submission costs seconds: its
#: good submission takes about 10 s, 1 GB and 5 processes on 2 busy cores.
SMALL_LIMITS = Limits(wall_s=120, memory_mb=2500, max_processes=16)
SMALL_CELL_TIMEOUT = 10

#: The nbgrader solution markers; a student's hand-in has none of them.
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


#: The notebook that ``cy_delegates`` hands in to the session's grading (``conftest.py``),
#: each answer that the course's own code could do written as a call of it (one notebook:
#: a whole-notebook grading costs time; the one-kernel runs try every notebook's).
DELEGATING = "00_orientation"

#: Graded alone, after the others, in the session's grading, and run alone, on every core,
#: after the others' one-kernel runs (test_answers_graded_alone.py): the capstone's graded
#: run keeps a loader of 5 workers busy for about a core's worth of CPU, and its bound
#: allows 25%. On the course's 2-core machine, right after notebook 06 had freed its
#: gigabytes, the run on one core reached 0.68 of the bound (the kernel still reclaiming
#: memory there), and on both cores 0.94; next to another grading, 0.66 to 0.73 (a
#: fresh-clone run, 2026-11-27), where it had passed before by the luck of its neighbour.
GRADED_ALONE = ("09_capstone",)

#: Each answer with references in :data:`feedgpu.workflows.grading.testing.REFERENCES` handed in as a call of
#: one of them, in the ways a student could write it, for every notebook: kept beside each
#: notebook's wrong answers in ``tests/wrong_answers/``. Each would pass most of its tests
#: if the references were not hidden while they run.
DELEGATIONS: dict[str, str] = {answer: source for folder in sorted(SOLUTIONS.iterdir())
                               for answer, source in delegations(folder.name).items()}


# --------------------------------------------------------------------------- cell roles


def meta(cell) -> dict:
    """The cell's nbgrader metadata ({} for an ordinary cell)."""
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def grade_id(cell) -> str | None:
    return meta(cell).get("grade_id")


def is_answer(cell) -> bool:
    """A code cell the student fills in."""
    return cell.cell_type == "code" and bool(meta(cell).get("solution"))


def is_test(cell) -> bool:
    """An autograded test cell."""
    return cell.cell_type == "code" and bool(meta(cell).get("grade")) and not meta(cell).get("solution")


def is_setup(cell) -> bool:
    """A locked code cell that is neither an answer nor a test: imports, configuration, helpers."""
    m = meta(cell)
    return cell.cell_type == "code" and bool(m.get("locked")) and not m.get("grade") and not m.get("solution")


def cell(nb, gid: str):
    """The cell of ``nb`` whose grade id is ``gid``."""
    found = [c for c in nb.cells if grade_id(c) == gid]
    assert len(found) == 1, f"expected one cell with grade id {gid!r}, found {len(found)}"
    return found[0]


def graded_test_ids(nb) -> list[str]:
    return [grade_id(c) for c in nb.cells if is_test(c)]


def answer_ids(nb) -> list[str]:
    """Every cell a student fills in: code answers and written (markdown) answers."""
    return [grade_id(c) for c in nb.cells if meta(c).get("solution")]


def own_tests(cells) -> dict[str, list[str]]:
    """For each code answer's grade id, the grade ids of the tests between it and the next answer."""
    owner, out = None, {}
    for c in cells:
        if is_answer(c):
            owner = grade_id(c)
            out[owner] = []
        elif is_test(c) and owner:
            out[owner].append(grade_id(c))
    return out


def points_by_test(nb) -> dict[str, float]:
    """Points of each autograded test cell, by grade id."""
    return {grade_id(c): float(meta(c)["points"]) for c in nb.cells if is_test(c)}


def strip_markers(source: str) -> str:
    return "\n".join(line for line in source.splitlines() if line.strip() not in SOLUTION_MARKERS)


def student_version(solution, released):
    """The solution as a student hands it in: the released notebook (locked test cells,
    no hidden tests) with every answer filled in, the written ones too, so they are left to
    grade by hand."""
    nb = nbformat.from_dict(copy.deepcopy(released))
    answers = set(answer_ids(solution))
    for c in nb.cells:
        if grade_id(c) in answers:
            c.source = strip_markers(cell(solution, grade_id(c)).source)
    return nb


def delegating_version(solution, released):
    """The solution as a student hands it in, with every answer that the course's own
    code could do written as a call of that code (:data:`DELEGATIONS`)."""
    nb = student_version(solution, released)
    for c in nb.cells:
        if is_answer(c) and grade_id(c) in DELEGATIONS:
            c.source = DELEGATIONS[grade_id(c)]
    return nb


#: What a notebook's first code cell does on macOS and Windows, where DataLoader workers
#: start with *spawn*: a submission that begins with it runs every worker of the notebook
#: as a student there would (:func:`on_spawn`).
SPAWN_CELL = ('import multiprocessing\n\n'
              'multiprocessing.set_start_method("spawn", force=True)  # workers start as on macOS and Windows')


def on_spawn(nb):
    """A copy of ``nb`` that starts its DataLoader workers with *spawn*: a new ordinary code
    cell right after the header sets the kernel's default start method, before any cell
    starts a worker (``describe_machine()`` then reports ``spawn`` too)."""
    return with_cell_after(nb, "header", SPAWN_CELL)


#: The first code cell of the session's grading of the solutions: workers start as under
#: spawn, from a fresh interpreter that gets the dataset pickled (a class, function or
#: lambda defined in the notebook fails to reach them, as on macOS and Windows), but fork
#: from a server that has imported PyTorch and the course once: *forkserver* (Python
#: 3.14's default on Linux), which starts a worker in milliseconds where spawn takes
#: seconds. Notebook 02 on 2 cores: 28 s under fork, 40 s so, 83 s under spawn.
FRESH_WORKERS_CELL = ('import multiprocessing\n\n'
                      'multiprocessing.set_forkserver_preload(["torch", "torchvision", "lfw_dataset", "feedgpu.workloads"])\n'
                      'multiprocessing.set_start_method("forkserver", force=True)  '
                      '# workers start as under spawn, from a server that imported PyTorch once')


def with_fresh_workers(nb):
    """A copy of ``nb`` whose DataLoader workers start from a fresh interpreter
    (:data:`FRESH_WORKERS_CELL`), set right after the header, before any cell starts one."""
    return with_cell_after(nb, "header", FRESH_WORKERS_CELL)


def with_cell_after(nb, gid: str, source: str):
    """A copy of ``nb`` with a new ordinary code cell right after the cell ``gid``."""
    nb = nbformat.from_dict(copy.deepcopy(nb))
    index = next(i for i, c in enumerate(nb.cells) if grade_id(c) == gid)
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(source))
    return nb


def write_submission(subs: Path, student: str, assignment: str, nb) -> None:
    (subs / student / assignment).mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, subs / student / assignment / f"{assignment}.ipynb")


# --------------------------------------------------------------------------- one kernel


def error_of(outputs) -> str | None:
    """'Name: message' of the error in a cell's outputs, or None."""
    for out in outputs:
        if out.get("output_type") == "error":
            return f"{out.get('ename')}: {out.get('evalue', '')}"[:300]
    return None


def stderr_of(outputs) -> str:
    return "".join(out.get("text", "") for out in outputs
                   if out.get("output_type") == "stream" and out.get("name") == "stderr")


class OneKernel:
    """One Jupyter kernel, started in ``folder``, that runs code cell by cell.

    Use as a context manager; :meth:`run` returns the outputs of one cell. Cells run in
    the order given, as the grader would run them, but any cell may be run again (a
    correct answer put back after a wrong one).
    """

    def __init__(self, folder: Path, timeout: float = 180):
        self.nb = nbformat.v4.new_notebook()
        self.client = NotebookClient(self.nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                                     shutdown_kernel="immediate",
                                     resources={"metadata": {"path": str(folder)}})
        self._context = None

    def __enter__(self) -> "OneKernel":
        self._context = self.client.setup_kernel()
        self._context.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._context.__exit__(*exc)

    def run(self, source: str) -> list:
        """Run ``source`` as one cell; its outputs."""
        self.nb.cells = [nbformat.v4.new_code_cell(source)]  # nbclient writes outputs back here
        self.client.execute_cell(self.nb.cells[0], 0)
        return self.nb.cells[0].outputs

    def run_ok(self, source: str, what: str) -> list:
        """Run ``source``; it must not raise."""
        outputs = self.run(source)
        err = error_of(outputs)
        assert err is None, f"{what} raised {err}"
        return outputs


def one_core(index: int = 0) -> str:
    """A cell that puts the kernel (and every worker it starts from now on) on one core,
    the ``index``-th of its cores (modulo their number), as on a small JupyterHub pod; two
    kernels given different indices do not share a core."""
    return ("import os as _os\n_cores = sorted(_os.sched_getaffinity(0))\n"
            f"_os.sched_setaffinity(0, {{_cores[{index} % len(_cores)]}})")


# --------------------------------------------------------------------------- a Dask cluster


class Cluster:
    """A Dask scheduler and ``workers`` worker processes on localhost, started as commands
    and joined by address, as other machines would join: ``feedgpu-grade --scheduler
    ADDRESS``. No nannies: a worker killed stays dead, as a machine that crashed."""

    def __init__(self, folder: Path, workers: int = 2):
        python = [sys.executable, "-m"]
        file = folder / "scheduler.json"
        self.procs = [subprocess.Popen([*python, "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                        "--port", "0", "--no-dashboard", "--scheduler-file", str(file)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        deadline = time.monotonic() + 60
        while not file.is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        if not file.is_file():
            self.stop()
            raise RuntimeError("the Dask scheduler did not start within 60 s")
        self.address = json.loads(file.read_text())["address"]
        self.workers = [subprocess.Popen([*python, "distributed.cli.dask_worker", self.address, "--nthreads", "1",
                                          "--no-nanny", "--no-dashboard", "--memory-limit", "0",
                                          "--name", f"machine{k}"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                        for k in range(workers)]
        self.procs += self.workers
        from distributed import Client

        try:
            with Client(self.address, timeout="60s") as client:
                client.wait_for_workers(workers, timeout=120)
        except BaseException:
            self.stop()
            raise

    def grading(self) -> dict[str, subprocess.Popen]:
        """The students graded now (nbgrader runs under a worker), each with its worker."""
        found = {}
        for worker in self.workers:
            try:
                for child in psutil.Process(worker.pid).children(recursive=True):
                    line = child.cmdline()
                    if "autograde" in line:
                        student = next(a.split("=", 1)[1] for a in line if a.startswith("--student="))
                        found[student] = worker
            except psutil.Error:
                continue
        return found

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Kill the workers, then the scheduler (a worker that has graded may take 30 s to
        close gracefully; these hold nothing to save)."""
        for proc in [*self.workers, *self.procs[:1]]:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)


def graded_losing_a_worker(cluster: Cluster, student: str, grade_class) -> tuple[list, bool]:
    """Run ``grade_class()`` (which grades on ``cluster``) and kill the worker that grades
    ``student`` as soon as its nbgrader starts, as a machine lost in the middle of a
    grading. Returns the results, and whether a worker was killed."""
    import threading

    done: dict = {}

    def run() -> None:
        try:
            done["results"] = grade_class()
        except BaseException as err:  # noqa: BLE001 (raised again in the test's thread)
            done["error"] = err

    thread = threading.Thread(target=run, name="grade-class")
    thread.start()
    killed = False
    while thread.is_alive() and not killed:
        worker = cluster.grading().get(student)
        if worker is not None:
            worker.kill()
            killed = True
        time.sleep(0.02)
    thread.join(timeout=1800)
    if "error" in done:
        raise done["error"]
    assert not thread.is_alive(), "the grading did not end after a worker died"
    return done["results"], killed
