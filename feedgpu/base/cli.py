"""One runner for every console command of the course: what a usage error and Ctrl-C do.

Every command (``feedgpu-diagnose``, ``feedgpu-record``, ``feedgpu-grade``,
``feedgpu-bench``, ...) runs its body through :func:`run_command` and parses with
:class:`OneLineParser`, so that they end alike:

* a usage error (a bad argument, a file that is not there, a setting refused) is one
  line, ``PROG: error: WHAT``, on standard error, and exit status 2 (argparse's own);
* Ctrl-C is one line, ``PROG: interrupted`` (and what was left as it was), and exit
  status 130 (128 + SIGINT, as a shell reports it);
* anything else is a bug, and its traceback is shown.

:func:`import_named` reads the ``MODULE:ATTRIBUTE`` form the commands take a user's
loader and step in.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

__all__ = ["UsageError", "OneLineParser", "one_line", "run_command", "import_named", "USAGE_STATUS",
           "INTERRUPTED_STATUS"]

#: The exit status of a usage error (argparse's) and of Ctrl-C (128 + SIGINT).
USAGE_STATUS = 2
INTERRUPTED_STATUS = 130


class UsageError(Exception):
    """A command line's reason to exit 2, said in one line (:func:`one_line`)."""


class OneLineParser(argparse.ArgumentParser):
    """An ``argparse`` parser that raises :class:`UsageError` instead of printing its usage
    and exiting, so that a command says what is wrong in one line, as it does for every
    other bad argument."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def one_line(message: object) -> str:
    """``message`` with every run of white space, line breaks included, made one space."""
    return " ".join(str(message).split())


def run_command(prog: str, body: Callable[[list[str]], int | None], argv: Sequence[str] | None = None, *,
                interrupted: str = "interrupted") -> int:
    """Run a command's ``body(argv)`` and return its exit status: the body's (0 if it returns
    None), 2 on :class:`UsageError`, 130 on Ctrl-C, each said in one line on standard error.

    Args:
        prog: the command's name, which starts its lines ("" for a command whose lines
            start with ``error:`` alone, as ``make check`` and ``lfw_dataset.py`` print them).
        body: the command itself; it raises :class:`UsageError` for anything the user must change.
        argv: the arguments (default ``sys.argv[1:]``).
        interrupted: what the line says on Ctrl-C (e.g. ``"interrupted: nothing written"``).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    start = f"{prog}: " if prog else ""
    try:
        status = body(argv)
    except UsageError as err:
        print(f"{start}error: {one_line(err)}", file=sys.stderr)
        return USAGE_STATUS
    except KeyboardInterrupt:
        print(f"{start}{interrupted}", file=sys.stderr)
        return INTERRUPTED_STATUS
    return 0 if status is None else int(status)


def import_named(spec: str, what: str) -> tuple[Any, types.ModuleType]:
    """The object that a ``MODULE:ATTRIBUTE`` string names, and its module.

    The form of uvicorn and gunicorn (``mytraining:make_loader``; the attribute may be
    dotted), with the current directory importable, as with ``python -m``: the command
    lines of the diagnosis and of the recorder take the user's loader and step this way.

    Raises:
        ValueError: the string is not of that form, the module cannot be imported (the
            message names the error it raised) or has no such attribute; every message
            is one line that names ``what`` (e.g. ``"--step"``).
    """
    module_name, sep, attribute = str(spec).partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"{what} must look like MODULE:ATTRIBUTE (e.g. mytraining:make_loader), got {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # the current directory is importable, as with python -m
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - any failure to import is the user's to fix, in one line
        raise ValueError(f"cannot import {module_name!r} for {what}: {type(err).__name__}: {err}") from None
    obj: Any = module
    try:
        for part in attribute.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise ValueError(f"{module_name!r} has no attribute {attribute!r} ({what})") from None
    return obj, module
