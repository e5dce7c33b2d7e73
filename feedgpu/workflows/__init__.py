"""The course's workflows behind the Makefile, each with a console command.

* :mod:`~feedgpu.workflows.release` (``feedgpu-release``): the student release from the solutions;
* :mod:`~feedgpu.workflows.grade` (``feedgpu-grade``): grade a class with nbgrader, on
  :mod:`~feedgpu.workflows.cluster` (a Dask cluster: local workers or your machines), using
  :mod:`~feedgpu.workflows.inspection` (look at a submission before grading it) and
  :mod:`~feedgpu.workflows.sandbox` (run it with limits, leave no process behind);
* :mod:`~feedgpu.workflows.check` (``feedgpu-check``): a learner grades their own notebook
  with the same pipeline, in a scratch gradebook;
* :mod:`~feedgpu.workflows.site` (``feedgpu-site``): the reference run as a static site;
* :mod:`~feedgpu.workflows.bench` (``feedgpu-bench``): the course's figures;
* :mod:`~feedgpu.workflows.record` (``feedgpu-record``): a GPU machine's readings folder (:mod:`feedgpu.readings`).
"""

from pathlib import Path

#: The course's repository (``solutions/``, ``notebooks/``, ``nbgrader_config.py``): the
#: package is installed from it in editable mode, so it sits two folders above this file.
COURSE_ROOT = Path(__file__).resolve().parents[2]
