"""The student's working copy (``make lab``): made from the release, never overwritten."""

from __future__ import annotations

import json

import pytest

from feedgpu.workflows.course.workcopy import MANIFEST, main, update_work

pytestmark = pytest.mark.unit


def release_with(tmp_path, notebooks: dict[str, str]):
    release = tmp_path / "notebooks"
    for name, text in notebooks.items():
        folder = release / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.ipynb").write_text(text)
    return release


def test_the_first_run_copies_the_release_and_remembers_it(tmp_path):
    release = release_with(tmp_path, {"00_a": "zero", "01_b": "one"})
    work = tmp_path / "work"
    said = update_work(release, work)
    assert (work / "00_a" / "00_a.ipynb").read_text() == "zero"
    assert (work / "01_b" / "01_b.ipynb").read_text() == "one"
    assert said == ["00_a: copied to work/00_a/ (your working copy)", "01_b: copied to work/01_b/ (your working copy)"]
    assert set(json.loads((work / MANIFEST).read_text())) == {"00_a/00_a.ipynb", "01_b/01_b.ipynb"}
    assert update_work(release, work) == [], "nothing changed: nothing said"


def test_a_student_s_notebook_is_never_overwritten(tmp_path):
    release = release_with(tmp_path, {"03_c": "release 1"})
    work = tmp_path / "work"
    update_work(release, work)
    mine = work / "03_c" / "03_c.ipynb"
    mine.write_text("my answers")
    assert update_work(release, work) == [], "the release did not change: the student's edits are theirs"
    (release / "03_c" / "03_c.ipynb").write_text("release 2")
    said = update_work(release, work)
    assert mine.read_text() == "my answers", "never overwritten"
    assert (work / "03_c" / "03_c.updated.ipynb").read_text() == "release 2", "the new version beside theirs"
    assert len(said) == 1 and "03_c.updated.ipynb" in said[0] and "untouched" in said[0]
    assert update_work(release, work) == [], "said once"
    (release / "03_c" / "03_c.ipynb").write_text("release 3")
    update_work(release, work)
    assert (work / "03_c" / "03_c.updated.ipynb").read_text() == "release 3" and mine.read_text() == "my answers"


def test_an_untouched_copy_is_not_overwritten_either_and_a_deleted_one_comes_back(tmp_path):
    release = release_with(tmp_path, {"05_d": "v1"})
    work = tmp_path / "work"
    update_work(release, work)
    (release / "05_d" / "05_d.ipynb").write_text("v2")
    update_work(release, work)
    assert (work / "05_d" / "05_d.ipynb").read_text() == "v1", "even an untouched copy is the student's"
    (work / "05_d" / "05_d.ipynb").unlink()
    said = update_work(release, work)
    assert (work / "05_d" / "05_d.ipynb").read_text() == "v2", "deleted: a fresh copy of the release"
    assert said == ["05_d: copied to work/05_d/ (your working copy)"]


def test_a_new_notebook_is_copied_and_a_damaged_manifest_loses_nothing(tmp_path):
    release = release_with(tmp_path, {"00_a": "zero"})
    work = tmp_path / "work"
    update_work(release, work)
    (work / "00_a" / "00_a.ipynb").write_text("mine")
    (work / MANIFEST).write_text("{not json")
    release_with(tmp_path, {"09_z": "nine"})
    said = update_work(release, work)
    assert (work / "09_z" / "09_z.ipynb").read_text() == "nine"
    assert (work / "00_a" / "00_a.ipynb").read_text() == "mine"
    assert any("00_a.updated.ipynb" in line for line in said), "unknown history: the release goes beside, never over"


def test_the_command_says_what_it_did_in_one_line_each(tmp_path, capsys):
    release = release_with(tmp_path, {"00_a": "zero"})
    assert main(["--release", str(release), "--work", str(tmp_path / "work")]) == 0
    assert capsys.readouterr().out == "00_a: copied to work/00_a/ (your working copy)\n"
    assert main(["--release", str(release), "--work", str(tmp_path / "work")]) == 0
    assert "up to date" in capsys.readouterr().out
    assert main(["--release", str(tmp_path / "none"), "--work", str(tmp_path / "work")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no release folder" in err


def test_the_reference_pages_are_kept_as_the_course_has_them(tmp_path):
    """GLOSSARY.md and RUBRICS.md sit in work/ (JupyterLab cannot reach above it), replaced when the course's change."""
    course = tmp_path / "course"
    course.mkdir()
    (course / "GLOSSARY.md").write_text("# Glossary v1")
    release, work = release_with(tmp_path, {"00_a": "zero"}), tmp_path / "work"
    update_work(release, work, course)
    assert (work / "GLOSSARY.md").read_text() == "# Glossary v1" and not (work / "RUBRICS.md").exists()
    (course / "GLOSSARY.md").write_text("# Glossary v2")
    assert update_work(release, work, course) == [], "a reference page is the course's: replaced without a word"
    assert (work / "GLOSSARY.md").read_text() == "# Glossary v2"


def test_every_link_of_the_release_to_a_course_page_resolves_in_the_working_copy(tmp_path):
    """The notebooks link ../GLOSSARY.md and ../RUBRICS.md: from work/NN_x/ both must exist."""
    import re

    import nbformat

    from feedgpu.workflows.course.release import RELEASE

    work = tmp_path / "work"
    update_work(RELEASE, work)
    checked = 0
    for path in sorted(work.glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        targets = {t for c in nb.cells if c.cell_type == "markdown"
                   for t in re.findall(r"\]\((\.\./[^)#\s]+\.md)", c.source)}
        assert "../GLOSSARY.md" in targets, f"{path.name} does not link the glossary"
        for target in targets:
            assert (path.parent / target).resolve().is_file(), f"{path.name}: {target} is not in the working copy"
            checked += 1
    assert checked >= 20, checked
