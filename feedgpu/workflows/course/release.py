"""Regenerate the student release, ``notebooks/``, from the solutions, ``solutions/``.

nbgrader's ``generate_assignment`` strips the solutions and hidden tests, locks the test
cells and records their checksums. We run it into a scratch folder and swap the result
into place only when every assignment succeeded, so a failure never leaves a half-made
release. Usage: ``feedgpu-release [--dest DIR] [ASSIGNMENT ...]``.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
from pathlib import Path

from ...base.cli import OneLineParser, UsageError, run_command
from ...base.files import replacing_folder
from .. import COURSE_ROOT as ROOT
from ..grading.course_layout import NBGRADER, SOURCE, assignments, nbgrader_env

RELEASE = ROOT / "notebooks"

logger = logging.getLogger("release")


def generate(dest: Path, names: list[str] | None = None, source: Path = SOURCE) -> Path:
    """Write the release of ``names`` (default: all) from ``source`` to ``dest``, replacing it whole.

    All of them in one nbgrader run (its assignment id ``*`` is a pattern): each run of
    nbgrader costs seconds before it does anything.

    Raises:
        subprocess.CalledProcessError: nbgrader failed on an assignment (``dest`` untouched).
    """
    source = Path(source).resolve()
    every = assignments(source)
    names = names or every
    dest = Path(dest).resolve()
    with replacing_folder(dest) as new, tempfile.TemporaryDirectory(prefix=".release-", dir=dest.parent) as tmp:
        out = Path(tmp) / "release"
        for pattern in (["*"] if sorted(names) == every else names):
            logger.info("generating %s", pattern)
            subprocess.run(
                [str(NBGRADER), "generate_assignment", pattern, "--force", "--log-level=WARN",
                 f"--CourseDirectory.root={ROOT}",
                 f"--CourseDirectory.source_directory={source}",
                 f"--CourseDirectory.release_directory={out}",
                 f"--db=sqlite:///{Path(tmp) / 'gradebook.db'}"],
                cwd=ROOT, check=True, env=nbgrader_env(),
            )
        made = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
        if made != sorted(names):  # nbgrader goes on after a failed assignment
            raise subprocess.CalledProcessError(1, "nbgrader generate_assignment",
                                                f"released {made}, expected {sorted(names)}")
        for folder in out.iterdir():
            folder.rename(new / folder.name)
    return dest


def main(argv: list[str] | None = None) -> int:
    return run_command("feedgpu-release", _main, argv, interrupted="interrupted: notebooks/ is as it was")


def _main(argv: list[str]) -> int:
    parser = OneLineParser(prog="feedgpu-release", description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*", help="default: every folder of solutions/")
    parser.add_argument("--dest", type=Path, default=RELEASE, help="release folder (default notebooks/)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="release: %(message)s")
    if args.assignments and args.dest == RELEASE:
        raise UsageError("a partial release would drop the other assignments from notebooks/; use --dest")
    dest = generate(args.dest, args.assignments or None)
    print(f"release written to {dest} ({', '.join(args.assignments or assignments())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
