"""Every notebook's "Time needed" comes from one stated method (feedgpu.workflows.course.study_time)."""

from __future__ import annotations

import nbformat
import pytest

from feedgpu.workflows.course import study_time as st
from feedgpu.workflows.course.release import RELEASE

pytestmark = pytest.mark.unit

SOLUTIONS = RELEASE.parent / "solutions"
NAMES = sorted(p.name for p in SOLUTIONS.glob("[0-9][0-9]_*") if p.is_dir())


def _md(text, **nbgrader):
    cell = nbformat.v4.new_markdown_cell(text)
    if nbgrader:
        cell.metadata["nbgrader"] = nbgrader
    return cell


def _code(text, **nbgrader):
    cell = nbformat.v4.new_code_cell(text)
    if nbgrader:
        cell.metadata["nbgrader"] = nbgrader
    return cell


def _notebooks():
    """A release and its solution whose count is known by hand."""
    words = lambda n: " ".join(["word"] * n)  # noqa: E731
    task = dict(solution=True, grade=False, grade_id="f", locked=False, schema_version=3, task=False)
    reflection = dict(solution=True, grade=True, grade_id="reflection", points=3, locked=False, schema_version=3,
                      task=False)
    release = nbformat.v4.new_notebook(cells=[
        _md("# 99 · A notebook\n\n**Time needed:** about 5 minutes. More text here now."),  # 12 words
        _md(words(288)),  # with the first: 300 words of prose, 2 minutes
        _code(words(300)),  # code to run: 1 minute
        _code("def f():\n    # YOUR CODE HERE\n    raise NotImplementedError()", **task),
        _md("**Your prediction** (not graded).\n\n*My prediction:*"),  # a prediction: 3 minutes
        _md("## Part F · Deep (optional)\n\n" + words(146)),  # 4 + 146 words: 1 minute, apart
        _md("**Your prediction** (not graded).\n\n*My prediction:*"),  # in the deep dive: 3 minutes, apart
        _md("## Reflection (3 points)"),  # back in the notebook: 3 words
        _md("YOUR ANSWER HERE", **reflection),
    ])
    solution = nbformat.from_dict(release)
    solution.cells[3] = _code("def f():\n    ### BEGIN SOLUTION\n    # a comment\n    a = 1\n\n    b = 2\n"
                              "    c = 3\n    return a + b + c\n    ### END SOLUTION", **task)  # 4 lines: 5 + 4 minutes
    solution.cells[8] = _md("### BEGIN SOLUTION\nThe answer.\n### END SOLUTION", **reflection)
    return release, solution


def test_the_method_counts_a_notebook_as_stated():
    release, solution = _notebooks()
    count = st.study_time(release, solution, "99_x", run_s=120)  # 2 minutes to run every cell
    assert count.tasks == [4] and count.predictions == 1 and count.reflection_points == 3
    # prose: 300 words, and 12 more (a prediction's 6, the reflection's heading 3, its stub 3);
    # 1 minute of code, 9 the task, 3 the prediction, 15 the reflection, 2 running
    assert count.total_min == pytest.approx(300 / 150 + 12 / 150 + 1 + 9 + 3 + 15 + 2)
    assert count.optional_min == pytest.approx((150 + 6) / 150 + 3)  # its prediction's 6 words, and 3 minutes
    assert count.optional_parts == ["Part F"]
    assert st.sentence(count) == ("**Time needed:** about 35 minutes, and 5 minutes more for the optional deep dive "
                                  "(Part F), counted by the course's one method (README, *Time needed*).")


@pytest.mark.parametrize("minutes, said", [(35, "35 minutes"), (60, "1 hour"), (95, "1 hour 35 minutes"),
                                           (120, "2 hours"), (140, "2 hours 20 minutes")])
def test_durations_read_as_people_say_them(minutes, said):
    assert st.duration(minutes) == said


@pytest.mark.parametrize("name", NAMES)
def test_every_notebook_states_the_time_its_count_gives(name):
    solution = nbformat.read(SOLUTIONS / name / f"{name}.ipynb", as_version=4)
    release = nbformat.read(RELEASE / name / f"{name}.ipynb", as_version=4)
    assert name in st.RUN_S_2_CORES, f"{name}: no measured execution time on 2 cores in study_time.RUN_S_2_CORES"
    want = st.sentence(st.study_time(release, solution, name))
    assert st.stated(solution) == want, (f"{name} says {st.stated(solution)!r}, its count gives {want!r}: run "
                                         f"python -m feedgpu.workflows.course.study_time --write, then make release")


@pytest.mark.parametrize("name, parts", [("05_pinned_memory", ["Part F"]),
                                         ("06_copy_on_write", ["forkserver and `gc.freeze`"]),
                                         ("07_remote_storage", ["a connection cut in the middle of a body",
                                                                "backing off against a rate limit"])])
def test_the_deep_dives_are_marked_optional_and_hold_nothing_graded(name, parts):
    solution = nbformat.read(SOLUTIONS / name / f"{name}.ipynb", as_version=4)
    release = nbformat.read(RELEASE / name / f"{name}.ipynb", as_version=4)
    assert st.study_time(release, solution, name).optional_parts == parts
    inside, level = False, None
    for cell in solution.cells:
        for line in cell.source.splitlines() if cell.cell_type == "markdown" else ():
            if line.startswith("#"):
                depth = len(line) - len(line.lstrip("#"))
                if "(optional)" in line:
                    inside, level = True, depth
                elif inside and depth <= level:
                    inside = False
        graded = cell.metadata.get("nbgrader", {})
        assert not (inside and (graded.get("grade") or graded.get("solution"))), \
            f"{name}: a graded cell ({graded.get('grade_id')}) inside an optional deep dive"


def test_the_readme_s_table_gives_the_notebooks_times():
    """The README's table of times (Learning on your own) says what the notebooks say."""
    import re

    readme = (RELEASE.parent / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| minutes |"))
    cells = [c.strip() for c in row.strip("|").split("|")[1:]]
    assert len(cells) == len(NAMES), cells
    for name, cell in zip(NAMES, cells):
        count = st.study_time(nbformat.read(RELEASE / name / f"{name}.ipynb", as_version=4),
                              nbformat.read(SOLUTIONS / name / f"{name}.ipynb", as_version=4), name)
        figures = [int(x) for x in re.findall(r"\d+", cell)]
        want = [st._round_up(count.total_min)] + ([st._round_up(count.optional_min)] if count.optional_parts else [])
        assert figures == want, f"README says {cell!r} for {name}; its count gives {want}"
