"""Notebook 02 (how many workers): wrong answers and delegations (see ``__init__.py``).

The tests of ``measure`` sleep through loaders of known cost (one to two seconds each, and
the one-kernel run runs each test twice per wrong answer that names it), so a wrong answer of
``measure`` names the tests that catch it for the reason it is kept, not every test it happens
to fail. A test that fails for a wrong answer only on a quiet machine is never named.
"""

import textwrap

from wrong_answers import wrong

DELEGATIONS = {
    "measure": """
        def measure(loader, batches, warmup=2, repeats=3):
            timing = time_loader(loader, batches=batches, warmup=max(warmup - 1, 0), repeats=repeats)
            return timing.mean_s_per_batch, timing.std_s_per_batch
    """,
    "sweep_workers": """
        from feedgpu.measure.sweep import sweep


        def sweep_workers(make_loader, workers):
            result = sweep(make_loader, {"num_workers": list(workers)}, batches=BATCHES, repeats=REPEATS,
                           progress=False)
            return result[["num_workers", "mean_s_per_batch", "std_s_per_batch"]]
    """,
    "plot_workers": """
        from feedgpu.plots import plot_sweep


        def plot_workers(df, ax=None):
            return plot_sweep(df, x="num_workers", ax=ax)
    """,
}


def _src(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def _indent(code: str, spaces: int) -> str:
    return textwrap.indent(_src(code), " " * spaces).lstrip()


_MEASURE = '''
def measure(loader, batches, warmup=2, repeats=3):
    per_repeat = []
    for _ in range(repeats):
        {repeat}
    std = {std}
    return statistics.fmean(per_repeat), std
'''

_GOOD_REPEAT = '''
iterator = iter(loader)
for _ in range(warmup):
    next(iterator)
start = time.perf_counter()
for _ in range(batches):
    next(iterator)
per_repeat.append((time.perf_counter() - start) / batches)
'''

_SAMPLE_STD = "statistics.stdev(per_repeat) if len(per_repeat) > 1 else 0.0"


def _measure(repeat: str = _GOOD_REPEAT, std: str = _SAMPLE_STD) -> str:
    """``measure`` with one repeat's body ``repeat`` and the spread ``std``."""
    return _src(_MEASURE).format(repeat=_indent(repeat, 8), std=std)


def _measure_result(per_repeat: str) -> str:
    """``measure`` that times each repeat correctly but records ``per_repeat`` for it."""
    return _measure(_GOOD_REPEAT.replace("per_repeat.append((time.perf_counter() - start) / batches)",
                                         f"per_repeat.append({per_repeat})"))


_SWEEP_WORKERS = '''
def sweep_workers(make_loader, workers):
{setup}    rows = []
    for n in {counts}:
{build}        {result} = measure(loader, {timing}, repeats=REPEATS)
        rows.append({{"num_workers": n, "mean_s_per_batch": mean, "std_s_per_batch": std}})
    return pd.DataFrame(rows)
'''


def _sweep_workers(setup: str = "", counts: str = "workers", build: str = "loader = make_loader(n)",
                   result: str = "mean, std", timing: str = "batches=max(BATCHES, 2 * n), warmup=max(2, n)") -> str:
    """``sweep_workers`` with one line changed: the loader built once (``setup``, no ``build``),
    the counts, what is read from ``measure`` or how it is asked to time."""
    return _src(_SWEEP_WORKERS).format(setup=f"    {setup}\n" if setup else "", counts=counts,
                                       build=f"        {build}\n" if build else "", result=result, timing=timing)


_PLOT_WORKERS = '''
def plot_workers(df, ax=None):
    {axes}
    {draw}
    ax.set(xlabel="num_workers", ylabel="{ylabel}")
    return ax
'''


def _plot_workers(draw: str, ylabel: str = "ms per batch", axes: str = "ax = plt.subplots()[1] if ax is None else ax") -> str:
    return _src(_PLOT_WORKERS).format(axes=axes, draw=_indent(draw, 4), ylabel=ylabel)


WRONG_ANSWERS = [
    # ---------------------------------------------------------------- Part A: measure
    wrong("measure", "divides by warmup + batches", _measure_result("(time.perf_counter() - start) / (warmup + batches)"),
          "test_measure_known_cost"),
    wrong("measure", "the time of all timed batches, not per batch", _measure_result("time.perf_counter() - start"),
          "test_measure_known_cost"),
    wrong("measure", "milliseconds, not seconds", _measure_result("(time.perf_counter() - start) / batches * 1000"),
          "test_measure_known_cost"),
    wrong("measure", "the clock started before the warm-up", _measure("""
            start = time.perf_counter()
            iterator = iter(loader)
            for _ in range(warmup):
                next(iterator)
            for _ in range(batches):
                next(iterator)
            per_repeat.append((time.perf_counter() - start) / batches)
          """), "test_measure_excludes_warmup"),
    wrong("measure", "warm-up on a pass of its own, the clock started before iter() of the timed pass", _measure("""
            for _, batch in zip(range(warmup), loader):  # warm up
                pass
            start = time.perf_counter()
            for _, batch in zip(range(batches), loader):
                pass
            per_repeat.append((time.perf_counter() - start) / batches)
          """), "test_measure_excludes_warmup", "test_measure_repeats"),
    wrong("measure", "one iterator for all repeats", """
        def measure(loader, batches, warmup=2, repeats=3):
            iterator = iter(loader)
            for _ in range(warmup):
                next(iterator)
            per_repeat = []
            for _ in range(repeats):
                start = time.perf_counter()
                for _ in range(batches):
                    next(iterator)
                per_repeat.append((time.perf_counter() - start) / batches)
            std = statistics.stdev(per_repeat) if len(per_repeat) > 1 else 0.0
            return statistics.fmean(per_repeat), std
    """, "test_measure_repeats"),
    wrong("measure", "the population standard deviation (np.std)", _measure(std="float(np.std(per_repeat))"),
          "test_measure_repeats"),
    # ---------------------------------------------------------------- Part B: make_face_loader
    wrong("make_face_loader", "not shuffled", """
        def make_face_loader(num_workers):
            return DataLoader(faces, batch_size=BATCH_SIZE, num_workers=num_workers, persistent_workers=num_workers > 0)
    """, "test_make_face_loader"),
    wrong("make_face_loader", "shuffled by an unseeded generator: another order every run", """
        def make_face_loader(num_workers):
            return DataLoader(faces, batch_size=BATCH_SIZE, shuffle=True, num_workers=num_workers,
                              persistent_workers=num_workers > 0)
    """, "test_make_face_loader"),
    wrong("make_face_loader", "workers started again at every pass", """
        def make_face_loader(num_workers):
            return DataLoader(faces, batch_size=BATCH_SIZE, shuffle=True, num_workers=num_workers,
                              generator=torch.Generator().manual_seed(SEED))
    """, "test_make_face_loader"),
    wrong("make_face_loader", "the default batch size (1)", """
        def make_face_loader(num_workers):
            return DataLoader(faces, shuffle=True, num_workers=num_workers,
                              generator=torch.Generator().manual_seed(SEED), persistent_workers=num_workers > 0)
    """, "test_make_face_loader"),
    # ---------------------------------------------------------------- Part B: sweep_workers
    wrong("sweep_workers", "one loader for every count (built with the first)", _sweep_workers(
        setup="loader = make_loader(workers[0])", build=""), "test_sweep_workers_rows"),
    wrong("sweep_workers", "the counts sorted, not in the order given", _sweep_workers(counts="sorted(workers)"),
          "test_sweep_workers_rows"),
    wrong("sweep_workers", "mean and std swapped", _sweep_workers(result="std, mean"), "test_sweep_workers_rows"),
    wrong("sweep_workers", "the same warm-up and batches for every count", _sweep_workers(
        timing="batches=BATCHES, warmup=2"), "test_sweep_workers_batches"),
    # ---------------------------------------------------------------- Part B: plot_workers
    wrong("plot_workers", "a line without error bars", _plot_workers(
        'ax.plot(df["num_workers"], df["mean_s_per_batch"] * 1e3, "o-")'), "test_plot_workers"),
    wrong("plot_workers", "seconds on the y axis, not milliseconds", _plot_workers(
        'ax.errorbar(df["num_workers"], df["mean_s_per_batch"], yerr=df["std_s_per_batch"], fmt="o-")',
        ylabel="s per batch"), "test_plot_workers"),
    wrong("plot_workers", "the row number on the x axis, not num_workers", _plot_workers(
        'ax.errorbar(range(len(df)), df["mean_s_per_batch"] * 1e3, yerr=df["std_s_per_batch"] * 1e3, fmt="o-")'),
        "test_plot_workers"),
    wrong("plot_workers", "error bars of two standard deviations", _plot_workers(
        'ax.errorbar(df["num_workers"], df["mean_s_per_batch"] * 1e3, yerr=2 * df["std_s_per_batch"] * 1e3,\n'
        '            fmt="o-")'), "test_plot_workers"),
    wrong("plot_workers", "a new figure even when given axes", _plot_workers(
        'ax.errorbar(df["num_workers"], df["mean_s_per_batch"] * 1e3, yerr=df["std_s_per_batch"] * 1e3, fmt="o-")',
        axes="ax = plt.subplots()[1]"), "test_plot_workers"),
    # ---------------------------------------------------------------- Part B: choose_workers
    wrong("choose_workers", "the most workers tried", """
        def choose_workers(df):
            return int(df["num_workers"].max())
    """, "test_choose_workers_reaches_the_best_rate"),
    wrong("choose_workers", "the slowest row (the largest time per batch)", """
        def choose_workers(df):
            return int(df.loc[df["mean_s_per_batch"].idxmax(), "num_workers"])
    """, "test_choose_workers_reaches_the_best_rate"),
    wrong("choose_workers", "one worker per core, whatever the sweep says", """
        def choose_workers(df):
            return int(min(CORES, df["num_workers"].max()))
    """, "test_choose_workers_reaches_the_best_rate"),
    wrong("choose_workers", "the fewest workers faster than none", """
        def choose_workers(df):
            base = df.loc[df["num_workers"] == 0, "mean_s_per_batch"].iloc[0]
            return int(df.loc[df["mean_s_per_batch"] < 0.9 * base, "num_workers"].min())
    """, "test_choose_workers_reaches_the_best_rate"),
]
