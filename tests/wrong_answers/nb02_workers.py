"""Notebook 02 (single vs multi-process): wrong answers and delegations (see ``__init__.py``).

The tests of ``measure`` sleep through loaders of known cost (one to two seconds each, and
the one-kernel run runs each test twice per wrong answer that names it), so a wrong answer of
``measure`` names the tests that catch it for the reason it is kept, not every test it happens
to fail. A test that fails for a wrong answer only on a quiet machine is never named.
"""

import textwrap

from wrong_answers import wrong

DELEGATIONS = {
    "predict_speedup": """
        from feedgpu.models.cores import model_speedup as predict_speedup
    """,
    "measure": """
        def measure(loader, batches, warmup=2, repeats=3):
            timing = time_loader(loader, batches=batches, warmup=max(warmup - 1, 0), repeats=repeats)
            return timing.mean_s_per_batch, timing.std_s_per_batch
    """,
    "time_epochs": """
        def time_epochs(loader, epochs):
            if epochs < 1:
                raise ValueError(epochs)
            timings = [time_loader(loader, warmup=0, repeats=1) for _ in range(epochs)]
            return [(t.startup_s[0], t.startup_s[0] + t.s_per_batch[0] * t.n_batches[0]) for t in timings]
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


_SPEEDUP_TABLE = '''
def speedup_table(df):
    {check}
    {body}
    table["efficiency"] = table["speedup"] / table["num_workers"].clip(lower=1)
    return table
'''

_GOOD_CHECK = '''
baseline = df.loc[df["num_workers"] == 0, "mean_s_per_batch"]
if len(baseline) != 1:
    raise ValueError(f"need exactly one row with num_workers == 0, found {len(baseline)}")
'''

_GOOD_TABLE = '''
table = df.sort_values("num_workers").reset_index(drop=True)
table["speedup"] = float(baseline.iloc[0]) / table["mean_s_per_batch"]
'''


def _speedup_table(body: str = _GOOD_TABLE, check: str = _GOOD_CHECK) -> str:
    return _src(_SPEEDUP_TABLE).format(check=_indent(check, 4), body=_indent(body, 4))


_PREDICT_SPEEDUP = '''
def predict_speedup(num_workers, cores, cpu_fraction):
    if num_workers < 0 or cores < 1 or not 0 <= cpu_fraction <= 1:
        raise ValueError(f"bad arguments: {{num_workers}}, {{cores}}, {{cpu_fraction}}")
    if num_workers == 0:
        return 1.0
    {body}
'''


def _predict_speedup(body: str) -> str:
    return _src(_PREDICT_SPEEDUP).format(body=_indent(body, 4))


_TIME_EPOCHS = '''
def time_epochs(loader, epochs):
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {{epochs}}")
    results = []
    {body}
    return results
'''


def _time_epochs(body: str) -> str:
    return _src(_TIME_EPOCHS).format(body=_indent(body, 4))


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
    # ---------------------------------------------------------------- Part B: speedup_table
    wrong("speedup_table", "speed-up inverted (time / time at 0 workers)", _speedup_table("""
            table = df.sort_values("num_workers").reset_index(drop=True)
            table["speedup"] = table["mean_s_per_batch"] / float(baseline.iloc[0])
          """), "test_speedup_table_values"),
    wrong("speedup_table", "rows not sorted by num_workers", _speedup_table("""
            table = df.copy()
            table["speedup"] = float(baseline.iloc[0]) / table["mean_s_per_batch"]
          """), "test_speedup_table_values"),
    wrong("speedup_table", "sorts the DataFrame it is given in place", _speedup_table("""
            df.sort_values("num_workers", inplace=True)
            df.reset_index(drop=True, inplace=True)
            table = df.copy()
            table["speedup"] = float(baseline.iloc[0]) / table["mean_s_per_batch"]
          """), "test_speedup_table_values"),
    wrong("speedup_table", "index not reset after sorting", _speedup_table("""
            table = df.sort_values("num_workers")
            table["speedup"] = float(baseline.iloc[0]) / table["mean_s_per_batch"]
          """), "test_speedup_table_values"),
    wrong("speedup_table", "accepts two rows with 0 workers (takes the first)", _speedup_table(check="""
            baseline = df.loc[df["num_workers"] == 0, "mean_s_per_batch"]
            if baseline.empty:
                raise ValueError("need a row with num_workers == 0")
          """), "test_speedup_table_needs_baseline"),
    # ---------------------------------------------------------------- Part C: predict_speedup
    wrong("predict_speedup", "cores / cpu_fraction without the case cpu_fraction == 0 (ZeroDivisionError)",
          _predict_speedup("return float(min(num_workers, cores / cpu_fraction))"),
          "test_predict_speedup_waiting"),
    wrong("predict_speedup", "min(num_workers, cores) whatever the items do",
          _predict_speedup("return float(min(num_workers, cores))"),
          "test_predict_speedup_waiting", "test_predict_speedup_mixed"),
    wrong("predict_speedup", "ignores the cores (num_workers)", _predict_speedup("return float(num_workers)"),
          "test_predict_speedup_computing", "test_predict_speedup_mixed"),
    wrong("predict_speedup", "cores * cpu_fraction instead of cores / cpu_fraction",
          _predict_speedup("return float(min(num_workers, cores * cpu_fraction))"),
          "test_predict_speedup_waiting", "test_predict_speedup_mixed"),
    # ---------------------------------------------------------------- Part D: time_epochs
    wrong("time_epochs", "the epoch timed from the first batch", _time_epochs("""
            for _ in range(epochs):
                start = time.perf_counter()
                first = None
                for batch in loader:
                    if first is None:
                        first = time.perf_counter()
                end = time.perf_counter()
                results.append((first - start, end - first))
          """), "test_time_epochs_known_cost", "test_time_epochs_startup"),
    wrong("time_epochs", "the start-up is iter(loader) alone", _time_epochs("""
            for _ in range(epochs):
                start = time.perf_counter()
                iterator = iter(loader)
                startup = time.perf_counter() - start
                for batch in iterator:
                    pass
                results.append((startup, time.perf_counter() - start))
          """), "test_time_epochs_known_cost"),
    wrong("time_epochs", "the clock started after iter(loader)", _time_epochs("""
            for _ in range(epochs):
                iterator = iter(loader)
                start = time.perf_counter()
                startup = None
                for batch in iterator:
                    if startup is None:
                        startup = time.perf_counter() - start
                results.append((startup, time.perf_counter() - start))
          """), "test_time_epochs_startup"),
    wrong("time_epochs", "one iterator reused for every epoch", _time_epochs("""
            iterator = iter(loader)
            for _ in range(epochs):
                start = time.perf_counter()
                startup = None
                for batch in iterator:
                    if startup is None:
                        startup = time.perf_counter() - start
                epoch = time.perf_counter() - start
                results.append((startup if startup is not None else epoch, epoch))
          """), "test_time_epochs_known_cost", "test_time_epochs_startup", "test_time_epochs_full_passes"),
]
