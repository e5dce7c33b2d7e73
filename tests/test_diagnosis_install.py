"""The take-home diagnosis installs alone (diagnose/pyproject.toml, issue 32).

One test, offline: it builds the wheel of ``feedgpu-diagnose`` from a copy of the
sources (the repository gets no build/ or egg-info), checks what the wheel holds and
asks for, installs it into a fresh virtual environment that sees only torch and the
wheel's declared dependencies (symlinked from this environment), and runs
``feedgpu-diagnose`` there on a loader of its own: the command must work without the
course (its workloads, workflows, torchvision, nbgrader, Jupyter). Nothing is fetched.
"""

from __future__ import annotations

import email.parser
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: What the wheel may ask for: each with a lower bound, never a pin (and never torch).
DEPENDENCIES = {"numpy", "psutil", "tqdm", "threadpoolctl"}
PLOT_EXTRA = {"matplotlib"}

#: torch and its own runtime requirements (``pip show torch``), the wheel's dependencies:
#: all the fresh environment sees, by the distribution or module names of site-packages.
TORCH = {"torch", "functorch", "torchgen", "filelock", "fsspec", "jinja2", "markupsafe", "networkx", "sympy",
         "mpmath", "isympy", "typing_extensions", "triton", "setuptools"}
TORCH_PREFIXES = ("nvidia", "cuda")
#: matplotlib and its requirements, for ``--plot`` (the extra [plot]) in a second step.
MATPLOTLIB = {"matplotlib", "mpl_toolkits", "pylab", "contourpy", "cycler", "fonttools", "kiwisolver",
              "packaging", "pillow", "pil", "pyparsing", "python_dateutil", "dateutil", "six"}

#: The course's own: none may be importable, or imported, in the fresh environment.
ABSENT = ("nbgrader", "jupyter_core", "torchvision", "feedgpu.workflows", "feedgpu.workloads", "feedgpu.objectstore",
          "feedgpu.distributed", "feedgpu.testing")
#: What the wheel must not hold: the course's workflows (grading with its testing.py), workloads,
#: object store and launcher, its data set and dataset module, and its top-level modules
#: besides the palette (plots, readings, the old paths of moved modules: testing.py, ...).
COURSE_ONLY = ("feedgpu/workflows/", "feedgpu/workloads/", "feedgpu/objectstore/", "feedgpu/distributed/",
               "feedgpu/data/", "lfw_dataset")
TOP_LEVEL_SHIPPED = {"feedgpu/__init__.py", "feedgpu/palette.py"}

#: The user's training loop: 0 workers over items that wait 20 ms, batches of 4.
USER_LOOP = '''
import time

from torch.utils.data import DataLoader, Dataset


class WaitingItems(Dataset):
    def __len__(self):
        return 512

    def __getitem__(self, index):
        time.sleep(0.020)
        return index


def make_loader():
    return DataLoader(WaitingItems(), batch_size=4)
'''

#: Run in the fresh environment: which of ABSENT import, then ``main(ARGS)``; what it left
#: in ``sys.modules`` (torch's version read from its metadata, not by importing it).
PROBE = '''
import importlib, importlib.metadata, json, sys

absent = {}
for name in sys.argv[1].split(","):
    try:
        importlib.import_module(name)
        absent[name] = "imported"
    except ImportError as err:
        absent[name] = type(err).__name__
from feedgpu.diagnosis import main

try:
    status = main(sys.argv[2:])
except SystemExit as exit:
    status = exit.code
print(json.dumps({"absent": absent, "torch": importlib.metadata.version("torch"), "status": status,
                  "feedgpu": sorted(m for m in sys.modules if m.startswith("feedgpu")),
                  "modules": sorted(m.partition(".")[0] for m in sys.modules)}))
'''


def _key(entry: str) -> str:
    """The distribution or module name of a site-packages entry (``numpy-2.4.6.dist-info``,
    ``numpy.libs``, ``typing_extensions.py``, ``fontTools`` -> ``numpy`` ... ``fonttools``)."""
    for ending in (".dist-info", ".libs", ".py"):
        if entry.endswith(ending):
            entry = entry[: -len(ending)]
    return entry.split("-")[0].lower()


def _expose(site: Path, folder: Path, names: set[str], prefixes: tuple[str, ...] = ()) -> list[str]:
    """Symlink the entries of ``site`` named in ``names`` (or by a prefix) into ``folder``."""
    folder.mkdir()
    linked = []
    for entry in sorted(os.listdir(site)):
        key = _key(entry)
        if key in names or key.startswith(prefixes):
            (folder / entry).symlink_to(site / entry)
            linked.append(key)
    return linked


