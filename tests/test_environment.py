"""The virtual environment that `make venv` builds, beyond its pinned versions."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def test_importing_nbformat_builds_no_iri_parsers():
    """Every nbgrader run imports nbformat, hence jsonschema's format checkers. With
    rfc3987-syntax installed (jupyter-events asks for it) that import builds the parsers of an
    IRI grammar first: seconds per graded submission. `make venv` uninstalls it; nbformat
    still validates notebooks without it."""
    probe = ("import sys, nbformat\n"
             "nbformat.validate(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('1')]))\n"
             "print(sorted(name for name in sys.modules if name.startswith(('rfc3987_syntax', 'lark'))))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"importing nbformat and validating a notebook failed:\n{out.stderr[-2000:]}"
    assert out.stdout.strip() == "[]", (
        f"importing nbformat imported {out.stdout.strip()}: `python -m pip uninstall -y rfc3987-syntax` "
        "in this environment, as `make venv` does when it builds .venv (see the Makefile)")
