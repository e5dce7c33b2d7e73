"""The course's figures, measured on this machine: a table on screen and a JSON file.

Usage: ``feedgpu-bench [--output build/bench.json] [--only NAME ...] [--readings FOLDER]``;
with ``--only`` the named figures replace their earlier values in the JSON file and the
others are kept. ``--only gpu --readings FOLDER`` computes the gpu section from a recorded
machine of ``readings/`` instead of a live GPU.

Timings are never asserted in tests; they are measured here, in one run, and the claims
are ratios between figures of the same run (``make bench``).
"""

from __future__ import annotations

import io
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ...base.cli import OneLineParser, run_command
from ...base.files import write_json_atomically
from .. import COURSE_ROOT as ROOT

Figure = dict  # {"name", "value", "unit", "note"}


def figure(name: str, value: float, unit: str, note: str = "") -> Figure:
    return {"name": name, "value": value, "unit": unit, "note": note}


# --------------------------------------------------------------------------- data


def bench_generation() -> list[Figure]:
    """Time to paint the whole synthetic LFW on all cores (into a scratch folder)."""
    import lfw_dataset

    with tempfile.TemporaryDirectory(dir=ROOT / "build") as tmp:
        start = time.perf_counter()
        tree = lfw_dataset.generate_synthetic_lfw(Path(tmp) / "lfw", progress=False)
        seconds = time.perf_counter() - start
        n = sum(1 for _ in tree.rglob("*.jpg"))
    return [figure("data generation time", seconds, "s", f"{n} images, {os.cpu_count()} processes; budget < 60 s"),
            figure("data generation rate", n / seconds, "images/s")]


def _jpeg_files(n: int) -> list[Path]:
    import lfw_dataset

    files = sorted(lfw_dataset.default_root("synthetic").rglob("*.jpg"))
    step = max(1, len(files) // n)
    return files[::step][:n]


def bench_file_size() -> list[Figure]:
    """Mean and spread of the JPEG sizes of the prepared synthetic tree (every file)."""
    import lfw_dataset

    sizes = [p.stat().st_size / 1024 for p in lfw_dataset.default_root("synthetic").rglob("*.jpg")]
    return [figure("mean file size", statistics.fmean(sizes), "KB", f"{len(sizes)} files; real LFW about 13 KB"),
            figure("file size std", statistics.stdev(sizes), "KB")]


def _photo_jpeg(target_bytes: int) -> bytes:
    """A real photograph (scikit-learn's sample 'china.jpg'), cropped to 250x250 and
    encoded at the JPEG quality whose size is closest to ``target_bytes``."""
    from PIL import Image
    from sklearn.datasets import load_sample_image

    img = Image.fromarray(load_sample_image("china.jpg")).crop((120, 60, 370, 310))
    best = None
    for quality in range(30, 96, 2):
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=quality)
        data = buf.getvalue()
        if best is None or abs(len(data) - target_bytes) < abs(len(best) - target_bytes):
            best = data
    return best


def _decode_seconds(blobs: list[bytes], repeats: int = 5) -> float:
    from PIL import Image

    per_image = []
    for _ in range(repeats):
        for blob in blobs:
            start = time.perf_counter()
            with Image.open(io.BytesIO(blob)) as img:
                img.convert("RGB")
            per_image.append(time.perf_counter() - start)
    return statistics.median(per_image)


def bench_decode() -> list[Figure]:
    """Single-image decode time: generated faces vs a real photo JPEG of the same size."""
    blobs = [p.read_bytes() for p in _jpeg_files(200)]
    mean_size = int(statistics.fmean(len(b) for b in blobs))
    photo = _photo_jpeg(mean_size)
    faces_s = _decode_seconds(blobs)
    photo_s = _decode_seconds([photo] * len(blobs))
    return [figure("decode time, generated face", faces_s * 1e3, "ms", "median over 200 files x 5"),
            figure("decode time, photo of same size", photo_s * 1e3, "ms", f"{len(photo) / 1024:.1f} KB photo"),
            figure("decode time ratio generated/photo", faces_s / photo_s, "x", "close to 1 is the goal")]


