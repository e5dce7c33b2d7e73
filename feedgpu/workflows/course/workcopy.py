"""The student's working copy: ``work/``, their own notebooks, made from the release and never overwritten.

Usage: ``make lab`` (which runs this first), or ``python -m feedgpu.workflows.course.workcopy``.

Students used to work in ``notebooks/``, the release itself: a notebook run and saved
there made the course's own tests fail (the release carries no outputs), and pulling the
next release of the course conflicted with their work. Now:

* the first time, every release notebook folder is copied to ``work/`` (ignored by git),
  and a manifest, ``work/.release.json``, keeps the SHA-256 of each release file as it
  was copied;
* later, a release file that is new is copied; one that changed since it was delivered
  is put **beside** the student's file, as ``<name>.updated.ipynb`` (their file is never
  touched, nothing is merged), with one line that says so; the manifest then records the
  version delivered, so the line is said once;
* a file the student deleted from ``work/`` is copied again (a fresh start for that
  notebook: delete it, run ``make lab``);
* the course's reference pages (:data:`REFERENCE_FILES`: the glossary and the rubrics of
  the reflections), which the notebooks link to as ``../GLOSSARY.md``, are kept in
  ``work/`` as the course has them: JupyterLab opens on ``work/`` and cannot reach files
  above it. They are the course's, not the student's, so they are replaced when they change.

``make check NB=03`` grades ``work/03_*`` (:mod:`feedgpu.workflows.course.check`), and
``make test`` never looks at ``work/``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

from ...base.cli import OneLineParser, UsageError, run_command
from ...base.files import write_atomically, write_json_atomically
from .. import COURSE_ROOT as ROOT
from .release import RELEASE

__all__ = ["WORK", "MANIFEST", "UPDATED", "REFERENCE_FILES", "update_work", "main"]

#: The student's working copy.
WORK = ROOT / "work"
#: The manifest of what was delivered from the release, inside the working copy.
MANIFEST = ".release.json"
#: The suffix of a newer release version put beside the student's file.
UPDATED = ".updated"
#: The course's reference pages, at its root, that the notebooks link to (``../GLOSSARY.md``).
REFERENCE_FILES = ("GLOSSARY.md", "RUBRICS.md")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _release_files(release: Path) -> list[Path]:
    """Every file of the release's notebook folders, relative to the release, sorted."""
    if not release.is_dir():
        raise FileNotFoundError(f"no release folder {release}: clone the course again, or run `make release`")
    files = []
    for folder in sorted(p for p in release.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files += [p.relative_to(release) for p in sorted(folder.rglob("*"))
                  if p.is_file() and ".ipynb_checkpoints" not in p.parts and "__pycache__" not in p.parts]
    return files


def _copy(src: Path, dst: Path) -> None:
    """Copy ``src`` to ``dst`` through a temporary file, so a failure leaves no half-written notebook."""
    write_atomically(dst, src.read_bytes())
    shutil.copystat(src, dst)


def updated_name(path: Path) -> Path:
    """Where a newer release version of ``path`` goes: ``03_x.ipynb`` -> ``03_x.updated.ipynb``."""
    return path.with_name(f"{path.stem}{UPDATED}{path.suffix}")


def update_work(release: Path = RELEASE, work: Path = WORK, course: Path = ROOT) -> list[str]:
    """Bring ``work`` up to date with ``release`` without touching a file the student has,
    and the reference pages (:data:`REFERENCE_FILES`) up to date with ``course``'s.

    Returns:
        One line per thing done that the student should know of (copied folders, a
        newer version put beside theirs); empty when nothing changed.
    """
    files = _release_files(release)
    work.mkdir(parents=True, exist_ok=True)
    manifest_path = work / MANIFEST
    delivered: dict[str, str] = {}
    if manifest_path.is_file():
        try:
            delivered = dict(json.loads(manifest_path.read_text(encoding="utf-8")))
        except (ValueError, TypeError):
            delivered = {}  # a damaged manifest: every file the student has is kept as it is
    said: list[str] = []
    copied: list[str] = []
    for rel in files:
        key = rel.as_posix()
        src, dst = release / rel, work / rel
        digest = _sha256(src)
        if not dst.exists():
            _copy(src, dst)
            copied.append(rel.parts[0])
        elif delivered.get(key) != digest and _sha256(dst) != digest:
            beside = updated_name(dst)
            _copy(src, beside)
            said.append(f"{rel.parts[0]}: the course changed {rel.name} since your copy; the new version is beside "
                        f"yours as {work.name}/{rel.parent.as_posix()}/{beside.name} (yours is untouched)")
        delivered[key] = digest
    write_json_atomically(manifest_path, delivered)
    for name in REFERENCE_FILES:
        src, dst = Path(course) / name, work / name
        if src.is_file() and (not dst.is_file() or _sha256(dst) != _sha256(src)):
            _copy(src, dst)
    return [f"{folder}: copied to {work.name}/{folder}/ (your working copy)" for folder in sorted(set(copied))] + said


def main(argv: list[str] | None = None) -> int:
    """Make or update ``work/``; print what was done in one line each."""
    return run_command("work copy", _main, argv)


def _main(argv: list[str]) -> int:
    parser = OneLineParser(prog="python -m feedgpu.workflows.course.workcopy",
                                     description="Make or update the working copy work/ from the release notebooks/.")
    parser.add_argument("--release", type=Path, default=RELEASE, help="the release (default notebooks/)")
    parser.add_argument("--work", type=Path, default=WORK, help="the working copy (default work/)")
    args = parser.parse_args(argv)
    try:
        lines = update_work(args.release, args.work)
    except (OSError, FileNotFoundError) as err:
        raise UsageError(str(err)) from None
    for line in lines:
        print(line)
    if not lines:
        print(f"{args.work.name}/ is up to date with the course's release")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
