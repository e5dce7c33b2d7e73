"""How long a notebook takes a student: one stated method behind every notebook's "Time needed".

Usage: ``python -m feedgpu.workflows.course.study_time`` prints each notebook's count and the
sentence its first cell should carry; ``--write`` puts the sentence into the solutions
(then ``make release``). ``tests/test_study_time.py`` fails when a notebook's sentence
and its count part ways, so a notebook that grows says so.

The method, the same for every notebook (counted on the release, the notebook a student
reads, and on the solution, for the length of each answer):

* **reading**: the prose at :data:`PROSE_WPM` words a minute, the code cells one runs but
  does not write at :data:`CODE_WPM`;
* **each task** (a code cell the student writes): :data:`TASK_MIN` minutes to read it and
  plan, plus :data:`LINE_MIN` a line of the model answer (blank lines and comments left out);
* **each prediction** (a "*My prediction:*" cell): :data:`PREDICTION_MIN` minutes;
* **the reflection**: :data:`REFLECTION_MIN_PER_POINT` minutes a point;
* **running every cell**: the notebook's execution time measured on 2 cores
  (:data:`RUN_S_2_CORES`).

A *deep dive* is a section whose heading says "(optional)": its reading and predictions
are counted apart, and the sentence gives them as extra minutes. Totals are rounded up to
5 minutes.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ...base.cli import OneLineParser, run_command
from .. import COURSE_ROOT as ROOT

__all__ = ["PROSE_WPM", "CODE_WPM", "TASK_MIN", "LINE_MIN", "PREDICTION_MIN", "REFLECTION_MIN_PER_POINT",
           "RUN_S_2_CORES", "StudyTime", "study_time", "duration", "sentence", "stated", "write", "main"]

PROSE_WPM = 150
CODE_WPM = 300
TASK_MIN = 5
LINE_MIN = 1
PREDICTION_MIN = 3
REFLECTION_MIN_PER_POINT = 5

#: Seconds to run every cell of each solution notebook on a 2-core machine without a GPU:
#: ``tests/test_notebooks.py`` under ``make test`` (``--durations``), 2026-11-26; 00, 02, 03 and 04
#: timed again after issue 48 (every cell run in one kernel with nbclient, 2026-12-02).
RUN_S_2_CORES = {"00_orientation": 34, "01_dataset": 28, "02_workers": 45, "03_prefetch_transfer": 45,
                 "04_augmentation": 36, "05_pinned_memory": 15, "06_copy_on_write": 96,
                 "07_remote_storage": 67, "08_distributed": 36, "09_capstone": 58}

#: Where the sentence sits: the first cell's bold "Time needed" up to its first full stop.
_SENTENCE = re.compile(r"\*\*Time needed:\*\*[^\n]*?(?:\.(?=\s)|\.$)", re.M)
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$", re.M)
_WORD = re.compile(r"[A-Za-z0-9_]+")
_PREDICTION = "*My prediction:*"
_OPTIONAL = "(optional)"


def _words(text: str) -> int:
    return len(_WORD.findall(text))


def _label(title: str) -> str:
    """A deep dive's name in the sentence: "Part F" of "Part F · On a GPU ... (optional)", else
    the heading's words, lower-cased at the start."""
    title = title.replace(_OPTIONAL, "").strip()
    if title.startswith("Part ") and "·" in title:
        return title.split("·")[0].strip()
    return title[:1].lower() + title[1:]


def _answer_lines(source: str) -> int:
    """Lines of a model answer: between BEGIN and END SOLUTION, without blanks and comments."""
    match = re.search(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", source, re.S)
    body = match.group(1) if match else source
    return sum(1 for line in body.splitlines() if line.strip() and not line.strip().startswith("#"))


@dataclass
class StudyTime:
    """One notebook's count, in minutes (``optional_min``: its deep dives')."""

    name: str
    reading_min: float = 0.0
    tasks: list[int] = field(default_factory=list)  # lines of each task's model answer
    predictions: int = 0
    reflection_points: float = 0.0
    run_s: float = 0.0
    optional_min: float = 0.0
    optional_parts: list[str] = field(default_factory=list)

    @property
    def tasks_min(self) -> float:
        return sum(TASK_MIN + LINE_MIN * lines for lines in self.tasks)

    @property
    def total_min(self) -> float:
        """The notebook without its deep dives, unrounded."""
        return (self.reading_min + self.tasks_min + PREDICTION_MIN * self.predictions
                + REFLECTION_MIN_PER_POINT * self.reflection_points + self.run_s / 60)


def _is_task(cell) -> bool:
    """A code cell the student writes (nbgrader's solution cell)."""
    return cell.get("cell_type") == "code" and bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))


