"""The real-LFW path (scikit-learn's fetcher) against a local HTTP server.

The server serves a small archive in the real layout (``lfw_funneled/<Person>/...``) and
the three pairs files; scikit-learn's remote-file constants are pointed at it.
"""

from __future__ import annotations

import hashlib
import http.server
import tarfile
import threading
from pathlib import Path

import pytest
from sklearn.datasets import _base, _lfw

import lfw_dataset

from conftest import write_face

PEOPLE = {"Ada_Lovelace": 2, "Alan_Turing": 3, "Grace_Hopper": 1}


class _Handler(http.server.SimpleHTTPRequestHandler):
    truncate: set[str] = set()  # paths served with a body shorter than announced
    requests: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's naming)
        type(self).requests.append(self.path)
        if self.path.lstrip("/") in self.truncate:
            body = (Path(self.directory) / self.path.lstrip("/")).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 3])  # then the connection drops
            self.close_connection = True
            return
        super().do_GET()

    def log_message(self, *args):
        pass


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def lfw_server(tmp_path, monkeypatch):
    """Serve a small LFW archive; yield ``(base_url, handler_class, served_dir)``."""
    served = tmp_path / "served"
    tree = tmp_path / "build" / "lfw_funneled"
    seed = 0
    for person, n in PEOPLE.items():
        for k in range(1, n + 1):
            seed += 1
            write_face(tree / person / f"{person}_{k:04d}.jpg", seed)
    served.mkdir()
    with tarfile.open(served / "lfw-funneled.tgz", "w:gz") as tar:
        tar.add(tree, arcname="lfw_funneled")
    for name in ("pairsDevTrain.txt", "pairsDevTest.txt", "pairs.txt"):
        (served / name).write_text("1\nAda_Lovelace\t1\t2\n")

    handler = type("Handler", (_Handler,), {"truncate": set(), "requests": []})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: handler(*a, directory=str(served)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"

    def meta(name):
        return _base.RemoteFileMetadata(filename=name, url=f"{base}/{name}", checksum=_sha256(served / name))

    monkeypatch.setattr(_lfw, "FUNNELED_ARCHIVE", meta("lfw-funneled.tgz"))
    monkeypatch.setattr(_lfw, "TARGETS", tuple(meta(n) for n in ("pairsDevTrain.txt", "pairsDevTest.txt", "pairs.txt")))
    yield base, handler, served
    server.shutdown()
    server.server_close()


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_fetch_builds_the_tree_and_reuses_it(lfw_server, tmp_path):
    _, handler, _ = lfw_server
    dest = tmp_path / "data" / "lfw-real"
    out = lfw_dataset.fetch_real_lfw(dest, n_retries=0)
    assert out == dest
    ds = lfw_dataset.LFWDataset(dest)
    assert ds.classes == sorted(PEOPLE), ds.classes
    assert len(ds) == sum(PEOPLE.values())
    assert ds[0][0].size == (32, 32)
    assert _leftovers(dest.parent) == [], "no temporary folder left behind"
    n_requests = len(handler.requests)
    assert n_requests == 4, f"three pairs files and one archive: {handler.requests}"
    lfw_dataset.fetch_real_lfw(dest, n_retries=0)
    assert len(handler.requests) == n_requests, "a complete tree is not fetched again"


def test_checksum_mismatch_leaves_nothing(lfw_server, tmp_path, monkeypatch):
    base, _, _ = lfw_server
    monkeypatch.setattr(_lfw, "FUNNELED_ARCHIVE", _base.RemoteFileMetadata(
        filename="lfw-funneled.tgz", url=f"{base}/lfw-funneled.tgz", checksum="0" * 64))
    dest = tmp_path / "data" / "lfw-real"
    with pytest.raises(OSError, match="(?i)checksum|sha256"):
        lfw_dataset.fetch_real_lfw(dest, n_retries=0)
    assert not dest.exists(), "no tree after a bad checksum"
    assert _leftovers(dest.parent) == [], "no half-made folder either"


def test_interrupted_download_leaves_nothing(lfw_server, tmp_path):
    _, handler, _ = lfw_server
    handler.truncate.add("lfw-funneled.tgz")
    dest = tmp_path / "data" / "lfw-real"
    with pytest.raises(OSError):
        lfw_dataset.fetch_real_lfw(dest, n_retries=0)
    assert not dest.exists(), "no tree after an interrupted download"
    assert _leftovers(dest.parent) == [], "no half-made folder either"


def test_interrupted_download_keeps_an_earlier_tree(lfw_server, tmp_path):
    _, handler, _ = lfw_server
    dest = tmp_path / "data" / "lfw-real"
    lfw_dataset.fetch_real_lfw(dest, n_retries=0)
    handler.truncate.add("lfw-funneled.tgz")
    with pytest.raises(OSError):
        lfw_dataset.fetch_real_lfw(dest, n_retries=0, force=True)
    assert len(lfw_dataset.LFWDataset(dest)) == sum(PEOPLE.values()), "the old tree survives"
