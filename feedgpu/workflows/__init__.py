"""The course's workflows behind the Makefile, by audience, each with its console commands.

* :mod:`.course`: the student's course: the release (``feedgpu-release``), the working
  copy, the check of one's own notebook (``feedgpu-check``), the site (``feedgpu-site``)
  and study time;
* :mod:`.grading`: grading, apart from the course: one submission, and a class on Dask
  (``feedgpu-grade``), with the inspection, the sandbox and the test cells' helpers;
* :mod:`.bench`: the course's figures (``feedgpu-bench``), the recorder of a GPU
  machine's readings folder (``feedgpu-record``, :mod:`feedgpu.readings`) and the planted
  loaders the diagnosis is checked on.

Grading imports nothing of the course's workflows but the release it grades; the course
uses grading (the check is a grading of one notebook); the bench may use both.
"""

from pathlib import Path

#: The course's repository (``solutions/``, ``notebooks/``, ``nbgrader_config.py``): the
#: package is installed from it in editable mode, so it sits two folders above this file.
COURSE_ROOT = Path(__file__).resolve().parents[2]