def _is_reflection(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "markdown" and bool(meta.get("solution")) and bool(meta.get("grade"))


def study_time(release_nb, solution_nb, name: str, run_s: float | None = None) -> StudyTime:
    """Count one notebook by the method (the module's docstring)."""
    count = StudyTime(name, run_s=RUN_S_2_CORES.get(name, 0.0) if run_s is None else run_s)
    optional_level = None  # the heading level of the deep dive we are in, if any
    for cell in release_nb.cells:
        text = cell.source
        for hashes, title in _HEADING.findall(text) if cell.cell_type == "markdown" else ():
            level = len(hashes)
            if optional_level is not None and level <= optional_level and _OPTIONAL not in title:
                optional_level = None
            if _OPTIONAL in title:
                optional_level = level
                count.optional_parts.append(_label(title))
        if _is_task(cell):
            continue  # counted from the solution, by the lines of its answer
        minutes = _words(text) / (PROSE_WPM if cell.cell_type == "markdown" else CODE_WPM)
        predicts = cell.cell_type == "markdown" and _PREDICTION in text
        if optional_level is None:
            count.reading_min += minutes
            count.predictions += predicts
        else:
            count.optional_min += minutes + PREDICTION_MIN * predicts
    for cell in solution_nb.cells:
        if _is_reflection(cell):
            count.reflection_points += float(cell.metadata["nbgrader"].get("points", 0))
        elif _is_task(cell):
            count.tasks.append(_answer_lines(cell.source))
    return count


def _round_up(minutes: float, step: int = 5) -> int:
    return int(math.ceil(minutes / step - 1e-9) * step)


def duration(minutes: int) -> str:
    """``95`` -> ``"1 hour 35 minutes"``."""
    hours, rest = divmod(minutes, 60)
    parts = ([f"{hours} hour" + ("s" if hours > 1 else "")] if hours else []) + ([f"{rest} minutes"] if rest else [])
    return " ".join(parts)


def sentence(count: StudyTime) -> str:
    """The notebook's first sentence: its time, and the deep dives' apart."""
    text = f"**Time needed:** about {duration(_round_up(count.total_min))}"
    if count.optional_parts:
        dives = "deep dives" if len(count.optional_parts) > 1 else "deep dive"
        text += (f", and {duration(_round_up(count.optional_min))} more for the optional {dives} "
                 f"({' and '.join(count.optional_parts)})")
    return text + ", counted by the course's one method (README, *Time needed*)."


def stated(nb) -> str | None:
    """The "Time needed" sentence a notebook's first cell carries, or None."""
    match = _SENTENCE.search(nb.cells[0].source) if nb.cells else None
    return match.group(0) if match else None


def _notebooks(root: Path):
    import nbformat

    for path in sorted((root / "solutions").glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb")):
        release = root / "notebooks" / path.parent.name / path.name
        yield path, nbformat.read(path, as_version=4), nbformat.read(release, as_version=4)


def write(root: Path = ROOT) -> list[str]:
    """Put each notebook's sentence into its solution; return the names changed."""
    import nbformat

    changed = []
    for path, solution, release in _notebooks(root):
        want = sentence(study_time(release, solution, path.stem))
        have = stated(solution)
        if have is None:
            raise ValueError(f"{path.name}: its first cell has no '**Time needed:** ...' sentence to replace")
        if have != want:
            solution.cells[0].source = solution.cells[0].source.replace(have, want, 1)
            nbformat.write(solution, path)
            changed.append(path.stem)
    return changed


def main(argv: list[str] | None = None) -> int:
    return run_command("study time", _main, argv)


def _main(argv: list[str]) -> int:
    parser = OneLineParser(prog="python -m feedgpu.workflows.course.study_time",
                                     description="Each notebook's time needed, by the course's one method.")
    parser.add_argument("--write", action="store_true", help="put the sentences into solutions/ (then make release)")
    args = parser.parse_args(argv)
    print(f"{'notebook':24} {'read':>5} {'tasks':>6} {'pred':>5} {'refl':>5} {'run':>4} {'total':>6} {'optional':>8}")
    for path, solution, release in _notebooks(ROOT):
        c = study_time(release, solution, path.stem)
        print(f"{c.name:24} {c.reading_min:5.0f} {c.tasks_min:6.0f} {PREDICTION_MIN * c.predictions:5.0f} "
              f"{REFLECTION_MIN_PER_POINT * c.reflection_points:5.0f} {c.run_s / 60:4.1f} "
              f"{_round_up(c.total_min):6d} {_round_up(c.optional_min) if c.optional_parts else 0:8d}")
    if args.write:
        changed = write()
        print("rewrote:", ", ".join(changed) or "nothing (every sentence is up to date)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
