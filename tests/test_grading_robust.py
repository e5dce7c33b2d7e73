"""Grading a class that cannot be stopped or fooled: real nbgrader, real broken submissions.

The submissions are of a small fixture assignment made for the purpose,
``tests/fixtures/source/tiny/tiny.ipynb`` (two answers with visible and hidden tests, a
test cell that starts DataLoader workers, a written answer graded by hand), so each one
costs seconds where a course notebook costs minutes; the course's own notebooks are
graded once per session elsewhere (``course_grading``). One class of good, broken and
hostile submissions is graded once (``tiny_class``) with small limits; each test then
checks one behaviour in the grades, the notes, the flags and the process table. A second
run, with the network unavailable, must give the same scores and keep the hand grades.

No test here bounds a wall-clock time: a limit that fired is read from the reason it
gives, not from how long the grading took.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import psutil
import pytest

from feedgpu.workflows.grading import grade
from feedgpu.workflows.grading.sandbox import REGISTRY
from grading_fixtures import (
    FIXTURE_SOURCE,
    Cluster,
    graded_losing_a_worker,
    SMALL_CELL_TIMEOUT,
    SMALL_LIMITS,
    SPAWN_CELL,
    TINY,
    cell,
    grade_id,
    graded_test_ids,
    is_answer,
    one_core,
    own_tests,
    points_by_test,
    student_version,
    with_cell_after,
    write_submission,
)

SOLUTION = FIXTURE_SOURCE / TINY / f"{TINY}.ipynb"
LIMITS, CELL_TIMEOUT = SMALL_LIMITS, SMALL_CELL_TIMEOUT
LOST = "ada_good"  # the student whose worker dies in the middle of the grading

pytestmark = pytest.mark.grading

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

# A laptop with one core, and macOS or Windows (spawn): the course's way of keeping
# DataLoader's "more workers than cores" warning out of the test cells must hold there.
ONE_CORE_SPAWN = SPAWN_CELL + "\n" + one_core()
# One core without that care: the warning reaches the test cell that starts workers.
ONE_CORE_WARNS = "import warnings\nwarnings.resetwarnings()\n" + one_core()
WORKER_TEST = "test_count_batches_with_workers"
# A notebook that leaves its clean-up to the end of its kernel, which a grading kills.
TEMP_FILES = ("import atexit, shutil, tempfile\nLEFT = tempfile.mkdtemp(prefix='hal-')\n"
              "atexit.register(shutil.rmtree, LEFT)\nprint('temporary folder:', LEFT)")
STUBBED = "count_batches"  # the answer that one student leaves as released


@pytest.fixture(scope="module")
def tiny_class(tmp_path_factory, tiny_release):
    """Build the class, grade it once; return what the tests look at."""
    solution = nbformat.read(SOLUTION, 4)
    released = nbformat.read(tiny_release, 4)
    good = student_version(solution, released)
    first_answer = next(grade_id(c) for c in solution.cells if is_answer(c))
    subs = tmp_path_factory.mktemp("class") / "submitted"
    books = {"ada_good": good, "bob_untouched": released,
             "fay_one_core_spawn": with_cell_after(good, "imports", ONE_CORE_SPAWN),
             "gil_one_core_warns": with_cell_after(good, "config", ONE_CORE_WARNS),
             "hal_temp_files": with_cell_after(good, "config", TEMP_FILES)}
    for name, code in BAD.items():
        books[f"bad_{name}"] = with_cell_after(good, "config", code)
    # carol edits, unlocks, renames and deletes test cells
    carol = nbformat.from_dict(good)
    tests = graded_test_ids(solution)
    assert len(tests) >= 4, f"the fixture needs 4 test cells to tamper with, has {tests}"
    cell(carol, tests[0]).source = "pass  # I trust my code"
    cell(carol, tests[1]).metadata["nbgrader"]["locked"] = False
    cell(carol, tests[2]).metadata["nbgrader"]["grade_id"] = "my_own_test"
    carol.cells.remove(cell(carol, tests[3]))
    books["carol_edits_tests"] = carol
    books["dave_tamper"] = with_cell_after(good, first_answer, TAMPER)
    stubbed = nbformat.from_dict(good)  # one answer left as released, the other solved
    cell(stubbed, STUBBED).source = cell(released, STUBBED).source
    books[f"stub_{STUBBED}"] = stubbed
    for student, nb in books.items():
        write_submission(subs, student, TINY, nb)
    (subs / "erin_broken" / TINY).mkdir(parents=True)  # not a notebook at all
    (subs / "erin_broken" / TINY / f"{TINY}.ipynb").write_text('{"cells": [ <<<<<<< HEAD')
    workdir = subs.parent / "grading"
    # On a Dask cluster of three workers that join by address, as machines would; the one
    # that grades ada_good is killed as it starts (a machine lost), so two grade the rest,
    # two at a time as the session grading of the course does, each in its own sandbox.
    with Cluster(subs.parent, workers=3) as cluster:
        results, killed = graded_losing_a_worker(cluster, LOST, lambda: grade.grade_class(
            subs, workdir, LIMITS, CELL_TIMEOUT, progress=False, source=FIXTURE_SOURCE, scheduler=cluster.address))
    return {"subs": subs, "workdir": workdir, "results": {r.student: r for r in results},
            "rows": _csv_rows(workdir), "csv": (workdir / grade.CSV_NAME).read_text(),
            "solution": solution, "tests": tests, "killed": killed, "listed": results}


def _code(row) -> float:
    return float(row["code_score"])


def test_every_student_is_in_the_csv(tiny_class):
    assert set(tiny_class["rows"]) == {p.name for p in tiny_class["subs"].iterdir()}, tiny_class["rows"].keys()


def test_good_submission_gets_full_marks_and_untouched_zero(tiny_class):
    ada, bob = tiny_class["rows"]["ada_good"], tiny_class["rows"]["bob_untouched"]
    full = sum(points_by_test(tiny_class["solution"]).values())
    assert ada["status"] == "graded" and _code(ada) == float(ada["max_code_score"]) == full > 0, ada
    assert ada["needs_manual_grade"] == "True", f"the written answer is left to grade by hand: {ada}"
    assert not ada["notes"] and not ada["flags"], f"nothing to note on a good submission: {ada}"
    assert bob["status"] == "graded" and _code(bob) == 0 and float(bob["max_code_score"]) == full, bob


@pytest.mark.parametrize("name", sorted(BAD))
def test_broken_submission_is_graded_or_says_why(tiny_class, name):
    row = tiny_class["rows"][f"bad_{name}"]
    if row["status"] == "graded":  # the grader got past the bad cell: the answers still count
        assert _code(row) == float(row["max_code_score"]) > 0, row
    else:
        assert row["status"] == "failed" and row["reason"], f"a failure must say why: {row}"
        assert not (tiny_class["workdir"] / "feedback" / f"bad_{name}").exists(), "no feedback for a failure"


def test_an_answer_left_out_loses_exactly_its_own_points(tiny_class):
    row = tiny_class["rows"][f"stub_{STUBBED}"]
    solution = tiny_class["solution"]
    own = own_tests(solution.cells)[STUBBED]
    points = points_by_test(solution)
    assert own, f"{STUBBED} has tests of its own"
    assert row["status"] == "graded" and _code(row) == sum(points.values()) - sum(points[t] for t in own), \
        (own, row)


def test_an_unreadable_notebook_fails_alone_and_says_why(tiny_class):
    row = tiny_class["rows"]["erin_broken"]
    assert row["status"] == "failed" and f"{TINY}.ipynb is not a readable notebook" in row["reason"], \
        f"a failure must say why: {row}"
    assert tiny_class["rows"]["ada_good"]["status"] == "graded", "the others are graded all the same"


def test_memory_bomb_and_fork_bomb_are_stopped_by_their_limits(tiny_class):
    rows = tiny_class["rows"]
    assert "memory limit" in rows["bad_memory_bomb"]["reason"], rows["bad_memory_bomb"]
    assert f"processes (limit {LIMITS.max_processes})" in rows["bad_fork_bomb"]["reason"], rows["bad_fork_bomb"]
    bomb = tiny_class["results"]["bad_memory_bomb"]  # its peak is in status.json, not in the grades
    assert bomb.peak_memory_mb > LIMITS.memory_mb, bomb


def test_dead_kernel_and_deaf_loop_say_why(tiny_class):
    rows = tiny_class["rows"]
    assert "kernel died" in rows["bad_exit_kernel"]["reason"], rows["bad_exit_kernel"]
    assert "did not stop when interrupted" in rows["bad_swallow_interrupt"]["reason"], \
        rows["bad_swallow_interrupt"]


def test_a_submission_that_could_not_be_graded_scores_zero_beside_its_reason(tiny_class):
    """A kernel killed by the student's code (``os._exit``) stops nbgrader, which then
    records no grade: the row says why, scores 0 of the assignment's points, and the
    grades CSV has no empty score anywhere."""
    rows = tiny_class["rows"]
    good = rows["ada_good"]
    dead = rows["bad_exit_kernel"]
    assert dead["status"] == "failed" and "kernel died" in dead["reason"], dead
    for field in ("score", "code_score"):
        assert float(dead[field]) == 0.0, (field, dead)
    for field in ("max_score", "max_code_score"):
        assert float(dead[field]) == float(good[field]) > 0, (field, dead, good)
    assert "kills or exits the kernel" in dead["flags"], f"the exit is flagged too: {dead['flags']}"
    scores = ("score", "max_score", "code_score", "max_code_score", "needs_manual_grade")
    empty = {student: [f for f in scores if row[f] == ""] for student, row in rows.items()}
    assert not any(empty.values()), f"empty score cells in grades.csv: {empty}"


@pytest.mark.parametrize("name", ["loop_forever", "hung_worker"])
def test_a_cell_that_hangs_costs_that_cell_not_the_submission(tiny_class, name):
    row = tiny_class["rows"][f"bad_{name}"]
    assert row["status"] == "graded" and _code(row) == float(row["max_code_score"]), row
    # the words of feedgpu.workflows.grading.execution.OneRunawayExecute: nbgrader runs the cells with it
    assert f"ran past its time limit of {CELL_TIMEOUT} s" in row["notes"], row
    assert "time limit" not in tiny_class["rows"]["ada_good"]["notes"], "no false alarm"


def test_edited_deleted_renamed_tests_are_restored_and_reported(tiny_class):
    row, tests = tiny_class["rows"]["carol_edits_tests"], tiny_class["tests"]
    assert _code(row) == float(row["max_code_score"]) > 0, f"graded by the instructor's tests: {row}"
    for needle in (f"{tests[0]} was edited", f"{tests[1]} was unlocked", "'my_own_test'",
                   f"{tests[2]} was missing", f"{tests[3]} was missing"):
        assert needle in row["notes"], (needle, row["notes"])


def test_tamper_attempt_is_flagged(tiny_class):
    row = tiny_class["rows"]["dave_tamper"]
    assert "input transformers" in row["flags"], row
    assert not tiny_class["rows"]["ada_good"]["flags"], "no false alarm on an honest submission"


def test_one_core_and_spawn_still_give_full_marks(tiny_class):
    """Students on macOS/Windows run with spawn and small machines have one core: the
    solution still gets every point, and no test cell writes to stderr."""
    row = tiny_class["rows"]["fay_one_core_spawn"]
    assert row["status"] == "graded" and _code(row) == float(row["max_code_score"]), row
    assert not row["notes"], f"nothing to note: {row}"
    graded = nbformat.read(tiny_class["workdir"] / "autograded" / "fay_one_core_spawn" / TINY / f"{TINY}.ipynb", 4)
    printed = "".join(o.get("text", "") for o in cell(graded, "config").outputs)
    assert "start method: spawn" in printed and "usable cores: 1" in printed, \
        f"the notebook ran with spawn on one core: {printed!r}"


def test_what_a_notebook_writes_to_the_temporary_folder_is_removed(tiny_class):
    """The kernel is killed after the last cell, so a notebook's own clean-up never runs: its
    temporary files went to a folder of that grading's own, removed afterwards."""
    row = tiny_class["rows"]["hal_temp_files"]
    assert row["status"] == "graded" and _code(row) == float(row["max_code_score"]), row
    graded = nbformat.read(tiny_class["workdir"] / "autograded" / "hal_temp_files" / TINY / f"{TINY}.ipynb", 4)
    printed = next(o.get("text", "") for c in graded.cells for o in c.get("outputs", [])
                   if "temporary folder:" in o.get("text", ""))
    left = Path(printed.split("temporary folder:")[1].strip())
    assert left.parent != Path(tempfile.gettempdir()), f"the notebook wrote to the machine's own {left.parent}"
    assert not left.parent.exists(), f"{left.parent} was left behind by the grading"