# --------------------------------------------------------------------------- loading


def bench_loader(batch_size: int = 64, batches: int = 30, rounds: int = 5) -> list[Figure]:
    """The reference loader (decode + ToTensor) with 0, 1, 2 and 4 workers.

    Each worker runs PyTorch on one thread (the DataLoader sets it), so the single-process
    baseline does too, as in notebook 02: with PyTorch's default threads, the main process
    alone already spreads ``ToTensor`` and the collate over every core, and the ratio would
    no longer compare processes. That default-thread figure is reported beside it. Settings
    are measured in interleaved rounds: each throughput is the median over the rounds and
    each speed-up the median of the per-round ratios, so a slow spell of the machine (page
    faults cost several times more at some moments than at others on a virtual machine)
    hits both sides of a ratio alike.
    """
    import torch
    from torch.utils.data import DataLoader

    import lfw_dataset
    from feedgpu.measure.timing import time_loader

    ds = lfw_dataset.LFWDataset(lfw_dataset.default_root("synthetic"), transform=lfw_dataset.default_transform())
    default_threads = torch.get_num_threads()
    settings = [(0, default_threads), (0, 1), (1, 1), (2, 1), (4, 1)]
    rates: dict[tuple[int, int], list[float]] = {s: [] for s in settings}
    try:
        for _ in range(rounds):
            for workers, threads in settings:
                torch.set_num_threads(threads)
                loader = DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                                    generator=torch.Generator().manual_seed(0))
                timing = time_loader(loader, batches=batches, warmup=max(2, workers), repeats=1)
                rates[(workers, threads)].append(timing.items_per_s)
    finally:
        torch.set_num_threads(default_threads)
    rate = {s: statistics.median(r) for s, r in rates.items()}
    # Ratios per round (the two settings ran seconds apart), then their median.
    speedup = statistics.median(a / b for a, b in zip(rates[(2, 1)], rates[(0, 1)]))
    speedup_default = statistics.median(a / b for a, b in zip(rates[(2, 1)], rates[(0, default_threads)]))
    note = f"batch {batch_size}, median of {rounds} rounds"
    out = [figure(f"loader throughput, 0 workers, {default_threads} threads", rate[(0, default_threads)],
                  "images/s", note + "; PyTorch's default threads")]
    out += [figure(f"loader throughput, {w} workers", rate[(w, 1)], "images/s", note + "; 1 thread per process")
            for w in (0, 1, 2, 4)]
    return out + _shared_memory_cost(batch_size) + [
        figure("loader speed-up 2 workers / 0", speedup, "x",
               f"1 thread per process; median of {rounds} paired rounds (the budget is the recommended pipeline's)"),
        figure(f"loader speed-up 2 workers / 0 with {default_threads} threads",
               speedup_default, "x", "the main process alone already spreads work over the cores"),
    ]


def _shared_memory_cost(batch_size: int, repeats: int = 10) -> list[Figure]:
    """What a worker pays, and the main process does not, to hand a batch over: writing it
    into a fresh shared-memory segment (every page faulted in and zeroed) instead of
    memory the process already holds."""
    import torch

    from feedgpu.measure.timing import median_seconds

    numel = batch_size * 3 * 250 * 250

    def fill_ms(make) -> float:
        return median_seconds(lambda: make().fill_(1.0), repeats) * 1e3

    held = torch.empty(numel)
    held_ms = fill_ms(lambda: held)
    shared_ms = fill_ms(lambda: torch.empty(numel).share_memory_())
    return [figure("fill a float batch, memory already held", held_ms, "ms", f"{numel * 4 / 2**20:.0f} MB"),
            figure("fill a float batch, fresh shared memory", shared_ms, "ms",
                   f"{(shared_ms - held_ms) / batch_size:.3f} ms per image more: what each worker pays"
                   " to hand a batch over")]


