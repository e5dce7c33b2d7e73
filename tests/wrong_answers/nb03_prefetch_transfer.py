"""Notebook 03 (prefetching and transfer cost): wrong answers and delegations (see ``__init__.py``)."""

import textwrap

from wrong_answers import wrong

DELEGATIONS = {
    "time_per_batch": "time_per_batch = steady_state_time_per_batch",
    "collate_to_tensor": "collate_to_tensor = collate_tensor",
}


def _src(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def _indent(code: str, spaces: int) -> str:
    return textwrap.indent(_src(code), " " * spaces).lstrip()


_TIME_PER_BATCH = '''
def time_per_batch(num_workers, load_s, step_s, transfer_s=0.0):
    {check}
    if load_s < 0 or step_s < 0 or transfer_s < 0:
        raise ValueError(f"times must be >= 0, got {{load_s}}, {{step_s}}, {{transfer_s}}")
    if num_workers == 0:
        return {serial}
    return {pipelined}
'''

_WHOLE_CHECK = '''
if num_workers < 0 or int(num_workers) != num_workers:
    raise ValueError(f"num_workers must be a whole number >= 0, got {num_workers}")
'''


def _time_per_batch(serial: str = "load_s + step_s",
                    pipelined: str = "max(step_s + transfer_s, (load_s + transfer_s) / num_workers)",
                    check: str = _WHOLE_CHECK) -> str:
    return _src(_TIME_PER_BATCH).format(check=_indent(check, 4), serial=serial, pipelined=pipelined)


_COLLATE = '''
def collate_to_tensor(records):
    if len(records) == 0:
        raise ValueError("cannot collate an empty batch")
    {body}
'''


_FIXED_LOADER = '''
def fixed_loader(dataset, load_s, step_s, transfer_s, prefetch_factor=2):
    floor = step_s + transfer_s
    workers = next(w for w in range(1, 1025) if time_per_batch(w, load_s, step_s, transfer_s) <= floor * (1 + 1e-9))
    return {loader}
'''


def _fixed_loader(loader: str) -> str:
    return _FIXED_LOADER.format(loader=loader)


def _collate(body: str) -> str:
    return _src(_COLLATE).format(body=_indent(body, 4))


WRONG_ANSWERS = [
    # ---------------------------------------------------------------- Part B: time_per_batch
    wrong("time_per_batch", "the transfer charged with 0 workers", _time_per_batch(serial="load_s + step_s + transfer_s"),
          "test_time_per_batch_serial"),
    wrong("time_per_batch", "with 0 workers, load and step overlap (max)", _time_per_batch(serial="max(load_s, step_s)"),
          "test_time_per_batch_serial"),
    wrong("time_per_batch", "workers do not overlap the step: (load + transfer) / w + step + transfer",
          _time_per_batch(pipelined="(load_s + transfer_s) / num_workers + step_s + transfer_s"),
          "test_time_per_batch_stack_overflow", "test_time_per_batch_transfer"),
    wrong("time_per_batch", "no floor at the step: (load + transfer) / w",
          _time_per_batch(pipelined="(load_s + transfer_s) / num_workers"),
          "test_time_per_batch_stack_overflow", "test_time_per_batch_transfer"),
    wrong("time_per_batch", "the transfer paid by the main process only",
          _time_per_batch(pipelined="max(step_s + transfer_s, load_s / num_workers)"),
          "test_time_per_batch_transfer"),
    wrong("time_per_batch", "the transfer paid by the workers only",
          _time_per_batch(pipelined="max(step_s, (load_s + transfer_s) / num_workers)"),
          "test_time_per_batch_transfer"),
    wrong("time_per_batch", "the transfer ignored", _time_per_batch(pipelined="max(step_s, load_s / num_workers)"),
          "test_time_per_batch_transfer"),
    wrong("time_per_batch", "the transfer added once to the total",
          _time_per_batch(pipelined="max(step_s, load_s / num_workers) + transfer_s"),
          "test_time_per_batch_transfer"),
    wrong("time_per_batch", "no check that num_workers is whole (1.5 accepted)", _time_per_batch(check="""
            if num_workers < 0:
                raise ValueError(f"num_workers must be >= 0, got {num_workers}")
          """), "test_time_per_batch_rejects_bad_input"),
    # ---------------------------------------------------------------- Part E: collate_to_tensor
    wrong("collate_to_tensor", "a preallocated batch never filled (the loop rebinds a name): zeros", _collate("""
            batch = torch.zeros((len(records), *records[0].shape), dtype=torch.from_numpy(records[0]).dtype)
            for row, record in zip(batch, records):
                row = torch.from_numpy(record)
            return batch
          """), "test_collate_to_tensor_values", "test_collate_to_tensor_is_faster"),
    wrong("collate_to_tensor", "cast to float32", _collate("return torch.from_numpy(np.stack(records)).float()"),
          "test_collate_to_tensor_values", "test_collate_to_tensor_is_faster"),
    wrong("collate_to_tensor", "a list of tensors", _collate("return [torch.from_numpy(record) for record in records]"),
          "test_collate_to_tensor_values"),
    wrong("collate_to_tensor", "a numpy array", _collate("return np.stack(records)"),
          "test_collate_to_tensor_values"),
    wrong("collate_to_tensor", "not contiguous: stacked on the last axis, then moved first",
          _collate("return torch.from_numpy(np.stack(records, axis=-1)).movedim(-1, 0)"),
          "test_collate_to_tensor_values"),
    # ---------------------------------------------------------------- Part E: fixed_loader
    wrong("fixed_loader", "the question's collate kept: a list of arrays per batch", _fixed_loader(
        "DataLoader(dataset, batch_size=ITEMS_PER_BATCH, num_workers=workers, prefetch_factor=prefetch_factor, "
        "persistent_workers=True, collate_fn=collate_list)"), "test_fixed_loader_settings"),
    wrong("fixed_loader", "one worker per core, whatever the model says", _fixed_loader(
        "DataLoader(dataset, batch_size=ITEMS_PER_BATCH, num_workers=CORES, prefetch_factor=prefetch_factor, "
        "persistent_workers=True)"), "test_fixed_loader_settings"),
    wrong("fixed_loader", "the count rounded down", _fixed_loader(
        "DataLoader(dataset, batch_size=ITEMS_PER_BATCH, num_workers=max(1, int((load_s + transfer_s) / floor)), "
        "prefetch_factor=prefetch_factor, persistent_workers=True)"), "test_fixed_loader_settings"),
    wrong("fixed_loader", "the transfer left out of the count", _fixed_loader(
        "DataLoader(dataset, batch_size=ITEMS_PER_BATCH, num_workers=max(1, math.ceil(load_s / step_s - 1e-9)), "
        "prefetch_factor=prefetch_factor, persistent_workers=True)"), "test_fixed_loader_settings"),
    wrong("fixed_loader", "the prefetch_factor given is ignored", _fixed_loader(
        "DataLoader(dataset, batch_size=ITEMS_PER_BATCH, num_workers=workers, persistent_workers=True)"),
        "test_fixed_loader_settings"),
    wrong("fixed_loader", "a single worker: the queue is meant to do the rest", _fixed_loader(
        "DataLoader(dataset, batch_size=ITEMS_PER_BATCH, num_workers=1, prefetch_factor=8, persistent_workers=True)"),
        "test_fixed_loader_settings", "test_fixed_loader_reaches_the_floor"),
]