def test_a_test_cell_that_writes_to_stderr_loses_its_points_and_says_why(tiny_class):
    """nbgrader scores a test cell with stderr output zero; the grader says which and why."""
    row = tiny_class["rows"]["gil_one_core_warns"]
    points = points_by_test(tiny_class["solution"])
    assert row["status"] == "graded" and _code(row) == sum(points.values()) - points[WORKER_TEST], row
    assert f"{WORKER_TEST} passed but scored 0 because it wrote to stderr" in row["notes"], row
    assert "This DataLoader will create" in row["notes"], f"the note quotes the warning: {row['notes']}"


def test_feedback_for_every_graded_student_made_once(tiny_class):
    workdir = tiny_class["workdir"]
    for student, row in tiny_class["rows"].items():
        html = workdir / "feedback" / student / TINY / f"{TINY}.html"
        assert html.is_file() == (row["status"] == "graded"), (student, row["status"])
    assert not [r for r in tiny_class["results"].values() if "no feedback" in "; ".join(r.notes)], \
        "every graded submission got its feedback"


def test_status_is_saved_for_every_submission(tiny_class):
    status = json.loads((tiny_class["workdir"] / grade.STATUS_NAME).read_text())
    assert set(status) == {f"{s}/{TINY}" for s in tiny_class["rows"]}, sorted(status)
    for key, saved in status.items():
        assert saved["status"] == tiny_class["rows"][key.split("/")[0]]["status"], (key, saved)


