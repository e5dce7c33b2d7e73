"""The student's course: the release, the working copy, the check, the site and study time.

* :mod:`.release` (``feedgpu-release``): ``notebooks/`` regenerated from ``solutions/``;
* :mod:`.workcopy`: the student's ``work/``, made from the release and never overwritten;
* :mod:`.check` (``feedgpu-check``): a notebook checked with the instructor's tests;
* :mod:`.site` (``feedgpu-site``): the course as a static site;
* :mod:`.study_time`: how long each notebook takes a student.
"""
