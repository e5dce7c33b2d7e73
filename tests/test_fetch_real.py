"""The real-LFW path (``fetch_real_lfw``, with pooch) against a local HTTP server.

A thread serves a small tar.gz archive in the real archive's layout
(``lfw_funneled/<Person>/<Person>_0001.jpg``) on 127.0.0.1. The fetch is pointed at it
through its public ``archive`` parameter: a :class:`lfw_dataset.RemoteArchive` with the
local address and the archive's real checksum (or a wrong one). Nothing is patched.
"""

from __future__ import annotations

import hashlib
import http.server
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

import lfw_dataset
from lfw_dataset import DownloadError, RemoteArchive

from conftest import write_face

pytestmark = pytest.mark.unit

PEOPLE = {"Ada_Lovelace": 2, "Alan_Turing": 3, "Grace_Hopper": 1}
ARCHIVE_NAME = "lfw-funneled.tgz"


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder; records each GET; cuts off the body of paths in ``truncate``."""

    truncate: set[str] = set()
    requests: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        type(self).requests.append(self.path)
        if self.path.lstrip("/") in self.truncate:
            body = (Path(self.directory) / self.path.lstrip("/")).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 3])  # a third of the promised bytes ...
            self.wfile.flush()
            self.close_connection = True  # ... then the connection closes
            return
        super().do_GET()

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class Server:
    archive: RemoteArchive  # the served archive: local address, true checksum
    handler: type[_Handler]
    requests: list[str] = field(default_factory=list)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def lfw_server(tmp_path: Path) -> Iterator[Server]:
    """Serve a 3-person LFW archive from a thread on 127.0.0.1."""
    served = tmp_path / "served"
    tree = tmp_path / "made" / "lfw_funneled"
    seed = 0
    for person, n in PEOPLE.items():
        for k in range(1, n + 1):
            seed += 1
            write_face(tree / person / f"{person}_{k:04d}.jpg", seed)
    served.mkdir()
    with tarfile.open(served / ARCHIVE_NAME, "w:gz") as tar:
        tar.add(tree, arcname="lfw_funneled")

    handler = type("Handler", (_Handler,), {"truncate": set(), "requests": []})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: handler(*a, directory=str(served)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/{ARCHIVE_NAME}"
    archive = replace(lfw_dataset.LFW_FUNNELED, url=url, sha256=_sha256(served / ARCHIVE_NAME))
    try:
        yield Server(archive, handler, handler.requests)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _hidden_entries(folder: Path) -> list[str]:
    """Names starting with '.' in ``folder``: temporary trees, downloads, temp files."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def _all_files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_real_archive_is_declared_once_with_a_sha256():
    archive = lfw_dataset.LFW_FUNNELED
    assert archive.url.startswith("https://"), f"the real archive is fetched over HTTPS: {archive.url}"
    assert len(archive.sha256) == 64 and int(archive.sha256, 16) >= 0, f"not a SHA-256: {archive.sha256!r}"
    assert archive.tree == "lfw_funneled", f"the folder inside the funneled archive: {archive.tree!r}"


def test_fetch_builds_the_tree_in_lfw_layout(lfw_server, tmp_path):
    dest = tmp_path / "data" / "lfw-real"
    out = lfw_dataset.fetch_real_lfw(dest, archive=lfw_server.archive, progress=False, n_retries=0)
    assert out == dest, f"returns the tree's folder: {out}"
    assert (dest / ".complete").is_file(), "a finished tree carries its marker"
    people = sorted(p.name for p in dest.iterdir() if p.is_dir())
    assert people == sorted(PEOPLE), f"the person folders are the tree's top level: {people}"
    assert sorted(f.name for f in (dest / "Alan_Turing").iterdir()) == [
        "Alan_Turing_0001.jpg", "Alan_Turing_0002.jpg", "Alan_Turing_0003.jpg"], "files of one person"
    ds = lfw_dataset.LFWDataset(dest)
    assert len(ds) == sum(PEOPLE.values()) and ds[0][0].size == (32, 32), repr(ds)
    assert lfw_server.requests == [f"/{ARCHIVE_NAME}"], f"one download: {lfw_server.requests}"
    assert _hidden_entries(dest.parent) == [".lfw-downloads"], "only the verified archive is kept beside it"
    assert _all_files(dest.parent / ".lfw-downloads") == [ARCHIVE_NAME], "no temporary download file left"


