"""The modules that moved, and the release that removes their old paths.

Students' ``work/`` copies of the notebooks are never overwritten (:mod:`feedgpu.workflows.course.workcopy`),
so the imports they were made with must keep working after the course's code moves. Each
old path is a file of two lines that makes it the new module itself (:func:`alias`):
``feedgpu.copies`` *is* ``feedgpu.models.copies``, so a function reached by either path is
the same object (and the grader's hidden references hide both). They stay for one
release: :data:`REMOVED_IN` names the one that removes them.
"""

from __future__ import annotations

import importlib
import runpy
import sys

__all__ = ["MOVED", "REMOVED_IN", "alias"]

#: The release of the course (``project.version`` in ``pyproject.toml``) without the old paths.
REMOVED_IN = "0.2.0"

#: Each old module path and the module it now is.
MOVED: dict[str, str] = {
    "feedgpu.checks": "feedgpu.base.checks",
    "feedgpu.model": "feedgpu.models.pipeline",
    "feedgpu.copies": "feedgpu.models.copies",
    "feedgpu.cores": "feedgpu.models.cores",
    "feedgpu.simdevice": "feedgpu.models.device",
    "feedgpu.accelerator": "feedgpu.models.accelerator",
    "feedgpu.remote_model": "feedgpu.models.remote_storage",
    "feedgpu.testing": "feedgpu.workflows.grading.testing",
    # the device runs the recorder as ``python3 -m feedgpu.workflows.record`` (issue 42's command)
    "feedgpu.workflows.record": "feedgpu.workflows.bench.record",
}


def alias(old: str) -> None:
    """Make the module being imported as ``old`` the module it moved to (called by its file);
    run as ``python3 -m OLD``, run the new module as ``__main__``."""
    if old == "__main__":
        spec = sys._getframe(1).f_globals["__spec__"]  # the old path's file, run by ``-m``
        runpy.run_module(MOVED[spec.name], run_name="__main__", alter_sys=True)
        return
    sys.modules[old] = importlib.import_module(MOVED[old])
