"""The old import paths of moved modules: the same modules, for one release (feedgpu.base.moved).

Students' ``work/`` copies are never overwritten, so the imports they were made with keep
working until the release named by ``REMOVED_IN``; the course's own code, its solutions
and the grader's table of references use the new paths only.
"""

from __future__ import annotations

import importlib
import json
import re
import runpy
import sys
import tomllib
from pathlib import Path

import pytest

from feedgpu.base.moved import MOVED, REMOVED_IN
from feedgpu.workflows.grading import testing

ROOT = Path(__file__).resolve().parents[1]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_new_module_itself(old):
    assert importlib.import_module(old) is importlib.import_module(MOVED[old]), old
    shim = ROOT / (old.replace(".", "/") + ".py")
    code = [line for line in shim.read_text().splitlines() if line.strip() and not line.startswith('"""')]
    assert code == ["from feedgpu.base.moved import alias", "alias(__name__)"], f"{shim} is more than a re-export"


def test_the_old_paths_are_removed_in_a_later_release():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert _version(REMOVED_IN) > _version(version), (REMOVED_IN, version)


def test_the_references_follow_the_moves_and_hide_both_paths():
    every = [ref for refs in testing.REFERENCES.values() for ref in refs]
    old_modules = [ref for ref in every if ref.partition(":")[0] in MOVED]
    assert not old_modules, f"REFERENCES names old paths: {old_modules}"
    moved_back = {new: old for old, new in MOVED.items()}
    hidden_through_old = 0
    for ref in every:
        module, _, attribute = ref.partition(":")
        if module not in moved_back or "." in attribute:
            continue
        through_old = getattr(importlib.import_module(moved_back[module]), attribute)
        if not callable(through_old) or isinstance(through_old, type):
            continue
        with testing.hidden(ref):
            with pytest.raises(testing.ReferenceHidden):
                through_old()
        hidden_through_old += 1
    assert hidden_through_old >= 5, "the table's references in moved modules were checked through their old paths"


def test_the_course_imports_no_old_path():
    old = re.compile(r"\b(?:from|import)\s+(" + "|".join(re.escape(m) for m in MOVED) + r")\b(?!\.)")
    offenders = []
    for path in [*ROOT.glob("feedgpu/**/*.py"), *ROOT.glob("solutions/*/*.ipynb"), ROOT / "lfw_dataset.py"]:
        if path.relative_to(ROOT).as_posix()[:-3].replace("/", ".") in MOVED:
            continue  # the old path's own file
        text = path.read_text()
        if path.suffix == ".ipynb":
            text = "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"])
        offenders += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in old.finditer(text)]
    assert not offenders, offenders


@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")  # imported already by this session
def test_the_recorder_runs_by_its_old_path_on_the_device(monkeypatch, capsys):
    """``python3 -m feedgpu.workflows.record`` (the device's command, issue 42) runs the recorder."""
    monkeypatch.setattr("sys.argv", ["feedgpu.workflows.record", "--help"])
    monkeypatch.delitem(sys.modules, "feedgpu.workflows.record", raising=False)  # as in a fresh process
    with pytest.raises(SystemExit) as stopped:
        runpy.run_module("feedgpu.workflows.record", run_name="__main__", alter_sys=True)
    assert stopped.value.code == 0 and "usage: feedgpu-record" in capsys.readouterr().out