def bench_decode_paths(n: int = 300) -> list[Figure]:
    """Decode throughput of the LFW JPEGs: PIL vs torchvision.io.decode_jpeg (+ transforms v2)."""
    import torch
    from PIL import Image
    from torchvision.io import decode_jpeg
    from torchvision.transforms import v2
    from torchvision.transforms.v2 import functional as F

    blobs = [p.read_bytes() for p in _jpeg_files(n)]
    tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
    # the same v2 pipeline after either decoder: uint8 CHW tensor -> flip -> float in [0, 1]
    after = v2.Compose([v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True)])

    def pil():
        for b in blobs:
            with Image.open(io.BytesIO(b)) as img:
                after(F.pil_to_tensor(img.convert("RGB")))

    def tv():
        for t in tensors:
            after(decode_jpeg(t))

    rates = {}
    for name, fn in (("PIL + v2", pil), ("decode_jpeg + v2", tv)):
        fn()  # warm-up
        best = min(_seconds(fn) for _ in range(3))
        rates[name] = n / best
    return [figure(f"decode throughput, {k}", v, "images/s", "one process") for k, v in rates.items()] + [
        figure("decode_jpeg / PIL", rates["decode_jpeg + v2"] / rates["PIL + v2"], "x")]


def _seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_model(load_item_s: float = 0.001, items: int = 32, step_s: float = 0.008, batches: int = 20) -> list[Figure]:
    """The Stack Overflow settings scaled to a laptop: the pipeline model vs measurement.

    The question's 128 items x 3.125 ms and a 50 ms step become 32 items x 1 ms and an
    8 ms step (the same ratio of load to step, 4:1); sleeping workers scale past the cores.
    """
    from torch.utils.data import DataLoader

    from feedgpu.models.pipeline import steady_state_time_per_batch
    from feedgpu.measure.timing import time_loader
    from feedgpu.workloads import SleepDataset

    out = []
    for workers in (0, 2, 4, 6, 8):
        loader = DataLoader(SleepDataset(items * (batches + 10), load_item_s), batch_size=items,
                            num_workers=workers)
        measured = time_loader(loader, batches=batches, warmup=max(2, workers), repeats=2, step=step_s)
        predicted = steady_state_time_per_batch(workers, items * load_item_s, step_s)
        out += [figure(f"model, {workers} workers", predicted * 1e3, "ms/batch"),
                figure(f"measured, {workers} workers", measured.mean_s_per_batch * 1e3, "ms/batch",
                       f"measured/model {measured.mean_s_per_batch / predicted:.2f}")]
    return out


def bench_transfer() -> list[Figure]:
    """What the main process pays to receive one batch from a worker: a list of pickled
    numpy arrays (the Stack Overflow question's collate) vs one collated tensor, whose
    storage travels in shared memory."""
    import functools

    from feedgpu.workloads.arrays import collate_list, collate_tensor
    from feedgpu.measure.transfer import transfer_time_per_batch

    out = []
    for label, n, shape, dtype in (("128 x 1000x150 float64", 128, (1000, 150), "float64"),
                                   ("64 x 3x250x250 float32", 64, (3, 250, 250), "float32")):
        seconds = {}
        for kind, collate in (("pickled numpy list", collate_list), ("shared-memory tensor", collate_tensor)):
            make = functools.partial(_collated, collate, n, shape, dtype)
            seconds[kind] = transfer_time_per_batch(make, batches=6, warmup=2)
            out.append(figure(f"transfer {label}, {kind}", seconds[kind] * 1e3, "ms/batch", "median"))
        ratio = seconds["pickled numpy list"] / seconds["shared-memory tensor"]
        out.append(figure(f"transfer {label}, list / tensor", ratio, "x", "budget >= 3 on the large batch"))
    return out


def _collated(collate, n, shape, dtype):
    from feedgpu.workloads.arrays import make_records

    return collate(make_records(n, shape, dtype))


# --------------------------------------------------------------------------- notebooks