def test_process_table_is_clean_afterwards(tiny_class):
    workdir = str(tiny_class["workdir"])
    left = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.cwd().startswith(workdir) or workdir in " ".join(p.info["cmdline"] or []):
                left.append((p.pid, p.info["cmdline"]))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    assert left == [], left


def test_a_worker_lost_in_the_middle_costs_one_more_grading_and_nothing_else(tiny_class):
    """The worker grading ada_good was killed: ada was graded again by another, recorded
    once (one row, one submission in the gradebook, full marks), and nothing that the dead
    worker's grading started is left running."""
    from nbgrader.api import Gradebook

    assert tiny_class["killed"], f"no worker was seen grading {LOST}"
    listed = [r.student for r in tiny_class["listed"]]
    assert sorted(listed) == sorted(set(listed)) == sorted(tiny_class["rows"]), "each submission once"
    lost = tiny_class["results"][LOST]
    assert lost.status == "graded" and _code(tiny_class["rows"][LOST]) == float(lost.max_code_score), lost
    with Gradebook(f"sqlite:///{tiny_class['workdir'] / 'gradebook.db'}") as gb:
        ids = [sub.student.id for sub in gb.find_assignment(TINY).submissions]
    assert len(ids) == len(set(ids)) and set(ids) <= set(tiny_class["rows"]), ids
    left = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
            if f"--student={LOST}" in (p.info["cmdline"] or [])]
    assert left == [], f"the dead worker's grading still runs: {left}"
    orphaned = [p.name for p in (sorted(REGISTRY.glob("*.json")) if REGISTRY.is_dir() else [])
                if not psutil.pid_exists(int(p.name.split("-")[0]))]  # other graders may run meanwhile
    assert orphaned == [], f"the class's end stopped what the dead worker's grading had started: {orphaned}"


