"""`make lab`, the README's first command: it serves the working copy for any user, root included.

The test starts the same command a student types, ``make lab``, with a free port and a
known token in ``LAB_ARGS``, in its own process group. It asks the server's contents API
for the notebooks folder, then stops the group and checks that nothing of it is left
running. Every wait is bounded, and the group is killed whatever happens.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(os.name != "posix" or shutil.which("make") is None,
                       reason="make lab needs make and POSIX process groups"),
]

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 90.0  # a cold start on a busy 2-core laptop; the usual start is a few seconds
STOP_TIMEOUT_S = 30.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def _group_alive(pgid: int) -> list[str]:
    """The processes of group ``pgid`` that still run (zombies waiting for a reaper excluded)."""
    alive = []
    for proc in psutil.process_iter(["pid", "name", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(f"{proc.pid} {proc.info['name']}")
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


def _stop_group(proc: subprocess.Popen, pgid: int) -> None:
    """SIGTERM the group (JupyterLab then shuts down cleanly); SIGKILL what is left after a while."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline and (proc.poll() is None or _group_alive(pgid)):
        time.sleep(0.2)
    if _group_alive(pgid) or proc.poll() is None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else "(no output)"


def test_make_lab_serves_the_working_copy_to_any_user(tmp_path):
    port, token = _free_port(), secrets.token_hex(16)
    lab_args = (f"--ServerApp.ip=127.0.0.1 --ServerApp.port={port} --ServerApp.port_retries=0 "
                f"--IdentityProvider.token={token}")
    # The test runs inside the environment with the data made, so tell make not to remake
    # them (a test must never reinstall packages); the recipe itself is the README's.
    command = ["make", "--no-print-directory", "-o", ".venv/.installed",
               "-o", "data/lfw-synthetic/.complete", "lab", f"LAB_ARGS={lab_args}", f"WORK={tmp_path / 'work'}"]
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "LFW": "synthetic"}
    log = tmp_path / "lab.log"
    base = f"http://127.0.0.1:{port}"
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    pgid = proc.pid  # start_new_session: the group of make and everything it starts
    try:
        listing = None
        deadline = time.monotonic() + START_TIMEOUT_S
        while listing is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                listing = _get_json(f"{base}/api/contents/?token={token}")
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        assert proc.poll() is None, f"make lab stopped (exit {proc.returncode}):\n{_tail(log)}"
        assert listing is not None, f"no answer on port {port} after {START_TIMEOUT_S} s:\n{_tail(log)}"

        names = sorted(item["name"] for item in listing["content"] if item["type"] == "directory")
        on_disk = sorted(p.name for p in (ROOT / "notebooks").iterdir()
                         if p.is_dir() and not p.name.startswith("."))
        assert "00_orientation" in names, f"the first notebook's folder is served: {names}"
        assert names == on_disk, f"the server lists the working copy of notebooks/: {names} != {on_disk}"
        first = _get_json(f"{base}/api/contents/00_orientation?token={token}")
        files = {item["name"]: item["type"] for item in first["content"]}
        assert files.get("00_orientation.ipynb") == "notebook", f"the notebook itself is served: {files}"
        copy = tmp_path / "work" / "00_orientation" / "00_orientation.ipynb"
        assert copy.read_bytes() == (ROOT / "notebooks" / "00_orientation" / "00_orientation.ipynb").read_bytes(), (
            "the server's folder is the working copy made from the release")

        with pytest.raises(urllib.error.HTTPError) as refused:
            _get_json(f"{base}/api/contents/")
        assert refused.value.code == 403, f"without the token the server refuses: {refused.value}"
    finally:
        _stop_group(proc, pgid)
    left = _group_alive(pgid)
    assert left == [], f"processes of make lab still running after it was stopped: {left}"
    assert proc.returncode is not None, "make itself has exited"
