"""Grading a class that cannot be stopped or fooled: real nbgrader, real broken submissions.

One class of deliberately broken submissions of ``00_orientation`` is graded once (module
fixture) with small limits; each test then checks one behaviour in the grades, the
notes, the flags and the process table. A second run, with the network unavailable,
must give the same scores.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from feedgpu.workflows import grade
from feedgpu.workflows.sandbox import Limits

ROOT = Path(__file__).resolve().parents[1]
NB = "00_orientation"
SOLUTION = ROOT / "solutions" / NB / f"{NB}.ipynb"
RELEASE = ROOT / "notebooks" / NB / f"{NB}.ipynb"
LIMITS = Limits(wall_s=150, memory_mb=3500, max_processes=24)
CELL_TIMEOUT = 20

pytestmark = pytest.mark.slow


def _grade_ids(nb) -> list[str]:
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if "nbgrader" in c.metadata]


def _cell(nb, grade_id: str):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _solution_ids(nb) -> list[str]:
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")]


def _tests_after(nb, solution_id: str) -> dict[str, float]:
    """Points of the test cells between a solution cell and the next solution cell."""
    ids, out, inside = _solution_ids(nb), {}, False
    for c in nb.cells:
        meta = c.metadata.get("nbgrader", {})
        if meta.get("grade_id") == solution_id:
            inside = True
        elif meta.get("grade_id") in ids or (meta.get("solution") and c.cell_type == "markdown"):
            inside = False
        elif inside and meta.get("grade") and not meta.get("solution"):
            out[meta["grade_id"]] = meta["points"]
    return out


def _with_cell_after(nb, grade_id: str, source: str):
    """A copy of ``nb`` with a new ungraded code cell right after the cell ``grade_id``."""
    nb = nbformat.from_dict(nb)
    index = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(source))
    return nb


def _answer_ids(nb) -> list[str]:
    """Every cell a student fills in: code answers and written (markdown) answers."""
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution")]


def _student_version(solution, release: Path = RELEASE) -> "nbformat.NotebookNode":
    """The solution as a student would hand it in: answers filled in (the written ones
    too, so they are left to grade by hand), released test cells."""
    released = nbformat.read(release, 4)
    nb = nbformat.from_dict(released)
    answers = set(_answer_ids(solution))
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            src = _cell(solution, gid).source
            cell.source = "\n".join(line for line in src.splitlines()
                                    if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))
    return nb


BAD = {
    "loop_forever": "while True:\n    pass",
    "swallow_interrupt": ("import time\nwhile True:\n    try:\n        time.sleep(0.1)\n"
                          "    except KeyboardInterrupt:\n        pass"),
    "memory_bomb": "hog = []\nwhile True:\n    hog.append(bytearray(200 * 2**20))",
    "exit_kernel": "import os\nos._exit(1)",
    "fork_bomb": ("from torch.utils.data import DataLoader\nfrom feedgpu.workloads import SleepDataset\n"
                  "for _ in DataLoader(SleepDataset(4096, 0.5), num_workers=64, batch_size=1):\n    pass"),
    "hung_worker": ("from torch.utils.data import DataLoader\nfrom feedgpu.workloads import SleepDataset\n"
                    "for _ in DataLoader(SleepDataset(8, 10**6), num_workers=2, batch_size=1):\n    pass"),
}

TAMPER = ("ip = get_ipython()\n"
          "ip.input_transformers_post.append(lambda lines: [] if 'assert' in ''.join(lines) else lines)")


@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    """Build the class, grade it once; yield what the tests look at."""
    solution = nbformat.read(SOLUTION, 4)
    good = _student_version(solution)
    first_answer = _solution_ids(solution)[0]
    subs = tmp_path_factory.mktemp("class") / "submitted"
    books = {"ada_good": good, "bob_untouched": nbformat.read(RELEASE, 4)}
    for name, code in BAD.items():
        books[f"bad_{name}"] = _with_cell_after(good, "config", code)
    for sid in _solution_ids(solution):  # each answer stubbed out alone
        stubbed = nbformat.from_dict(good)
        _cell(stubbed, sid).source = _cell(nbformat.read(RELEASE, 4), sid).source
        books[f"stub_{sid}"] = stubbed
    # carol edits, unlocks, renames and deletes test cells
    carol = nbformat.from_dict(good)
    tests = [g for g in _grade_ids(carol) if g.startswith("test_")]
    _cell(carol, tests[0]).source = "pass  # I trust my code"
    _cell(carol, tests[1]).metadata["nbgrader"]["locked"] = False
    _cell(carol, tests[2]).metadata["nbgrader"]["grade_id"] = "my_own_test"
    carol.cells.remove(_cell(carol, tests[3]))
    books["carol_edits_tests"] = carol
    books["dave_tamper"] = _with_cell_after(good, first_answer, TAMPER)
    for student, nb in books.items():
        (subs / student / NB).mkdir(parents=True)
        nbformat.write(nb, subs / student / NB / f"{NB}.ipynb")
    workdir = subs.parent / "grading"
    start = time.time()
    results = grade.grade_class(subs, workdir, LIMITS, CELL_TIMEOUT, progress=False)
    seconds = time.time() - start
    rows = {r["student"]: r for r in csv.DictReader((workdir / grade.CSV_NAME).open())}
    return {"subs": subs, "workdir": workdir, "results": {r.student: r for r in results},
            "rows": rows, "seconds": seconds, "solution": solution, "tests": tests}


def test_every_student_is_in_the_csv(klass):
    assert set(klass["rows"]) == {p.name for p in klass["subs"].iterdir()}, klass["rows"].keys()


def test_good_submission_gets_full_marks_and_untouched_zero(klass):
    ada, bob = klass["rows"]["ada_good"], klass["rows"]["bob_untouched"]
    assert ada["status"] == "graded" and float(ada["code_score"]) == float(ada["max_code_score"]) > 0, ada
    assert bob["status"] == "graded" and float(bob["code_score"]) == 0, bob


def test_each_stubbed_answer_loses_exactly_its_own_points(klass):
    solution = klass["solution"]
    full = float(klass["rows"]["ada_good"]["max_code_score"])
    for sid in _solution_ids(solution):
        row = klass["rows"][f"stub_{sid}"]
        own = sum(_tests_after(solution, sid).values())
        assert own > 0, f"{sid} has no tests of its own"
        assert float(row["code_score"]) == full - own, (sid, row["code_score"], full, own)


@pytest.mark.parametrize("name", sorted(BAD))
def test_broken_submission_is_graded_within_bounds(klass, name):
    row = klass["rows"][f"bad_{name}"]
    assert float(row["seconds"]) < LIMITS.wall_s + 30, row
    if row["status"] == "graded":  # the grader got past the bad cell: the answers still count
        assert float(row["code_score"]) == float(row["max_code_score"]), row
    else:
        assert row["reason"], f"a failure must say why: {row}"


def test_memory_bomb_and_fork_bomb_are_stopped_by_their_limits(klass):
    rows = klass["rows"]
    assert "memory limit" in rows["bad_memory_bomb"]["reason"], rows["bad_memory_bomb"]
    assert "processes (limit" in rows["bad_fork_bomb"]["reason"], rows["bad_fork_bomb"]


def test_dead_kernel_and_deaf_loop_say_why(klass):
    rows = klass["rows"]
    assert "kernel died" in rows["bad_exit_kernel"]["reason"], rows["bad_exit_kernel"]
    assert "did not stop when interrupted" in rows["bad_swallow_interrupt"]["reason"], \
        rows["bad_swallow_interrupt"]


def test_infinite_loop_costs_one_cell_not_the_submission(klass):
    row = klass["rows"]["bad_loop_forever"]
    assert row["status"] == "graded" and "limit per cell" in row["notes"], row
    assert "limit per cell" not in klass["rows"]["ada_good"]["notes"], "no false alarm"


def test_edited_deleted_renamed_tests_are_restored_and_reported(klass):
    row, tests = klass["rows"]["carol_edits_tests"], klass["tests"]
    assert float(row["code_score"]) == float(row["max_code_score"]), "graded by the instructor's tests"
    for needle in (f"{tests[0]} was edited", f"{tests[1]} was unlocked", "'my_own_test'",
                   f"{tests[2]} was missing", f"{tests[3]} was missing"):
        assert needle in row["notes"], (needle, row["notes"])


def test_tamper_attempt_is_flagged(klass):
    row = klass["rows"]["dave_tamper"]
    assert "input transformers" in row["flags"], row
    assert not klass["rows"]["ada_good"]["flags"], "no false alarm on an honest submission"


def test_feedback_for_every_graded_student(klass):
    for student, row in klass["rows"].items():
        html = klass["workdir"] / "feedback" / student / NB / f"{NB}.html"
        assert html.is_file() == (row["status"] == "graded"), (student, row["status"])


def test_process_table_is_clean_afterwards(klass):
    workdir = str(klass["workdir"])
    left = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.cwd().startswith(workdir) or workdir in " ".join(p.info["cmdline"] or []):
                left.append((p.pid, p.info["cmdline"]))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    assert left == [], left


def _no_network_prefix() -> list[str]:
    """A command prefix that runs without network: a new network namespace with only
    loopback up (Jupyter kernels talk to nbgrader over 127.0.0.1)."""
    prefix = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"']
    try:
        probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return prefix if probe.returncode == 0 else []


def _give_hand_grades(workdir: Path, student: str) -> dict[str, float]:
    """Grade ``student``'s written answers by hand, as the formgrader would: full points
    minus a half. Returns the manual score per grade id."""
    from nbgrader.api import Gradebook

    given = {}
    with Gradebook(f"sqlite:///{workdir / 'gradebook.db'}") as gb:
        for g in gb.find_submission_notebook(NB, NB, student).grades:
            if g.auto_score is None:  # a cell nbgrader cannot grade: a written answer
                g.manual_score = g.max_score - 0.5
                given[g.name] = g.manual_score
        gb.db.commit()
    return given


def test_second_run_gives_the_same_scores_offline_and_keeps_every_grade(klass):
    """Grading again (after a fix, say) changes no score, drops no student who is not
    graded again, and keeps the written answers graded by hand in between. Without the
    network where this machine can make a network namespace."""
    workdir = klass["workdir"]
    hand = _give_hand_grades(workdir, "ada_good")
    assert hand, "00 has a written answer to grade by hand"
    prefix = _no_network_prefix()
    subs = klass["subs"]
    again = subs.parent / "again"
    for student in ("ada_good", "bob_untouched", "carol_edits_tests"):
        shutil.copytree(subs / student, again / student)
    proc = subprocess.run([*prefix, sys.executable, str(ROOT / "scripts" / "grade.py"), str(again),
                           "--workdir", str(workdir), "--cell-timeout", str(CELL_TIMEOUT),
                           "--memory-mb", str(LIMITS.memory_mb)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    if prefix:
        offline = subprocess.run([*prefix, sys.executable, "-c",
                                  "import socket; socket.getaddrinfo('pypi.org', 443)"],
                                 capture_output=True, timeout=60)
        assert offline.returncode != 0, "the second run really had no network"
    assert "graded 3 of 3" in proc.stdout, proc.stdout
    rows = {r["student"]: r for r in csv.DictReader((workdir / grade.CSV_NAME).open())}
    assert set(rows) == set(klass["rows"]), "no earlier grade is lost"
    for student in ("ada_good", "bob_untouched", "carol_edits_tests"):
        assert rows[student]["code_score"] == klass["rows"][student]["code_score"], student
    ada_before, ada_after = klass["rows"]["ada_good"], rows["ada_good"]
    assert float(ada_after["score"]) == float(ada_before["code_score"]) + sum(hand.values()), (
        f"the hand grades {hand} must survive the regrade and count: {ada_after}")
    if not prefix:
        pytest.skip("graded again, but with the network: cannot make a network namespace here "
                    "(needs unshare and root)")


def test_report_only_rewrites_the_csv_from_the_gradebook(klass):
    csv_path = klass["workdir"] / grade.CSV_NAME
    before = csv_path.read_text()
    csv_path.unlink()
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), str(klass["subs"]),
                           "--workdir", str(klass["workdir"]), "--report-only"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-1000:]
    assert csv_path.read_text() == before, "the same rows, read back from the gradebook"


def test_grader_with_spawn_gives_full_marks(tmp_path, monkeypatch):
    """Students on macOS/Windows run with spawn, the Linux grader with fork; here the grader
    runs with spawn as the default start method, and the solutions still get full marks."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import multiprocessing\nmultiprocessing.set_start_method('spawn', force=True)\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    subs = tmp_path / "submitted"
    for name in ("00_orientation", "01_dataset"):
        nb = _student_version(nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", 4),
                              ROOT / "notebooks" / name / f"{name}.ipynb")
        (subs / "eve_mac" / name).mkdir(parents=True)
        nbformat.write(nb, subs / "eve_mac" / name / f"{name}.ipynb")
    results = grade.grade_class(subs, tmp_path / "grading", LIMITS, 60, progress=False)
    for r in results:
        assert r.status == "graded" and r.code_score == r.max_code_score > 0, r
    graded = nbformat.read(tmp_path / "grading" / "autograded" / "eve_mac" / "01_dataset" / "01_dataset.ipynb", 4)
    printed = "".join(o.get("text", "") for c in graded.cells if c.cell_type == "code" for o in c.outputs)
    assert "spawn" in printed, "the notebook saw spawn as its start method"


@pytest.fixture
def one_core():
    """Run this test, and every process it starts, on a single core (as on a small
    JupyterHub pod or a container limited with cpusets)."""
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs os.sched_setaffinity (Linux)")
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@pytest.mark.parametrize("name", ["01_dataset", "03_prefetch_transfer", "04_augmentation"])
def test_one_core_grader_gives_full_marks(name, tmp_path, one_core):
    """These notebooks start DataLoader workers inside test cells. On one core PyTorch warns
    about more workers than cores, on stderr, and nbgrader scores a test cell with any
    stderr output zero: the notebooks must keep that warning out of their test cells."""
    subs = tmp_path / "submitted"
    nb = _student_version(nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", 4),
                          ROOT / "notebooks" / name / f"{name}.ipynb")
    (subs / "fay_one_core" / name).mkdir(parents=True)
    nbformat.write(nb, subs / "fay_one_core" / name / f"{name}.ipynb")
    # One core runs the whole notebook at about half speed: the default limits, not the
    # small ones of this file.
    (result,) = grade.grade_class(subs, tmp_path / "grading", Limits(), 120, progress=False)
    assert result.status == "graded" and result.code_score == result.max_code_score > 0, result
