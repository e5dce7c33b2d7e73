"""``feedgpu-diagnose MODULE:FACTORY``: the diagnosis from a shell.

::

    feedgpu-diagnose mytraining:make_loader --step-ms 30
    feedgpu-diagnose mytraining:make_loader --step mytraining:train_step --max-seconds 120 --json out.json
    feedgpu-diagnose --replay out.json --step-ms 8 --cores 16      # what if: no loader needed
    feedgpu-diagnose run --max-seconds 60 -- python train.py --workers 0   # an unchanged script

``FACTORY()`` returns your DataLoader (the ``module:attribute`` form of uvicorn and
gunicorn; the current directory is importable). Prints the report and exits 0; exits 2
with a one-line reason, and no traceback, for a bad argument, or a factory (or step) that
cannot be imported, raises, or returns no DataLoader.

``run [--max-seconds S] [--no-try] [--json PATH] [--plot PATH] [--quiet] -- COMMAND``
diagnoses the training loop of a script as it is, and runs it again with the setting to
try first changed (:mod:`~feedgpu.diagnosis.modes.script`).

``--replay FILE`` recomputes a diagnosis from its ``--json`` file
(:func:`feedgpu.diagnosis.replay`): no factory, no step, nothing measured; ``--step-ms``
and ``--cores`` then ask what the loop would do with that step, or on that machine.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from ..base.cli import OneLineParser, UsageError, import_named, run_command
from ..base.files import write_json_atomically

__all__ = ["main", "UsageError", "build_loader"]

PROG = "feedgpu-diagnose"


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description="Diagnose a DataLoader's feeding of a training step: what the loop "
                     "waits for, why, and the setting to try first (predicted, then measured).")
    parser.add_argument("factory", metavar="MODULE:FACTORY", nargs="?",
                        help="a function that returns your DataLoader (not with --replay)")
    steps = parser.add_mutually_exclusive_group()
    steps.add_argument("--step-ms", type=float, metavar="X", help="a simulated step of X milliseconds")
    steps.add_argument("--step", metavar="MODULE:FUNCTION", help="your training step, a function of a batch")
    parser.add_argument("--max-seconds", type=float, default=60.0, metavar="S", help="the budget (default 60)")
    parser.add_argument("--no-try", action="store_true", help="predict the fix but do not try it")
    parser.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    parser.add_argument("--plot", metavar="PATH", help="save the plot (PNG, SVG or PDF, by the ending)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--replay", metavar="FILE", help="recompute a diagnosis from its --json file, without a loader")
    parser.add_argument("--cores", type=float, metavar="N", help="with --replay: what if the machine had N cores")
    return parser


def _load(spec: str, what: str) -> Any:
    """The object named by ``MODULE:ATTRIBUTE`` (:func:`feedgpu.base.cli.import_named`)."""
    try:
        return import_named(spec, what)[0]
    except ValueError as err:
        raise UsageError(str(err)) from None


def build_loader(factory: Any, spec: str) -> Any:
    """``factory()``, the user's DataLoader (``spec`` names the factory in the messages).

    Raises:
        UsageError: the factory raised, or returned something other than a DataLoader.
    """
    from torch.utils.data import DataLoader

    try:
        loader = factory()
    except Exception as err:  # noqa: BLE001 - the factory's failure, reported in one line
        raise UsageError(f"{spec}() raised {type(err).__name__}: {err}") from None
    if not isinstance(loader, DataLoader):
        raise UsageError(f"{spec}() returned a {type(loader).__name__}, not a torch.utils.data.DataLoader")
    return loader


def _loader(spec: str) -> Any:
    factory = _load(spec, "the factory")
    if not callable(factory):
        raise UsageError(f"{spec} is not callable: give a function that returns your DataLoader")
    return build_loader(factory, spec)


def _run_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=f"{PROG} run", description="Diagnose the training loop of an unchanged script: "
                           "run it, measure its loop, name the causes, then run it again with the setting to try "
                           "first changed.")
    parser.add_argument("--max-seconds", type=float, default=60.0, metavar="S",
                        help="the budget of both runs (default 60; Python's start-up comes on top)")
    parser.add_argument("--no-try", action="store_true", help="predict the fix but do not run the script again")
    parser.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    parser.add_argument("--plot", metavar="PATH", help="save the plot (PNG, SVG or PDF, by the ending)")
    parser.add_argument("--quiet", action="store_true", help="hide the script's own output")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                        help="how you run the script: python train.py ARGS, or python -m MODULE ARGS")
    return parser


def _answer(prog: str, compute: Any, stopped: str) -> int:
    """Run ``compute()`` (which returns the result and its arguments), print and write the
    result; exit 2 with a one-line reason for a :class:`UsageError`, 130 on Ctrl-C."""
    def body(_argv: list[str]) -> None:
        result, args = compute()
        _write(result, args)

    return run_command(prog, body, [], interrupted=f"interrupted ({stopped})")


def _check_budget(max_seconds: float) -> None:
    if not max_seconds > 0 or max_seconds == float("inf"):
        raise UsageError(f"--max-seconds must be a finite number > 0, got {max_seconds}")


def _run_script(argv: Sequence[str]) -> tuple[Any, argparse.Namespace]:
    """``feedgpu-diagnose run ... -- COMMAND``: the result and the arguments."""
    from .modes.script import ScriptError, diagnose_script

    args = _run_parser().parse_args(list(argv))
    _check_budget(args.max_seconds)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        return diagnose_script(command, args.max_seconds, try_fix=not args.no_try, echo=not args.quiet), args
    except ScriptError as err:
        raise UsageError(str(err)) from None


def _factory_form(argv: Sequence[str]) -> tuple[Any, argparse.Namespace]:
    """``feedgpu-diagnose MODULE:FACTORY ...`` or ``--replay FILE``: the result and the arguments."""
    args = _parser().parse_args(list(argv))
    if args.step_ms is not None and not (args.step_ms >= 0 and args.step_ms != float("inf")):
        raise UsageError(f"--step-ms must be a finite number >= 0, got {args.step_ms}")
    _check_budget(args.max_seconds)
    return (_replay(args) if args.replay is not None else _diagnose(args)), args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status (0 done, 2 a bad argument or factory, 130 Ctrl-C)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:
        return _answer(f"{PROG} run", lambda: _run_script(argv[1:]), "the script's processes were stopped")
    return _answer(PROG, lambda: _factory_form(argv), "every worker was stopped")


def _replay(args: argparse.Namespace) -> Any:
    """The diagnosis recomputed from ``--replay FILE``, with ``--step-ms`` and ``--cores``."""
    if args.factory is not None or args.step is not None:
        raise UsageError("--replay takes no factory and no --step: it recomputes the diagnosis from its file")
    if args.cores is not None and not (1 <= args.cores < float("inf")):
        raise UsageError(f"--cores must be a finite number >= 1, got {args.cores}")
    from .modes.replay import replay

    try:
        return replay(args.replay, step_s=None if args.step_ms is None else args.step_ms / 1e3, cores=args.cores)
    except FileNotFoundError:
        raise UsageError(f"--replay {args.replay}: no such file") from None
    except (TypeError, ValueError) as err:
        raise UsageError(f"--replay {args.replay}: {err}") from None


def _diagnose(args: argparse.Namespace) -> Any:
    """The diagnosis of ``FACTORY()``'s loader with the step asked for."""
    if args.factory is None:
        raise UsageError("give MODULE:FACTORY (a function that returns your DataLoader), or --replay FILE")
    if args.step_ms is None and args.step is None:
        raise UsageError("give the step: --step-ms X (a simulated step) or --step MODULE:FUNCTION (yours)")
    if args.cores is not None:
        raise UsageError("--cores is for --replay: a diagnosis measures the machine it runs on")
    loader = _loader(args.factory)
    step = None
    if args.step is not None:
        step = _load(args.step, "--step")
        if not callable(step):
            raise UsageError(f"--step {args.step} is not callable: give a function that takes a batch")
    from .modes.live import diagnose

    try:
        return diagnose(loader, step, step_s=None if step is not None else args.step_ms / 1e3,
                        max_seconds=args.max_seconds, try_fix=not args.no_try, progress=not args.quiet)
    except (TypeError, ValueError) as err:
        raise UsageError(f"{type(err).__name__}: {err}") from None


def _write(result: Any, args: argparse.Namespace) -> None:
    """Print the report; write its JSON and plot where asked."""
    print(result)
    if args.json:
        write_json_atomically(args.json, result.to_dict(), indent=2)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from .plot import plot_diagnosis

        axes = plot_diagnosis(result)
        axes[0].figure.savefig(args.plot, bbox_inches="tight")
        plt.close(axes[0].figure)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
