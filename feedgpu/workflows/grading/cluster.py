"""Grade submissions on a Dask cluster: a local one of N worker processes (the default), or
one that already runs (machines that ran ``dask worker``, dask-jobqueue on SLURM or PBS,
Kubernetes), reached by its scheduler's address.

Grading a class is a batch of independent tasks, one per submission. The head
(``feedgpu-grade``, :mod:`~feedgpu.workflows.grading.grade`) sends each task the submission's files
and a :class:`Course`: what any worker needs to grade any submission of the class (the
registered gradebook, with no student in it, and each assignment's release and source),
sent once to every worker. The worker grades in a scratch folder of its own, in the same
sandbox and with the same limits as on one machine (:func:`~feedgpu.workflows.grading.submission.grade_one`),
and sends back the result and the notebooks nbgrader wrote (:class:`Graded`). Only the head
writes the gradebook and the CSV: one writer for nbgrader's database, and a submission
whose worker died is graded again elsewhere by Dask and recorded once, when its result
arrives.

A worker needs the course installed as on the head (the repository, ``make venv`` and
``make data``: the notebooks read the faces), and no shared file system.
"""

from __future__ import annotations

import hashlib
import logging
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .sandbox import Limits, reap_orphans
from .submission import grade_one

logger = logging.getLogger("grade")

#: How often Dask starts a task again after the worker that ran it died (the scheduler's
#: ``allowed-failures``, for a local cluster; a cluster of yours keeps its own setting), and
#: how often a submission is sent again after a lost worker took the course's last copy.
ALLOWED_FAILURES = 3


class CourseOnWorkers:
    """The course scattered to every worker of a Dask ``client``, and again once it is lost.

    Dask's Active Memory Manager (on by default in the installed ``distributed``:
    ``active_memory_manager.ReduceReplicas``) drops a broadcast key's replicas down to what
    its waiting tasks need, so a worker lost can take the last copy with it, and a task
    submitted after that is cancelled for "lost dependencies" (:func:`lost_dependencies`).
    :meth:`future` scatters the course again whenever its copy is not there.
    """

    def __init__(self, client: Any, course: "Course") -> None:
        self.client, self.course, self._future = client, course, None

    def future(self) -> Any:
        """The course's future on the workers: the last one scattered, or a new one where
        that one is lost (or cancelled), or where a task that needed it was cancelled for it
        (:meth:`lost`)."""
        if self._future is None or self._future.status != "finished":
            self._future = self.client.scatter(self.course, broadcast=True, hash=False)
        return self._future

    def lost(self) -> None:
        """A task that needed the course was cancelled for it (:func:`lost_dependencies`):
        scatter it anew for the next one, even where this client has not heard yet that
        its copy is gone (its future may still say "finished")."""
        self._future = None


#: Why the scheduler cancels a task whose input went with a lost worker: when it is
#: submitted ("lost dependencies", ``Scheduler.update_graph``), or while it waited, once the
#: scheduler forgot it together with the scattered data it needed ("already forgotten",
#: ``_task_to_report_msg`` in ``distributed/scheduler.py``). The tiny class saw both: a
#: memory bomb took a worker, and with it the course's last copy and six waiting gradings.
COURSE_LOST_REASONS = ("lost dependencies", "already forgotten")


def lost_dependencies(err: BaseException) -> bool:
    """Whether a task was cancelled because data it needed was lost with a worker."""
    return getattr(err, "reason", None) in COURSE_LOST_REASONS


def read_tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its path relative to it (``/``-separated), sorted;
    ``{}`` when there is no such folder. Jupyter's checkpoints are left out."""
    if not folder.is_dir():
        return {}
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".ipynb_checkpoints" not in p.parts}


def write_tree(folder: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` (from :func:`read_tree`) under ``folder``."""
    for rel, data in files.items():
        path = folder / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            raise ValueError(f"refusing to write {rel!r} outside {folder}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def digest(*trees: dict[str, bytes], extra: str = "") -> str:
    """A SHA-256 of file trees and a string: equal for equal contents, names included."""
    h = hashlib.sha256(extra.encode())
    for tree in trees:
        for rel, data in tree.items():
            h.update(rel.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
        h.update(b"\1")
    return h.hexdigest()


@dataclass(frozen=True)
class Course:
    """What a worker needs to grade any submission of the class: sent once per worker."""

    gradebook: bytes  # the assignments registered by nbgrader, no student in it
    release: dict[str, dict[str, bytes]]  # assignment -> its release (the inspection compares with it)
    source: dict[str, dict[str, bytes]]  # assignment -> the instructor's files (nbgrader copies the extras)

    @classmethod
    def from_registration(cls, registered: Path, source: Path, names: list[str]) -> "Course":
        """The course from a folder where :func:`~feedgpu.workflows.grading.submission.register_assignments`
        ran on an empty gradebook, for the assignments ``names``."""
        return cls((registered / "gradebook.db").read_bytes(),
                   {name: read_tree(registered / "release" / name) for name in names},
                   {name: read_tree(source / name) for name in names})


@dataclass(frozen=True)
class Submission:
    """One student's assignment, as it travels to a worker."""

    student: str
    assignment: str
    files: dict[str, bytes]
    fingerprint: str  # the files, the instructor's assignment and the grading settings


@dataclass
class Graded:
    """What comes back from a worker: the result, and the notebooks nbgrader wrote (with
    their outputs and grades; none when grading failed)."""

    result: object  # submission.Result
    autograded: dict[str, bytes]
    worker: str  # the host and Dask worker that graded it


def grade_on_worker(course: Course, submission: Submission, limits: Limits, cell_timeout: float) -> Graded:
    """Grade ``submission`` here, in a scratch folder: the task that runs on a worker.

    First it stops what a grading on this machine left running when its worker died
    (:func:`~feedgpu.workflows.grading.sandbox.reap_orphans`).
    """

    reap_orphans()
    name, student = submission.assignment, submission.student
    with tempfile.TemporaryDirectory(prefix="feedgpu-grade-") as tmp:
        workdir, incoming, source = Path(tmp) / "grading", Path(tmp) / "incoming", Path(tmp) / "source"
        workdir.mkdir()
        (workdir / "gradebook.db").write_bytes(course.gradebook)
        write_tree(workdir / "release" / name, course.release[name])
        write_tree(source / name, course.source[name])
        write_tree(incoming / student / name, submission.files)
        result = grade_one(workdir, incoming, student, name, limits, cell_timeout, source)
        autograded = read_tree(workdir / "autograded" / student / name)
    return Graded(result, autograded, _where())


def _where() -> str:
    """This worker, as ``host (address)``: the host when no Dask worker runs this."""
    try:
        from distributed import get_worker

        return f"{socket.gethostname()} ({get_worker().address})"
    except (ImportError, ValueError):
        return socket.gethostname()


@contextmanager
def open_client(jobs: int = 1, scheduler: str | None = None) -> Iterator:
    """A Dask ``Client``: of a new local cluster of ``jobs`` worker processes, or of the
    running cluster whose scheduler is at ``scheduler`` (``tcp://HOST:PORT``).

    The local workers run one task each, with no memory limit of Dask's own (the sandbox
    limits each grading) and no dashboard; a worker that dies is started again by its
    nanny, and its task goes to a worker that lives.
    """
    import dask
    from distributed import Client, LocalCluster

    if scheduler:
        with Client(scheduler, timeout="15s") as client:
            yield client
        return
    with dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES}):
        with LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True, memory_limit=0,
                          dashboard_address=None, silence_logs=logging.ERROR) as cluster, \
                Client(cluster) as client:
            yield client