def _csv_rows(workdir: Path) -> dict[str, dict]:
    with (workdir / grade.CSV_NAME).open() as f:
        return {r["student"]: r for r in csv.DictReader(f)}


MISSING = ("carol_edits_tests",)  # the grade never saved: the run stopped first


@pytest.fixture(scope="module")
def resumed(tiny_class, tmp_path_factory) -> dict:
    """The class's working folder as a run stopped half-way would leave it (no grade saved
    for :data:`MISSING`), graded again by ``feedgpu-grade --jobs 1``: the one whose tests were
    edited, renamed and deleted, whose row (restored cells in its notes) must come out the same."""
    workdir = tmp_path_factory.mktemp("resumed") / "grading"
    shutil.copytree(tiny_class["workdir"], workdir)
    status = json.loads((workdir / grade.STATUS_NAME).read_text())
    for student in MISSING:
        del status[f"{student}/{TINY}"]
    (workdir / grade.STATUS_NAME).write_text(json.dumps(status))
    (workdir / grade.CSV_NAME).unlink()
    results = grade.grade_class(tiny_class["subs"], workdir, LIMITS, CELL_TIMEOUT, progress=False,
                                source=FIXTURE_SOURCE, jobs=1)
    return {"workdir": workdir, "results": results}


def test_a_run_stopped_half_way_grades_only_what_is_missing_on_one_worker_as_on_many(tiny_class, resumed):
    """Run again, the grading grades the submission with no saved grade, on one local
    worker, and keeps the others: the CSV is byte for byte the one the cluster of machines
    wrote (scores, status, reasons, notes, flags, order). Once nothing is missing, a run
    grades nothing and does not even register the assignment again."""
    assert sorted(r.student for r in resumed["results"]) == sorted(MISSING), resumed["results"]
    assert (resumed["workdir"] / grade.CSV_NAME).read_text() == tiny_class["csv"]
    gradebook = resumed["workdir"] / "gradebook.db"
    before = gradebook.stat().st_mtime_ns
    assert grade.grade_class(tiny_class["subs"], resumed["workdir"], LIMITS, CELL_TIMEOUT, progress=False,
                             source=FIXTURE_SOURCE) == [], "graded again although nothing was missing"
    assert gradebook.stat().st_mtime_ns == before, "nothing to grade, nothing written to the gradebook"


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
        for g in gb.find_submission_notebook(TINY, TINY, student).grades:
            if g.auto_score is None:  # a cell nbgrader cannot grade: a written answer
                g.manual_score = g.max_score - 0.5
                given[g.name] = g.manual_score
        gb.db.commit()
    return given


