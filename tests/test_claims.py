"""Every claim the course makes about a library's behaviour, tied to the source that shows it.

Students copy what the course says into their own work, and a library changes between
versions: a default moves, a function starts doing something else. Each claim below is
listed once, with where the course says it (a notebook's cell, by its id, or a file of
the repository) and what shows it:

* **installed source**: a file of the pinned, installed package (found through the
  package's ``__file__``, so the test reads what ``make`` installed) and a fragment of its
  code. The test fails when the fragment is gone from the library (the claim may have
  become false) or the course's sentence is gone (the claim moved: list it again);
* **a document or compiled code**: the wheel ships no source for CUDA's rules, the
  kernel's, or ``aten/src/ATen/native/cuda/Copy.cu``; the claim names the document (or the
  upstream path at the pinned version's tag) and the test checks the course still cites it.
  Where an installed header shows the same (``memcpy_and_sync`` in
  ``include/c10/cuda/CUDAFunctions.h``), a claim of its own holds the header to it;
* **the running interpreter**: where the claim is about Python or the kernel this test runs
  on, a small check shows it here and now.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
#: The PyTorch whose source the claims are read in (requirements.txt pins it).
PINNED_TORCH = "2.14.1"


def _words(text: str) -> str:
    return " ".join(text.split())


def _course_text(where: str) -> str:
    """What the course says at ``where``: ``"05:03b42dc8"`` (notebook 05's cell of that id,
    in ``solutions/``) or a repository file's path."""
    if ":" in where and where.split(":")[0].isdigit():
        number, cell_id = where.split(":")
        [path] = sorted(ROOT.glob(f"solutions/{number}_*/{number}_*.ipynb"))
        cells = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c.get("id") == cell_id]
        assert cells, f"notebook {number} has no cell {cell_id}: the claim moved, list it where it is now"
        return "".join(cells[0]["source"])
    return (ROOT / where).read_text(encoding="utf-8")


def _installed(package: str, path: str) -> str:
    """A file of an installed package, found through its ``__file__``."""
    folder = Path(importlib.import_module(package).__file__).parent
    return (folder / path).read_text(encoding="utf-8", errors="replace")


def _socket_recv_is_not_in_rchar() -> bool:
    """64 KiB received by ``socket.recv`` leave ``rchar`` almost where it was; read by
    ``os.read`` from a pipe, they are all in it (Linux)."""
    import psutil

    me, data = psutil.Process(), b"x" * 65536
    a, b = socket.socketpair()
    threading.Thread(target=b.sendall, args=(data,)).start()
    before, got = me.io_counters().read_chars, 0
    while got < len(data):
        got += len(a.recv(len(data) - got))
    by_recv = me.io_counters().read_chars - before
    r, w = os.pipe()
    threading.Thread(target=os.write, args=(w, data)).start()
    before, got = me.io_counters().read_chars, 0
    while got < len(data):
        got += len(os.read(r, len(data) - got))
    by_read = me.io_counters().read_chars - before
    for fd in (r, w):
        os.close(fd)
    a.close()
    b.close()
    return by_recv < 1024 <= len(data) <= by_read


def _tls_reads_are_in_rchar() -> bool:
    """1 MiB received over TLS (Python's ``ssl``, OpenSSL underneath) raises ``rchar`` by at
    least 1 MiB: OpenSSL reads its socket with ``read(2)``, not ``recv`` (Linux)."""
    import shutil
    import ssl
    import subprocess
    import tempfile

    import psutil

    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl command here to make the test's certificate")
    data = b"x" * 2**20
    with tempfile.TemporaryDirectory() as tmp:
        key, cert = os.path.join(tmp, "key.pem"), os.path.join(tmp, "cert.pem")
        subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "1", "-subj", "/CN=localhost"], check=True, capture_output=True, timeout=60)
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.load_cert_chain(cert, key)
        client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client.check_hostname, client.verify_mode = False, ssl.CERT_NONE
        with socket.create_server(("127.0.0.1", 0)) as listener:
            def serve() -> None:
                conn, _ = listener.accept()
                with server.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(data)
                    tls.recv(1)  # until the client has read it all and closes

            sender = threading.Thread(target=serve)
            sender.start()
            with client.wrap_socket(socket.create_connection(listener.getsockname())) as tls:
                me = psutil.Process()
                before, got = me.io_counters().read_chars, 0
                while got < len(data):
                    got += len(tls.recv(len(data) - got))
                by_tls = me.io_counters().read_chars - before
            sender.join(timeout=30)
    return by_tls >= len(data)


