"""The virtual environment that `make venv` builds, beyond its pinned versions."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


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


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("says, found", [("3.12.4", "Python 3.12.4"), (None, "not found")])
def test_make_names_the_python_it_needs_in_one_line(tmp_path, says, found):
    """A student whose python3 is not 3.11 is told so, in one line, before anything is made."""
    for name in ("Makefile", "requirements.txt", "pyproject.toml"):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    python = tmp_path / "python"
    if says is not None:  # a Python that reports another version
        python.write_text("#!/bin/sh\ncase \"$2\" in *version_info*) exit 1;; *platform*) echo 'Python "
                          f"{says}';; esac\n")
        python.chmod(0o755)
    out = subprocess.run(["make", "--no-print-directory", "venv", f"PYTHON={python}"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and not (tmp_path / ".venv").exists(), "nothing made"
    lines = [line for line in out.stdout.splitlines() if line.startswith("make: the course needs")]
    assert len(lines) == 1 and f"is {found}:" in lines[0] and "PYTHON=python3.11" in lines[0], out.stdout


def test_the_license_file_is_the_one_pyproject_names():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]["text"]
    assert (ROOT / "LICENSE").read_text().splitlines()[0] == f"{declared} License"
