"""The course declares what it needs: ``pip install .`` brings a working course.

``requirements.txt`` is the exact lock the Makefile installs; ``pyproject.toml`` declares
the same packages as ranges that the lock satisfies (the test-only ones, and dask-jobqueue
for the README's cluster example, as extras).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _locked() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"requirements.txt pins exactly: {line}"
            pins[canonicalize_name(req.name)] = spec.version
    return pins


def test_every_locked_package_is_declared_as_a_range_the_lock_satisfies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {}
    for line in [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]:
        req = Requirement(line)
        assert req.specifier and all(s.operator == ">=" for s in req.specifier), f"a range, not a pin: {line}"
        declared[canonicalize_name(req.name)] = req
    locked = _locked()
    missing = sorted(set(locked) - set(declared))
    assert not missing, f"pyproject.toml does not declare {missing}: pip install . would not bring them"
    for name, version in locked.items():
        assert declared[name].specifier.contains(version), (name, version, str(declared[name].specifier))
    required = {canonicalize_name(Requirement(line).name) for line in project["dependencies"]}
    assert {"torch", "torchvision", "nbgrader", "matplotlib"} <= required, "the course's own needs are not extras"
