"""nbgrader settings of the course: `solutions/` is the source, `notebooks/` the release."""

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "feeding-the-gpu"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
# Only notebooks are released; data and helpers come from the installed package.
c.CourseDirectory.include = ["*.ipynb"]
# The release keeps no outputs, so it never leaks a solution's printout.
c.ClearOutput.enabled = True
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
# Grading runs every cell as nbgrader's own Execute does, except that a runaway cell costs
# its time limit once per notebook (feedgpu/workflows/grading/execution.py); the rest is nbgrader's list.
c.Autograde.autograde_preprocessors = [
    "feedgpu.workflows.grading.execution.OneRunawayExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