def _grade_cli(*args: str, prefix: list[str] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "feedgpu.workflows.grading.grade", *args],
                          capture_output=True, text=True, timeout=600)


def test_second_run_gives_the_same_scores_offline_and_keeps_every_grade(tiny_class):
    """Grading again (after a fix, say) changes no score, drops no student who is not
    graded again, and keeps the written answers graded by hand in between. Without the
    network where this machine can make a network namespace."""
    workdir = tiny_class["workdir"]
    hand = _give_hand_grades(workdir, "ada_good")
    assert hand, "the fixture has a written answer to grade by hand"
    prefix = _no_network_prefix()
    again = tiny_class["subs"].parent / "again"
    regraded = ("ada_good", "bob_untouched")
    for student in regraded:
        shutil.copytree(tiny_class["subs"] / student, again / student)
    proc = _grade_cli(str(again), "--workdir", str(workdir), "--source", str(FIXTURE_SOURCE),
                      "--cell-timeout", str(CELL_TIMEOUT), "--memory-mb", str(LIMITS.memory_mb),
                      "--timeout", str(LIMITS.wall_s), "--max-processes", str(LIMITS.max_processes),
                      "--jobs", "2", "--regrade", prefix=prefix)
    assert proc.returncode == 0, proc.stderr[-2000:]
    if prefix:
        offline = subprocess.run([*prefix, sys.executable, "-c",
                                  "import socket; socket.getaddrinfo('pypi.org', 443)"],
                                 capture_output=True, timeout=60)
        assert offline.returncode != 0, "the second run really had no network"
    assert f"graded {len(regraded)} of {len(regraded)}" in proc.stdout, proc.stdout
    with (workdir / grade.CSV_NAME).open() as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    assert set(rows) == set(tiny_class["rows"]), "no earlier grade is lost"
    for student in regraded:
        assert rows[student]["code_score"] == tiny_class["rows"][student]["code_score"], student
    ada_before, ada_after = tiny_class["rows"]["ada_good"], rows["ada_good"]
    assert float(ada_after["score"]) == float(ada_before["code_score"]) + sum(hand.values()), (
        f"the hand grades {hand} must survive the regrade and count: {ada_after}")
    for student in regraded:
        assert (workdir / "feedback" / student / TINY / f"{TINY}.html").is_file(), f"feedback for {student} again"
    if not prefix:
        pytest.skip("graded again, but with the network: cannot make a network namespace here "
                    "(needs unshare and root)")


def test_report_only_rewrites_the_csv_from_the_gradebook(tiny_class):
    csv_path = tiny_class["workdir"] / grade.CSV_NAME
    before = csv_path.read_text()
    csv_path.unlink()
    proc = _grade_cli(str(tiny_class["subs"]), "--workdir", str(tiny_class["workdir"]), "--report-only")
    assert proc.returncode == 0, proc.stderr[-1000:]
    assert csv_path.read_text() == before, "the same rows, read back from the gradebook"


def test_a_missing_source_folder_is_an_error_that_names_it(tmp_path):
    (tmp_path / "submitted").mkdir()
    proc = _grade_cli(str(tmp_path / "submitted"), "--workdir", str(tmp_path / "grading"),
                      "--source", str(tmp_path / "no_such_source"))
    assert proc.returncode == 2 and "no_such_source" in proc.stderr, (proc.returncode, proc.stderr[-1000:])
