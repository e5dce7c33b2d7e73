"""The base room: the atomic writers, the command-line runner and the spin loop."""

from __future__ import annotations

import json
import time

import pytest

from feedgpu.base.cli import OneLineParser, UsageError, run_command
from feedgpu.base.files import replacing_folder, write_atomically, write_json_atomically
from feedgpu.base.spin import spin_cpu


def test_a_file_is_written_whole_or_left_as_it_was(tmp_path, monkeypatch):
    path = write_json_atomically(tmp_path / "deep" / "a.json", {"n": 1})
    assert json.loads(path.read_text()) == {"n": 1}

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("feedgpu.base.files.os.replace", broken)
    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, "half")
    assert json.loads(path.read_text()) == {"n": 1}, "a failed write leaves the old file"
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.json"], "and no temporary file"


def test_a_folder_is_swapped_in_whole_or_left_as_it_was(tmp_path):
    dest = tmp_path / "tree"
    with replacing_folder(dest) as new:
        (new / "one").write_text("1")
    assert [p.name for p in dest.iterdir()] == ["one"]
    with pytest.raises(RuntimeError):
        with replacing_folder(dest) as new:
            (new / "two").write_text("2")
            raise RuntimeError("stopped half-way")
    assert [p.name for p in dest.iterdir()] == ["one"], "a failed build leaves the old folder"
    with replacing_folder(dest) as new:
        (new / "three").write_text("3")
    assert [p.name for p in dest.iterdir()] == ["three"], "a finished build replaces it whole"
    with replacing_folder(dest, keep_existing=True) as new:
        (new / "four").write_text("4")
    assert [p.name for p in dest.iterdir()] == ["three"], "keep_existing: the folder there first stands"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tree"], "no scratch is left beside it"


def test_every_command_ends_a_usage_error_in_one_line_and_ctrl_c_with_130(capsys):
    def usage(argv):
        OneLineParser(prog="x").parse_args(argv)

    assert run_command("feedgpu-x", usage, ["--no-such-flag"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("feedgpu-x: error: unrecognized arguments") and err.count("\n") == 1, err

    def refused(argv):
        raise UsageError("no such\nfolder")

    assert run_command("", refused, []) == 2
    assert capsys.readouterr().err == "error: no such folder\n"

    def interrupted(argv):
        raise KeyboardInterrupt

    assert run_command("feedgpu-x", interrupted, [], interrupted="interrupted: nothing written") == 130
    assert capsys.readouterr().err == "feedgpu-x: interrupted: nothing written\n"
    assert run_command("feedgpu-x", lambda argv: None, []) == 0
    with pytest.raises(ZeroDivisionError):  # a bug is no usage error: its traceback is shown
        run_command("feedgpu-x", lambda argv: 1 / 0, [])


def test_the_spin_loop_takes_the_cpu_time_asked():
    start = time.thread_time()
    spin_cpu(0.05)
    used = time.thread_time() - start
    assert 0.05 <= used < 0.5, used
    with pytest.raises(ValueError):
        spin_cpu(-1)


def _console_scripts() -> dict[str, str]:
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    return tomllib.loads(pyproject.read_text())["project"]["scripts"]


@pytest.mark.parametrize("name", sorted(_console_scripts()))
def test_every_console_command_says_a_usage_error_in_one_line_and_exits_2(name, capsys):
    import importlib

    module, _, attribute = _console_scripts()[name].partition(":")
    main = getattr(importlib.import_module(module), attribute)
    assert main(["--no-such-flag"]) == 2, name
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "error: " in said[0], (name, said)