def _h200():
    """The recorded H200's readings folder, through :mod:`feedgpu.readings` (the one module that reads them)."""
    from feedgpu.readings import load_readings

    return load_readings("h200-2026-11-26")


def _h200_bench_loop_gb_per_s() -> float:
    """The recorded H200's bench loop of pageable copies: its copy's bandwidth, the loop's
    time less its compute, per batch."""
    [loop] = [loop for loop in _h200().copy_loops if loop.name == "bench, plain copies"]
    return loop.batch_bytes / ((loop.measured_s - loop.n_batches * loop.compute_s) / loop.n_batches) / 1e9


def _h200_bench_plain_loop_against_copies_alone() -> bool:
    """The recorded H200's bench put its plain loop at 0.64 of the model, whose pageable line
    was fitted to copies timed alone (its bench has no figure of copies in a loop)."""
    figures = {f["name"]: f for f in _h200().bench}
    return (round(float(figures["gpu model / measured, plain loop"]["value"]), 2) == 0.64
            and "fit over 4 KiB-64 MiB" in figures["gpu H2D bandwidth, pageable"]["note"]
            and "gpu H2D bandwidth, pageable in a loop" not in figures)


@dataclass(frozen=True)
class Claim:
    """One claim: where the course says it, and what shows it (see the module's docstring)."""

    where: str
    says: str
    package: str | None = None
    path: str | None = None
    code: tuple[str, ...] = ()
    document: str | None = None
    cites: str | None = None
    check: Callable[[], bool] | None = None
    only_on: str | None = None  # a sys.platform prefix the check needs


