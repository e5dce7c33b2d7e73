"""The take-home diagnosis: why does a training loop wait for its DataLoader, and what to change.

::

    from feedgpu import diagnose

    report = diagnose(loader, step_s=0.030)       # a simulated 30 ms accelerator step
    report = diagnose(loader, train_step)         # or your own step, a function of a batch
    print(report)                                 # text; in Jupyter it renders as a table and a plot
    report.to_dict()["causes"]                    # e.g. ["too-few-workers"]

    for batch in diagnose.watch(loader):          # inside a loop of your own
        train_step(batch)

From a shell: ``feedgpu-diagnose MODULE:FACTORY --step-ms 30`` (:mod:`.command`); for a
script as it is, Lightning's included, ``feedgpu-diagnose run -- python train.py ARGS``
(:mod:`~feedgpu.diagnosis.modes.script`, with the hooks of :mod:`~feedgpu.diagnosis.modes.script_hooks` in the script's process).

**What it measures** (all within ``max_seconds``, on a seeded sample of batches, every
worker stopped afterwards; see :mod:`~feedgpu.diagnosis.modes.live` for the phases):

* the **data-wait share** (the loop's wall time spent inside ``next()``: torchtitan's
  ``data_loading(%)``) and the accelerator's **busy share**; the **verdict**
  ``input-bound`` from 20% of waiting, else ``compute-bound`` (thresholds in
  :mod:`.causes`);
* **where a batch's time goes**: fetching items (``dataset[i]`` timed in this process,
  with its CPU share), the collate, the hand-over from a worker to the main process (both
  sides), pinning, and the step;
* **how throughput scales** with ``num_workers`` around the current setting and beyond it,
  with the course's model (:func:`feedgpu.models.pipeline.steady_state_time_per_batch`) beside each
  point, each point predicted without its own measurement (leave one out); where the
  model misses its points it is corrected by them before it predicts or advises anything
  (:mod:`.fitting`), and the report says so with both figures;
* **the main process's floor**: its seconds per batch at a high batch rate (the loop over
  ready items), measured rather than added up from probes;
* **worker memory**: each worker's USS growth while it reads (Linux; "not measured"
  where USS cannot be read);
* **the setting to try first**, its predicted speed-up, and (``try_fix=True``) the
  speed-up measured with that one setting changed.

**The causes** (stable ids, :data:`CAUSES`), named from measurements, never from settings
alone (0 workers over items that cost nothing is healthy):

* ``main-process-loading``: 0 workers while loading costs time;
* ``too-few-workers``: the workers are the bottleneck, and the waiting or the idle cores
  leave room for more;
* ``cpu-saturated``: the workers compute and no core is left: make items cheaper;
* ``storage-bound``: the workers read through one storage channel at its limit: read
  less or from faster storage;
* ``serialised``: more workers gain little while the cores idle and nothing is read:
  they wait on one resource they share (a lock, one connection, a rate-limited service);
* ``thread-oversubscription``: each worker keeps a pool of threads busy (BLAS, OpenMP,
  OpenCV) on full cores: one thread per pool in each worker;
* ``hand-over``: the main process spends the time receiving batches (pickled numpy,
  float64, huge batches);
* ``worker-start-up``: workers started again every epoch, at a large share of it;
* ``memory-growth``: the workers' USS grows as they read (copy-on-write of Python objects);
* ``main-thread-work``: CPU work in the step's own thread keeps the accelerator waiting.

Every mode ends in one conclusion (:func:`.conclusion.conclude`): the causes, the
verdict, the model checked against its points and the setting to try, the same function
of the evidence and the model's costs for :func:`diagnose`, :func:`watch`, :func:`replay`
and ``feedgpu-diagnose run``.

**Every diagnosis can be replayed** from its JSON, without the loader:
:func:`replay` (``feedgpu-diagnose --replay FILE [--step-ms X] [--cores N]``) recomputes
the verdict, the causes and the predictions, and answers "what if my step, or my
machine, were this?" (:mod:`~feedgpu.diagnosis.modes.replay`).

``feedgpu.diagnose.watch`` is :func:`watch`, set as an attribute of the function.

Importing this package imports no torch: the names below load on first use, so that
``feedgpu-diagnose --help``, ``--replay`` and the parent of ``run`` (which measures in the
script's own process) start in a fraction of a second, and a JSON file replays on a
machine without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from .command import main

#: Each public name and the module it comes from (loaded on first use).
_HOMES = {
    "diagnose": ".modes.live", "replay": ".modes.replay", "watch": ".modes.watch", "Watch": ".modes.watch",
    "Diagnosis": ".report", "CAUSES": ".causes", "INPUT_BOUND_SHARE": ".evidence", "clone_loader": ".sensing.cloning",
}

__all__ = ["diagnose", "watch", "replay", "Watch", "Diagnosis", "CAUSES", "INPUT_BOUND_SHARE", "clone_loader", "main"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name], __name__), name)
    if name == "diagnose" and not hasattr(value, "watch"):
        value.watch = __getattr__("watch")  # feedgpu.diagnose.watch(loader)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
