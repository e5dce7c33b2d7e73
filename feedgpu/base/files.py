"""Files and folders written whole or not at all: a reader sees the old one or the new one.

* :func:`write_atomically`: a file's text or bytes go to a temporary file in the same
  folder (the same file system, so the rename is atomic), which then replaces the file;
  :func:`write_json_atomically` is the same for a JSON document.
* :func:`replacing_folder`: a folder is built beside its destination and swapped into
  place only when the block that builds it ends without an error; the old folder is
  removed after the swap. A failure leaves the old folder as it was, and no scratch.

Every writer of the course goes through these two (the graders' status, the bench's JSON,
the diagnosis's ``--json``, the readings folders, the release, the site, the data set).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["write_atomically", "write_json_atomically", "replacing_folder"]


def write_atomically(path: str | os.PathLike, content: str | bytes, *, mode: int | None = None) -> Path:
    """Write ``content`` (text as UTF-8, or bytes) to ``path`` whole or not at all; return the path.

    The parent folder is made if missing. ``mode`` sets the file's permission bits (the
    temporary file is made readable by its owner alone).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content.encode("utf-8") if isinstance(content, str) else content)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomically(path: str | os.PathLike, obj: Any, **dump_options: Any) -> Path:
    """Write ``obj`` as JSON (``json.dumps(obj, **dump_options)``) whole or not at all."""
    return write_atomically(path, json.dumps(obj, **dump_options))


@contextmanager
def replacing_folder(dest: str | os.PathLike, *, keep_existing: bool = False) -> Iterator[Path]:
    """Build a folder in the block, then swap it in at ``dest``; on an error leave ``dest`` as it was.

    Yields an empty scratch folder beside ``dest`` (the same file system). When the block
    ends without an error, an existing ``dest`` is moved aside, the scratch folder renamed
    to ``dest``, and the old one removed; when it raises, the scratch folder is removed
    and ``dest`` is untouched.

    Args:
        keep_existing: if ``dest`` exists when the block ends, keep it and drop the new
            one (two builders raced: the first one's folder stands, whole).
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{dest.name}-", dir=dest.parent) as tmp:
        scratch = Path(tmp) / "new"
        scratch.mkdir()
        yield scratch
        if dest.exists():
            if keep_existing:
                return
            dest.rename(Path(tmp) / "old")
        try:
            scratch.rename(dest)
        except OSError:
            if keep_existing and dest.exists():
                return  # another builder put its folder there meanwhile
            raise
