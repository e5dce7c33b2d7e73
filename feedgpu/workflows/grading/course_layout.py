"""The course as nbgrader sees it: where its assignments are, and how nbgrader is run.

The release (:mod:`feedgpu.workflows.course.release`), the grading of one submission and
of a class, and a student's check all read these, so they live with grading, which the
course's workflows use and which uses nothing of theirs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .. import COURSE_ROOT as ROOT

#: The instructor's notebooks, one folder an assignment.
SOURCE = ROOT / "solutions"
#: nbgrader, beside the Python that runs the course.
NBGRADER = Path(sys.executable).with_name("nbgrader")


def nbgrader_env() -> dict[str, str]:
    """The environment for nbgrader: the venv's ``bin/`` first (nbgrader calls ``alembic``)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(NBGRADER.parent), env.get("PATH", "")])
    return env


def assignments(source: Path = SOURCE) -> list[str]:
    """The assignment names: the sub-folders of ``source`` that hold a notebook, sorted."""
    return sorted(p.name for p in source.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))