def test_complete_tree_and_verified_archive_are_reused(lfw_server, tmp_path):
    dest = tmp_path / "data" / "lfw-real"
    lfw_dataset.fetch_real_lfw(dest, archive=lfw_server.archive, progress=False, n_retries=0)
    stamp = (dest / ".complete").stat().st_mtime_ns
    lfw_dataset.fetch_real_lfw(dest, archive=lfw_server.archive, progress=False, n_retries=0)
    assert (dest / ".complete").stat().st_mtime_ns == stamp, "a complete tree is not made again"
    lfw_dataset.fetch_real_lfw(dest, archive=lfw_server.archive, progress=False, n_retries=0, force=True)
    assert (dest / ".complete").stat().st_mtime_ns != stamp, "force=True makes the tree again"
    assert len(lfw_server.requests) == 1, f"the archive whose checksum matches is reused: {lfw_server.requests}"


def test_archive_that_no_longer_matches_is_downloaded_again(lfw_server, tmp_path):
    dest = tmp_path / "data" / "lfw-real"
    kept = tmp_path / "data" / ".lfw-downloads" / ARCHIVE_NAME
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"a damaged earlier download")
    lfw_dataset.fetch_real_lfw(dest, archive=lfw_server.archive, progress=False, n_retries=0)
    assert len(lfw_server.requests) == 1, f"a file whose checksum differs is fetched again: {lfw_server.requests}"
    assert _sha256(kept) == lfw_server.archive.sha256, "the damaged file was replaced by the verified one"


def test_checksum_mismatch_leaves_nothing(lfw_server, tmp_path):
    wrong = replace(lfw_server.archive, sha256="0" * 64)
    dest = tmp_path / "data" / "lfw-real"
    with pytest.raises(DownloadError, match="SHA-256") as err:
        lfw_dataset.fetch_real_lfw(dest, archive=wrong, progress=False, n_retries=0)
    assert "make data LFW=real" in str(err.value), f"the message says what to do: {err.value}"
    assert isinstance(err.value, OSError), "a DownloadError is an OSError"
    assert lfw_server.requests == [f"/{ARCHIVE_NAME}"], f"the archive was downloaded: {lfw_server.requests}"
    assert not dest.exists(), "no tree after a bad checksum"
    assert _all_files(dest.parent) == [], "no half-made folder and no temporary file either"


def test_interrupted_download_leaves_nothing(lfw_server, tmp_path):
    lfw_server.handler.truncate.add(ARCHIVE_NAME)
    dest = tmp_path / "data" / "lfw-real"
    with pytest.raises(DownloadError, match="could not download") as err:
        lfw_dataset.fetch_real_lfw(dest, archive=lfw_server.archive, progress=False, n_retries=0)
    assert "make data LFW=real" in str(err.value), f"the message says what to do: {err.value}"
    assert lfw_server.requests == [f"/{ARCHIVE_NAME}"], f"the download started: {lfw_server.requests}"
    assert not dest.exists(), "no tree after an interrupted download"
    assert _all_files(dest.parent) == [], "no half-made folder and no partial download either"


def test_interrupted_download_keeps_an_earlier_tree(lfw_server, tmp_path):
    dest = tmp_path / "data" / "lfw-real"
    downloads = tmp_path / "downloads"
    lfw_dataset.fetch_real_lfw(dest, archive=lfw_server.archive, download_dir=downloads,
                               progress=False, n_retries=0)
    (downloads / ARCHIVE_NAME).unlink()  # so the next fetch must download
    lfw_server.handler.truncate.add(ARCHIVE_NAME)
    with pytest.raises(DownloadError):
        lfw_dataset.fetch_real_lfw(dest, archive=lfw_server.archive, download_dir=downloads,
                                   progress=False, n_retries=0, force=True)
    assert len(lfw_server.requests) == 2, f"the second fetch did download: {lfw_server.requests}"
    assert len(lfw_dataset.LFWDataset(dest)) == sum(PEOPLE.values()), "the earlier tree survives"
    assert (dest / ".complete").is_file(), "and is still marked complete"
    assert not downloads.exists(), "no partial download left in the downloads folder"


def test_archive_without_the_expected_folder_is_refused(lfw_server, tmp_path):
    other = replace(lfw_server.archive, tree="lfw")  # the served archive holds lfw_funneled/
    dest = tmp_path / "data" / "lfw-real"
    with pytest.raises(DownloadError, match="no folder 'lfw'") as err:
        lfw_dataset.fetch_real_lfw(dest, archive=other, progress=False, n_retries=0)
    assert "lfw_funneled" in str(err.value), f"the message says what the archive holds: {err.value}"
    assert not dest.exists(), "no tree from an archive of the wrong layout"
    assert _hidden_entries(dest.parent) == [".lfw-downloads"], "no half-made folder left"


def test_progress_bars_are_shown(lfw_server, tmp_path, capsys):
    lfw_dataset.fetch_real_lfw(tmp_path / "lfw-real", archive=lfw_server.archive, n_retries=0)
    err = capsys.readouterr().err
    assert "extracting lfw-funneled.tgz" in err, f"the extraction's bar: {err!r}"
    assert "B/s" in err or "100%" in err, f"the download's bar: {err!r}"