def _run(args: list, env: dict, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{args[:4]} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def _requirements(metadata: str) -> dict[str, tuple[str, str]]:
    """``Requires-Dist`` of a wheel's METADATA: name -> (specifier, marker)."""
    from packaging.requirements import Requirement

    found = {}
    for line in email.parser.Parser().parsestr(metadata).get_all("Requires-Dist") or []:
        req = Requirement(line)
        found[req.name.lower()] = (str(req.specifier), str(req.marker or ""))
    return found


@pytest.mark.slow  # a wheel built, a venv made, one run that imports torch: ~11 s on 2 cores
def test_feedgpu_diagnose_installs_and_runs_without_the_course(tmp_path):
    pytest.importorskip("setuptools")
    pytest.importorskip("packaging")
    torch_spec = importlib.util.find_spec("torch")
    if torch_spec is None or torch_spec.origin is None:
        pytest.skip("torch is not installed")
    site = Path(torch_spec.origin).parents[1]
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV") and not k.startswith("PIP_")}
    env.update(PYTHONNOUSERSITE="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", MPLBACKEND="Agg")

    # 1. the sources, copied: the build writes its build/ and egg-info there
    src = tmp_path / "src"
    shutil.copytree(ROOT / "diagnose", src / "diagnose", ignore=shutil.ignore_patterns("build", "*.egg-info"))
    shutil.copytree(ROOT / "feedgpu", src / "feedgpu", ignore=shutil.ignore_patterns("__pycache__"))

    # 2. the wheel: what it holds and what it asks for
    _run([sys.executable, "-m", "pip", "wheel", src / "diagnose", "--no-build-isolation", "--no-deps", "--no-index",
          "-w", tmp_path / "wheels"], env, tmp_path)
    (wheel,) = (tmp_path / "wheels").glob("feedgpu_diagnose-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    wanted = {p.relative_to(ROOT).as_posix() for p in (ROOT / "feedgpu" / "diagnosis").rglob("*.py")}
    wanted |= {"feedgpu/__init__.py", "feedgpu/base/checks.py", "feedgpu/base/cli.py", "feedgpu/base/files.py",
               "feedgpu/models/pipeline.py", "feedgpu/measure/timing.py"}
    assert wanted <= names, sorted(wanted - names)
    course = sorted(n for n in names if n.startswith(COURSE_ONLY)
                    or (n.count("/") == 1 and n.startswith("feedgpu/") and n not in TOP_LEVEL_SHIPPED))
    assert not course, f"the wheel holds the course's own: {course}"
    assert "feedgpu-diagnose = feedgpu.diagnosis:main" in entry_points, entry_points
    requires = _requirements(metadata)
    assert set(requires) == DEPENDENCIES | PLOT_EXTRA, requires
    for name, (specifier, marker) in requires.items():
        assert specifier.startswith(">=") and "==" not in specifier and "," not in specifier, (name, specifier)
        assert marker == ('extra == "plot"' if name in PLOT_EXTRA else ""), (name, marker)
    assert not [line for line in metadata.splitlines() if line.startswith("Requires-Dist") and "torch" in line]

    # 3. a fresh environment that sees torch, its requirements and the wheel's, nothing else
    fresh = tmp_path / "fresh"
    _run([sys.executable, "-m", "venv", "--without-pip", fresh], env, tmp_path)
    python, script = fresh / "bin" / "python", fresh / "bin" / "feedgpu-diagnose"
    (fresh_site,) = fresh.glob("lib/python*/site-packages")
    linked = _expose(site, tmp_path / "torch_only", TORCH | DEPENDENCIES, TORCH_PREFIXES)
    assert DEPENDENCIES | {"torch"} <= set(linked), linked
    (fresh_site / "torch_only.pth").write_text(f"{tmp_path / 'torch_only'}\n")
    # without --no-deps: pip must find every dependency already there (--no-index: nothing fetched)
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-index", wheel], env, tmp_path)

    # the user's loop, importable through PYTHONPATH only; runs from a folder of their own
    loop = tmp_path / "userloop"
    loop.mkdir()
    (loop / "myloop.py").write_text(USER_LOOP)
    (tmp_path / "probe.py").write_text(PROBE)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    user_env = dict(env, PYTHONPATH=str(loop))

    # the console script: --help loads no torch, so it answers at once
    assert "MODULE:FACTORY" in _run([script, "--help"], user_env, run_dir).stdout

    # 4. the command on the user's loader (0 workers over waiting items), run by the probe:
    #    what a measured diagnosis imports, of the course's and of torch's
    out = tmp_path / "out.json"
    done = _run([python, tmp_path / "probe.py", ",".join(ABSENT), "myloop:make_loader", "--step-ms", "5",
                 "--max-seconds", "3", "--no-try", "--json", out], user_env, run_dir)
    probed = json.loads(done.stdout.splitlines()[-1])
    assert probed["status"] == 0 and probed["torch"], probed
    assert all(why == "ModuleNotFoundError" for why in probed["absent"].values()), probed["absent"]
    assert not {"feedgpu.workflows", "feedgpu.workloads"} & set(probed["feedgpu"]), probed["feedgpu"]
    assert not {"torchvision", "PIL", "nbgrader", "jupyter_core", "matplotlib"} & set(probed["modules"])
    assert "causes: main-process-loading" in done.stdout, done.stdout
    assert "Set num_workers" in done.stdout, done.stdout
    assert json.loads(out.read_text())["causes"] == ["main-process-loading"], out.read_text()[:500]

    # --plot with the extra's matplotlib (a replay of the JSON: nothing measured again)
    linked = _expose(site, tmp_path / "matplotlib_only", MATPLOTLIB)
    assert {"matplotlib", "pillow"} <= set(linked), linked
    (fresh_site / "matplotlib_only.pth").write_text(f"{tmp_path / 'matplotlib_only'}\n")
    png = tmp_path / "plot.png"
    plotted = json.loads(_run([python, tmp_path / "probe.py", ",".join(ABSENT), "--replay", out, "--plot", png],
                              user_env, run_dir).stdout.splitlines()[-1])
    assert plotted["status"] == 0 and png.stat().st_size > 1000, plotted
    assert "feedgpu.diagnosis.plot" in plotted["feedgpu"], plotted["feedgpu"]
    assert not {"feedgpu.workflows", "feedgpu.workloads", "feedgpu.measure.stages"} & set(plotted["feedgpu"])
    assert not {"torch", "torchvision"} & set(plotted["modules"]), "a replay needs no torch"
