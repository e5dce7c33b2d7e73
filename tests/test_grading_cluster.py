"""The parts of grading on a Dask cluster that need no nbgrader: what travels to a worker
and back, the fingerprint that decides what is graded again, and the README's SLURM
example. A class graded on a cluster that loses a worker, on one worker, and resumed is in
``test_grading_robust.py`` (the fixture class is graded there once).
"""

from __future__ import annotations

import pytest


# --------------------------------------------------------------------------- the parts, without nbgrader


def test_a_tree_travels_whole_and_cannot_write_outside_its_folder(tmp_path):
    from feedgpu.workflows.grading.cluster import read_tree, write_tree

    files = {"a.ipynb": b"{}", "sub/mod.py": b"x = 1\n", "empty.txt": b""}
    write_tree(tmp_path / "one", files)
    (tmp_path / "one" / ".ipynb_checkpoints").mkdir()
    (tmp_path / "one" / ".ipynb_checkpoints" / "a-checkpoint.ipynb").write_bytes(b"old")
    assert read_tree(tmp_path / "one") == dict(sorted(files.items()))
    assert read_tree(tmp_path / "missing") == {}
    for bad in ("../escape.py", "/etc/passwd", "sub/../../escape.py"):
        with pytest.raises(ValueError):
            write_tree(tmp_path / "two", {bad: b""})
    assert not (tmp_path / "escape.py").exists()


def test_the_fingerprint_changes_with_what_decides_a_grade():
    from feedgpu.workflows.grading.cluster import digest

    source, hand_in = {"tiny.ipynb": b"tests v1"}, {"tiny.ipynb": b"answers"}
    base = digest(source, hand_in, extra="tiny\0limits")
    assert base == digest(dict(source), dict(hand_in), extra="tiny\0limits"), "the same contents, the same print"
    assert base != digest({"tiny.ipynb": b"tests v2"}, hand_in, extra="tiny\0limits"), "the instructor fixed a test"
    assert base != digest(source, {"tiny.ipynb": b"answers!"}, extra="tiny\0limits"), "handed in again"
    assert base != digest(source, {**hand_in, "notes.py": b""}, extra="tiny\0limits"), "a file added"
    assert base != digest(source, {"other.ipynb": b"answers"}, extra="tiny\0limits"), "a file renamed"
    assert base != digest(source, hand_in, extra="tiny\0other limits"), "other limits"
    assert digest({"ab": b"c"}, {}) != digest({"a": b"bc"}, {}), "names and contents do not run together"


def test_the_course_is_scattered_again_once_its_copy_on_the_workers_is_gone():
    """Dask's memory manager keeps as few copies of a scattered key as its waiting tasks
    need, so a lost worker can take the course's last copy: the next submission would be
    cancelled for lost dependencies. The course is then scattered again."""
    import time

    from distributed import Client, LocalCluster
    from distributed.client import FutureCancelledError

    from feedgpu.workflows.grading.cluster import Course, CourseOnWorkers, lost_dependencies

    course = Course(b"registered", {"tiny": {"tiny.ipynb": b"{}"}}, {"tiny": {"tiny.ipynb": b"{}"}})
    with LocalCluster(n_workers=2, processes=False, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        on = CourseOnWorkers(client, course)
        first = on.future()
        assert on.future() is first, "scattered once while its copy is there"
        client.cancel(first)  # its copy gone, as with the last worker that held it
        deadline = time.monotonic() + 10
        while first.status == "finished" and time.monotonic() < deadline:
            time.sleep(0.01)
        again = on.future()
        assert again is not first and again.result() == course
        on.lost()  # a grading was cancelled for the course, before this client heard its copy went
        assert on.future() is not again, "a task cancelled for the course has it scattered anew"
    assert lost_dependencies(FutureCancelledError("grade-ada", "lost dependencies"))
    assert lost_dependencies(FutureCancelledError("grade-ada", "already forgotten")), \
        "a grading that waited while the course went is cancelled so (the tiny class, a fresh clone's run)"
    assert not lost_dependencies(FutureCancelledError("grade-ada", "unknown"))
    assert not lost_dependencies(RuntimeError("the notebook failed"))


def test_the_readme_slurm_example_makes_a_job_of_two_graders():
    """The README's dask-jobqueue example, up to submitting jobs: its job script starts two
    one-thread workers with the course's Python, and no nanny memory limit below the sandbox's."""
    import re

    from feedgpu.workflows import COURSE_ROOT

    text = (COURSE_ROOT / "README.md").read_text()
    example = re.search(r"```python\n(# graders\.py.*?)```", text, re.S)
    assert example, "the README has the SLURM example"
    code = example.group(1).split("cluster.scale(")[0]  # no sbatch here
    scope: dict = {}
    exec(compile(code, "graders.py", "exec"), scope)  # noqa: S102 (our own README)
    cluster = scope["cluster"]
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    assert str(COURSE_ROOT / ".venv" / "bin" / "python") in script or ".venv/bin/python" in script, script
    assert "distributed.cli.dask_worker" in script and "--nworkers 2" in script and "--nthreads 1" in script, script
    memory = re.search(r"--memory-limit ([\d.]+)GiB", script)
    assert memory and float(memory.group(1)) >= 4.0, f"each grader has room for a 4 GB sandbox: {script}"