CLAIMS: dict[str, Claim] = {
    "the pin thread pins on one torch thread": Claim(
        "05:03b42dc8", "`torch.set_num_threads(1)` in `_pin_memory_loop`, `torch/utils/data/_utils/pin_memory.py`",
        "torch", "utils/data/_utils/pin_memory.py", ("def _pin_memory_loop(", "torch.set_num_threads(1)")),
    "a host copy on one thread is what the pin thread pays": Claim(
        "05:03a9d9d9", "it sets `torch.set_num_threads(1)` for itself",
        "torch", "utils/data/_utils/pin_memory.py", ("torch.set_num_threads(1)",)),
    "a worker runs its items on one torch thread": Claim(
        "feedgpu/diagnosis/sensing/probes.py", "``torch/utils/data/_utils/worker.py``, line 274: ``torch.set_num_threads(1)``",
        "torch", "utils/data/_utils/worker.py", ("torch.set_num_threads(1)",)),
    "pin_memory=True pins only where an accelerator is": Claim(
        "feedgpu/diagnosis/sensing/probes.py", "``self._pin_memory = loader.pin_memory and torch.accelerator.is_available()``",
        "torch", "utils/data/dataloader.py", ("self._pin_memory = loader.pin_memory and torch.accelerator.is_available()",)),
    "with 0 workers the main thread pins inside next()": Claim(
        "feedgpu/models/copies.py", "``_SingleProcessDataLoaderIter._next_data``",
        "torch", "utils/data/dataloader.py",
        ("class _SingleProcessDataLoaderIter(", "data = _utils.pin_memory.pin_memory(data, self._pin_memory_device)")),
    "the DataLoader turns pin_memory off on MPS, with a warning": Claim(
        "05:befa4455", "on MPS (Apple silicon) PyTorch 2.14's DataLoader turns it off, with a warning too",
        "torch", "utils/data/dataloader.py", ("if self._pin_memory_device == \"mps\":", "not supported on MPS now")),
    "a blocking copy is cudaMemcpyAsync, then a sync of its own stream": Claim(
        "05:12d577aa", "(`cudaMemcpyAsync`, then `cudaStreamSynchronize` of that stream)",
        "torch", "include/c10/cuda/CUDAFunctions.h",
        ("memcpy_and_sync(", "cudaMemcpyAsync(dst, src, nbytes, kind, stream)", "cudaStreamSynchronize(stream)")),
    "every copy to the device goes through copy_kernel_cuda (compiled)": Claim(
        "05:03b42dc8", "`copy_kernel_cuda` in PyTorch's `aten/src/ATen/native/cuda/Copy.cu`",
        document=f"pytorch/pytorch at v{PINNED_TORCH}: aten/src/ATen/native/cuda/Copy.cu (shipped compiled)",
        cites="aten/src/ATen/native/cuda/Copy.cu"),
    "a pageable copy may be synchronous and is staged (CUDA's rules)": Claim(
        "05:03b42dc8", "CUDA's \"API synchronization behavior\" page says of the asynchronous copies",
        document="CUDA Runtime API, section 'API synchronization behavior' (Memcpy, asynchronous)",
        cites="API synchronization behavior"),
    "the caching host allocator counts the blocks it asks CUDA for": Claim(
        "05:c4d9e258", "the allocator counts the blocks it asked for, where this PyTorch counts them",
        "torch", "cuda/memory.py", ("def host_memory_stats(", "num_host_alloc")),
    "torch 2.14 can empty the cache of pinned blocks": Claim(
        "05:c4d9e258", "`torch.accelerator.empty_host_cache()`",
        "torch", "accelerator/memory.py", ("def empty_host_cache(",)),
    "default_collate stacks into shared memory in a worker": Claim(
        "03:fab95054", "in a worker, the default collate stacks the items straight into *shared memory*",
        "torch", "utils/data/_utils/collate.py",
        ("if torch.utils.data.get_worker_info() is not None:", "elem._typed_storage()._new_shared(numel, device=elem.device)")),
    "prefetch_factor is 2 with workers when not given": Claim(
        "feedgpu/diagnosis/sensing/cloning.py", "with workers, ``prefetch_factor`` None means 2",
        "torch", "utils/data/dataloader.py", ("elif num_workers > 0 and prefetch_factor is None:", "prefetch_factor = 2")),
    "next() returns batches in order by default": Claim(
        "03:ce59135c", "(`in_order=True`, the default)",
        "torch", "utils/data/dataloader.py", ("in_order: bool = True",)),
    "DataLoader warns of more workers than it suggests": Claim(
        "feedgpu/diagnosis/sensing/runs.py", "``check_worker_number_rationality`` warns when a loader has more workers than its",
        "torch", "utils/data/dataloader.py", ("def check_worker_number_rationality(", "This DataLoader will create")),
    "torch pickles a tensor for multiprocessing as a handle to shared memory": Claim(
        "06:a7c32cc4", "(`torch/multiprocessing/reductions.py`): it moves the tensor's memory into *shared memory*",
        "torch", "multiprocessing/reductions.py", ("def reduce_storage(", "storage._share_fd_cpu_()")),
    "the collector writes only into the objects it tracks": Claim(
        "06:3132ca83", "walks every object it *tracks* and writes a field in each one's header",
        check=lambda: (not gc.is_tracked("a str") and not gc.is_tracked({"a": 1, "b": "x"}) and gc.is_tracked([1])
                       and gc.is_tracked({"a": [1]}))),
    "gc.freeze is the documented way to keep the collector off a forked heap": Claim(
        "06:3132ca83", "`gc.freeze()` (Python 3.7+), called just before the fork",
        document="Python's library reference, gc.freeze ('recommended ... before a POSIX fork() call')",
        cites="the Python documentation recommends it", check=lambda: hasattr(gc, "freeze")),
    "fork was Linux's default start method up to Python 3.13, forkserver from 3.14": Claim(
        "GLOSSARY.md", "Linux's default up to Python 3.13; from 3.14 the default on Linux and the other POSIX systems",
        document="Python's library reference, multiprocessing, 'Contexts and start methods' (changed in 3.14)",
        cites="multiprocessing` documentation"),
    "rchar counts the read(2) family, not a socket's recv": Claim(
        "feedgpu/diagnosis/sensing/io_counters.py", "A socket read with ``recv`` or ``recv_into`` is not in ``rchar``",
        document="proc_pid_io(5): rchar, the bytes read(2) and its kin returned", cites="proc_pid_io(5)",
        check=_socket_recv_is_not_in_rchar, only_on="linux"),
    "the recorded H200's bench loop of pageable copies ran at 7.1 GB/s": Claim(
        "05:ee1ed3cd", "the bench's loop of such copies ran at 7.1 GB/s on that H200",
        check=lambda: round(_h200_bench_loop_gb_per_s(), 1) == 7.1),
    "the same in the copy model's docstring": Claim(
        "feedgpu/models/copies.py", "bench's loop of such copies ran at 7.1 GB/s",
        check=lambda: round(_h200_bench_loop_gb_per_s(), 1) == 7.1),
    "the recorded H200's own bench put its pageable loop at 0.64, with copies timed alone": Claim(
        "05:d5e0f369", "the recorded H200's own bench, whose model then took one line fitted to the copies it had "
        "timed alone, put its pageable loop at 0.64 of what it measured",
        check=_h200_bench_plain_loop_against_copies_alone),
    "over TLS, OpenSSL reads with read(2), so an HTTPS client's bytes are in rchar": Claim(
        "feedgpu/diagnosis/sensing/io_counters.py", "Over TLS the same clients' bytes are counted: OpenSSL reads its socket with ``read(2)``",
        document="OpenSSL's socket BIO (crypto/bio/bss_sock.c: readsocket, read(2) on Unix)",
        cites="OpenSSL reads its socket", check=_tls_reads_are_in_rchar, only_on="linux"),
    "the README says the same of plain HTTP and HTTPS": Claim(
        "README.md", "Python's HTTP clients use on a plain-HTTP connection: a loader that fetches items over plain HTTP "
        "shows no reads, so its storage cannot be named here (over HTTPS, which boto3 speaks to S3 by default, OpenSSL "
        "reads the socket with `read(2)` and the bytes count)",
        check=lambda: _socket_recv_is_not_in_rchar() and _tls_reads_are_in_rchar(), only_on="linux"),
    "psutil's iowait is the kernel's delayacct_blkio_ticks": Claim(
        "feedgpu/diagnosis/sensing/io_counters.py", "psutil's ``cpu_times().iowait``",
        "psutil", "_pslinux.py", ("ret['blkio_ticks'] = fields[39]", "aka 'delayacct_blkio_ticks'")),
    "Linux counts a task's I/O wait only with delay accounting on (off by default since 5.14)": Claim(
        "feedgpu/diagnosis/sensing/io_counters.py", "``/proc/sys/kernel/task_delayacct`` is 1, or the ``delayacct`` boot option",
        document="Linux, Documentation/accounting/delay-accounting.rst (delayacct off by default since 5.14)",
        cites="off by default since Linux 5.14"),
}


