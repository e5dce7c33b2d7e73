"""Grading, apart from the course: one submission, and a class on Dask.

* :mod:`.submission`: one submission graded by nbgrader in a sandbox;
* :mod:`.cluster`: the class on a Dask cluster (the same submission on a worker);
* :mod:`.grade` (``feedgpu-grade``): the command, its status file and the scores;
* :mod:`.inspection`: a submitted notebook looked at before it is graded;
* :mod:`.execution`: how nbgrader runs a submission's cells;
* :mod:`.sandbox`: a command under wall-clock, memory and process limits;
* :mod:`.testing`: the helpers of the notebooks' test cells (the references they hide).
"""