def bench_notebooks(names: tuple[str, ...] | None = None) -> list[Figure]:
    """Execution time of every solution notebook (nbclient, a fresh kernel each)."""
    import nbformat
    from nbclient import NotebookClient

    out = []
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        if names and path.stem not in names:
            continue
        nb = nbformat.read(path, as_version=4)
        start = time.perf_counter()
        NotebookClient(nb, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        out.append(figure(f"notebook {path.stem}", time.perf_counter() - start, "s", "budget <= 90 s"))
    return out


def _beyond_one_process() -> dict[str, Callable[[], list[Figure]]]:
    """Grading, the recommended faces pipeline, the benches of notebooks 05 to 09 and the diagnosis, each in its own module."""
    from .capstone import bench_capstone
    from .grading import bench_grading
    from .diagnosis import bench_diagnosis
    from .distributed import bench_distributed
    from .gpu import bench_gpu
    from .memory import bench_memory
    from .pipeline import bench_feeding, bench_pipeline
    from .remote import bench_remote

    return {"grading": bench_grading, "pipeline": bench_pipeline, "memory": bench_memory, "gpu": bench_gpu,
            "remote": bench_remote, "distributed": bench_distributed, "diagnosis": bench_diagnosis,
            "capstone": bench_capstone, "feeding": bench_feeding}


BENCHES: dict[str, Callable[[], list[Figure]]] = {
    "generation": bench_generation,
    "file_size": bench_file_size,
    "decode": bench_decode,
    "loader": bench_loader,
    "decode_paths": bench_decode_paths,
    "model": bench_model,
    "transfer": bench_transfer,
    "notebooks": bench_notebooks,
    **_beyond_one_process(),
}


def _long_ones() -> dict[str, Callable[[], list[Figure]]]:
    from .grading import bench_grading_class

    return {"grading_class": bench_grading_class}


#: Long measurements, run only when named with --only.
EXTRA: dict[str, Callable[[], list[Figure]]] = _long_ones()


def machine() -> dict:
    import torch

    return {"python": platform.python_version(), "torch": torch.__version__,
            "cores": os.cpu_count(), "platform": platform.platform(),
            "when": time.strftime("%Y-%m-%d %H:%M:%S")}


def print_table(figures: list[Figure]) -> None:
    if not figures:  # every bench asked for failed: the failures are printed after
        print("no figures measured")
        return
    width = max(len(f["name"]) for f in figures)
    for f in figures:
        print(f"{f['name']:<{width}}  {f['value']:>10.3f} {f['unit']:<9} {f['note']}")


def main(argv: list[str] | None = None) -> int:
    return run_command("feedgpu-bench", _main, argv, interrupted="interrupted: build/bench.json is as it was")


def _main(argv: list[str]) -> int:
    parser = OneLineParser(prog="feedgpu-bench", description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "build" / "bench.json")
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHES | EXTRA), help="run only these")
    parser.add_argument("--readings", metavar="FOLDER",
                        help="the gpu section from a recorded machine (a folder of readings/) instead of a live GPU")
    args = parser.parse_args(argv)
    if args.readings is not None and args.only != ["gpu"]:
        parser.error("--readings replays the gpu section only: use it with --only gpu")
    (ROOT / "build").mkdir(exist_ok=True)
    figures, failed = [], []
    for name in args.only or BENCHES:
        print(f"measuring {name} ...", file=sys.stderr, flush=True)
        try:
            run = (BENCHES | EXTRA)[name]
            found = run(readings=args.readings) if args.readings is not None else run()
            figures.extend(dict(f, bench=name, when=time.strftime("%Y-%m-%d %H:%M:%S")) for f in found)
        except Exception as err:  # noqa: BLE001 (keep the other figures; report at the end)
            failed.append(f"{name}: {type(err).__name__}: {err}"[:500])
    print_table(figures)
    if args.only and args.output.exists():
        # Keep the figures of the benches not run this time; each figure records the
        # bench that made it and when.
        try:
            earlier = json.loads(args.output.read_text()).get("figures", [])
        except (OSError, ValueError):
            earlier = []
        figures = [f for f in earlier if f.get("bench") not in args.only] + figures
    record = {"machine": machine(), "figures": figures, "failed": failed}
    if args.readings is not None:
        record["readings"] = args.readings  # the gpu figures are that recorded machine's, not this one's
    write_json_atomically(args.output, record, indent=2)
    print(f"written to {args.output}")
    for line in failed:
        print(f"FAILED {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