def test_the_course_pins_the_torch_whose_source_the_claims_read():
    requirements = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    assert f"torch=={PINNED_TORCH}" in requirements, "the claims are read in the pinned torch: update PINNED_TORCH"


@pytest.mark.parametrize("name", list(CLAIMS))
def test_the_claim_is_still_said_and_still_true(name):
    claim = CLAIMS[name]
    said = _words(_course_text(claim.where))
    assert _words(claim.says) in said, f"{name}: the course no longer says it at {claim.where}: {claim.says!r}"
    assert claim.code or claim.document or claim.check, f"{name}: a claim needs a source, a document or a check"
    if claim.code:
        source = _words(_installed(claim.package, claim.path))
        for fragment in claim.code:
            assert _words(fragment) in source, (
                f"{name}: {fragment!r} is no longer in the installed {claim.package}/{claim.path}: check the claim")
    if claim.cites:
        assert _words(claim.cites) in said, f"{name}: the course no longer cites {claim.document!r} at {claim.where}"
    if claim.check is not None and (claim.only_on is None or sys.platform.startswith(claim.only_on)):
        assert claim.check(), f"{name}: the running interpreter shows otherwise"


def test_a_claim_whose_source_changed_fails():
    """The control: a fragment the library never had, and a sentence the course never said."""
    with pytest.raises(AssertionError, match="no longer in the installed"):
        CLAIMS["made up"] = Claim("05:03b42dc8", "PyTorch", "torch", "utils/data/dataloader.py",
                                  ("prefetch_factor = 3",))
        try:
            test_the_claim_is_still_said_and_still_true("made up")
        finally:
            del CLAIMS["made up"]
    with pytest.raises(AssertionError, match="no longer says it"):
        CLAIMS["made up"] = Claim("05:03b42dc8", "pinning is always free", check=lambda: True)
        try:
            test_the_claim_is_still_said_and_still_true("made up")
        finally:
            del CLAIMS["made up"]
