"""Notebook 09 (the capstone): wrong answers and delegations (see ``__init__.py``)."""

from wrong_answers import wrong

DELEGATIONS = {
    "workers_for_step": "from feedgpu.workloads.face_training import workers_to_keep_up as workers_for_step",
    "pack_annotations": """
        def pack_annotations(records):
            return ft.packed_annotations(records)
    """,
    "to_model_input": "from feedgpu.workloads.face_training import model_input as to_model_input",
    "epoch_order": "epoch_order = ft.shuffled_order",
    "train_epoch": """
        def train_epoch(loader, device, log_every=LOG_EVERY):
            return ft.fixed_train_epoch(loader, device, log_every)
    """,
    "make_loader": """
        def make_loader(records, seed=SEED):
            return ft.fixed_loader(records, seed)
    """,
}

_CHECK = """if item_s < 0 or batch_size < 1 or step_s <= 0 or margin < 1:
                raise ValueError('bad input')"""


def _workers(checks: str, result: str) -> str:
    return f"""
        def workers_for_step(item_s, batch_size, step_s, margin=1.25):
            {checks}
            return {result}
    """


def _pack(body: str) -> str:
    return """
        def pack_annotations(records):
    """ + body


def _normalise(body: str) -> str:
    return """
        def to_model_input(images):
    """ + body


def _order(body: str) -> str:
    return """
        def epoch_order(n, seed, epoch):
    """ + body


def _epoch(body: str) -> str:
    return """
        def train_epoch(loader, device, log_every=LOG_EVERY):
    """ + body


def _loader(dataset: str, loader: str) -> str:
    return f"""
        def make_loader(records, seed=SEED):
            dataset = {dataset}
            return {loader}
    """


_PACKED = 'FaceItems(pack_annotations(records), output="uint8", seed=seed)'
_WORKERS = "workers_for_step(ITEM_S, BATCH_SIZE, STEP_S)"
_SAMPLER = "EpochBatches(len(dataset), BATCH_SIZE, epoch_order, seed)"

WRONG_ANSWERS = [
    # workers_for_step
    wrong("workers_for_step", "rounds down", _workers(_CHECK, "max(1, math.floor(margin * batch_size * item_s / step_s))"),
          "test_workers_for_step"),
    wrong("workers_for_step", "leaves out the margin", _workers(_CHECK, "max(1, math.ceil(batch_size * item_s / step_s))"),
          "test_workers_for_step"),
    wrong("workers_for_step", "one worker per core", _workers(_CHECK, "CORES"), "test_workers_for_step"),
    wrong("workers_for_step", "0 workers for items that cost nothing",
          _workers(_CHECK, "math.ceil(margin * batch_size * item_s / step_s)"), "test_workers_for_step"),
    wrong("workers_for_step", "no check of its input", _workers("pass", "max(1, math.ceil(margin * batch_size * item_s / step_s))"),
          "test_workers_for_step"),
    # pack_annotations
    wrong("pack_annotations", "the paths as an object array", _pack("""
            return {"path": np.array([r["path"] for r in records], dtype=object),
                    "label": np.array([r["label"] for r in records], dtype=np.int64),
                    "landmarks": np.array([r["landmarks"] for r in records], dtype=np.float32)}
    """), "test_pack_annotations"),
    wrong("pack_annotations", "a dict of lists", _pack("""
            return {key: [r[key] for r in records] for key in ("path", "label", "landmarks")}
    """), "test_pack_annotations"),
    wrong("pack_annotations", "landmarks left in float64", _pack("""
            return {"path": np.array([r["path"] for r in records]),
                    "label": np.array([r["label"] for r in records], dtype=np.int64),
                    "landmarks": np.array([r["landmarks"] for r in records])}
    """), "test_pack_annotations"),
    wrong("pack_annotations", "the records sorted by path first", _pack("""
            records = sorted(records, key=lambda r: r["path"])
            return {"path": np.array([r["path"] for r in records], dtype=str),
                    "label": np.array([r["label"] for r in records], dtype=np.int64),
                    "landmarks": np.array([r["landmarks"] for r in records], dtype=np.float32)}
    """), "test_pack_annotations"),
    # to_model_input
    wrong("to_model_input", "divides by 256", _normalise("""
            mean = torch.tensor(ft.MEAN).view(1, 3, 1, 1)
            std = torch.tensor(ft.STD).view(1, 3, 1, 1)
            return (images.float() / 256 - mean) / std
    """), "test_to_model_input"),
    wrong("to_model_input", "forgets the standard deviation", _normalise("""
            return images.float() / 255 - torch.tensor(ft.MEAN).view(1, 3, 1, 1)
    """), "test_to_model_input"),
    wrong("to_model_input", "float64 output", _normalise("""
            mean = torch.tensor(ft.MEAN, dtype=torch.float64).view(1, 3, 1, 1)
            std = torch.tensor(ft.STD, dtype=torch.float64).view(1, 3, 1, 1)
            return (images.double() / 255 - mean) / std
    """), "test_to_model_input"),
    wrong("to_model_input", "the mean and std laid along the last axis", _normalise("""
            return (images.float() / 255 - torch.tensor(ft.MEAN)) / torch.tensor(ft.STD)
    """), "test_to_model_input"),
    wrong("to_model_input", "one mean and std for every channel", _normalise("""
            return (images.float() / 255 - ft.MEAN[0]) / ft.STD[0]
    """), "test_to_model_input"),
    # epoch_order
    wrong("epoch_order", "ignores the epoch", _order("""
            rng = np.random.default_rng(seed)
            return rng.permutation(n), rng.integers(0, 2**63 - 1, size=n)
    """), "test_epoch_order"),
    wrong("epoch_order", "numpy's global generator: not reproducible", _order("""
            return np.random.permutation(n), np.random.randint(0, 2**62, size=n)
    """), "test_epoch_order"),
    wrong("epoch_order", "seeds from the sample's id: the same flips every epoch", _order("""
            ids = np.random.default_rng([seed, epoch]).permutation(n)
            return ids, seed * 100_003 + ids
    """), "test_epoch_order"),
    wrong("epoch_order", "seed + epoch + position: seeds come back the next epoch", _order("""
            ids = np.random.default_rng([seed, epoch]).permutation(n)
            return ids, seed + epoch + np.arange(n)
    """), "test_epoch_order"),
    wrong("epoch_order", "one seed for the whole epoch", _order("""
            rng = np.random.default_rng([seed, epoch])
            return rng.permutation(n), np.full(n, int(rng.integers(0, 2**62)))
    """), "test_epoch_order"),
    wrong("epoch_order", "seeds drawn from a tiny range", _order("""
            rng = np.random.default_rng([seed, epoch])
            return rng.permutation(n), rng.integers(0, 1000, size=n)
    """), "test_epoch_order"),
    # train_epoch
    wrong("train_epoch", "reads the loss after every step (the slow loop's sync)", _epoch("""
            logged = []
            for step, (images, labels, ids) in enumerate(loader):
                loss = device.step(to_model_input(images), labels, ids).item()
                if step % log_every == 0:
                    logged.append(loss)
            return logged
    """), "test_train_epoch"),
    wrong("train_epoch", "synchronises after every step", _epoch("""
            pending = []
            for step, (images, labels, ids) in enumerate(loader):
                loss = device.step(to_model_input(images), labels, ids)
                device.synchronize()
                if step % log_every == 0:
                    pending.append(loss)
            return [loss.item() for loss in pending]
    """), "test_train_epoch"),
    wrong("train_epoch", "logs steps log_every - 1, 2 * log_every - 1, ...", _epoch("""
            pending = []
            for step, (images, labels, ids) in enumerate(loader):
                loss = device.step(to_model_input(images), labels, ids)
                if (step + 1) % log_every == 0:
                    pending.append(loss)
            return [loss.item() for loss in pending]
    """), "test_train_epoch"),
    wrong("train_epoch", "images.float() without the normalisation", _epoch("""
            pending = []
            for step, (images, labels, ids) in enumerate(loader):
                loss = device.step(images.float(), labels, ids)
                if step % log_every == 0:
                    pending.append(loss)
            return [loss.item() for loss in pending]
    """), "test_train_epoch"),
    wrong("train_epoch", "returns the pending values, not floats", _epoch("""
            pending = []
            for step, (images, labels, ids) in enumerate(loader):
                loss = device.step(to_model_input(images), labels, ids)
                if step % log_every == 0:
                    pending.append(loss)
            return pending
    """), "test_train_epoch"),
    wrong("train_epoch", "leaves out the ids", _epoch("""
            pending = []
            for step, (images, labels, ids) in enumerate(loader):
                loss = device.step(to_model_input(images), labels)
                if step % log_every == 0:
                    pending.append(loss)
            return [loss.item() for loss in pending]
    """), "test_train_epoch"),
    # make_loader
    wrong("make_loader", "still 0 workers", _loader(_PACKED, f"DataLoader(dataset, batch_sampler={_SAMPLER})"),
          "test_loads_in_workers", "test_enough_workers", "test_persistent_workers"),
    wrong("make_loader", "2 workers, one per core of a small laptop", _loader(
        _PACKED, f"DataLoader(dataset, batch_sampler={_SAMPLER}, num_workers=2, persistent_workers=True)"),
        "test_enough_workers", "test_capstone_busy"),
    wrong("make_loader", "64 workers", _loader(
        _PACKED, f"DataLoader(dataset, batch_sampler={_SAMPLER}, num_workers=64, persistent_workers=True)"),
        "test_enough_workers"),
    wrong("make_loader", "the list of dicts kept", _loader(
        'FaceItems(list(records), output="uint8", seed=seed)',
        f"DataLoader(dataset, batch_sampler={_SAMPLER}, num_workers={_WORKERS}, persistent_workers=True)"),
        "test_packed_annotations_in_the_loader"),
    wrong("make_loader", "float64 numpy batches kept", _loader(
        'FaceItems(pack_annotations(records), output="float64", seed=seed)',
        f"DataLoader(dataset, batch_sampler={_SAMPLER}, num_workers={_WORKERS}, persistent_workers=True, "
        "collate_fn=collate_numpy)"), "test_uint8_batches"),
    wrong("make_loader", "uint8 items, but collate_numpy kept", _loader(
        _PACKED, f"DataLoader(dataset, batch_sampler={_SAMPLER}, num_workers={_WORKERS}, persistent_workers=True, "
        "collate_fn=collate_numpy)"), "test_uint8_batches"),
    wrong("make_loader", "workers not persistent", _loader(
        _PACKED, f"DataLoader(dataset, batch_sampler={_SAMPLER}, num_workers={_WORKERS})"), "test_persistent_workers"),
    wrong("make_loader", "shuffle=True: the flips come from the copied generator", _loader(
        _PACKED, f"DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, num_workers={_WORKERS}, "
        "persistent_workers=True)"), "test_per_sample_flips"),
    wrong("make_loader", "smaller batches (8), so they come faster", _loader(
        _PACKED, f"DataLoader(dataset, batch_sampler=EpochBatches(len(dataset), 8, epoch_order, seed), "
        f"num_workers={_WORKERS}, persistent_workers=True)"), "test_per_sample_flips", "test_capstone_every_sample"),
    wrong("make_loader", "the last, short batch's faces left out", _loader(
        'FaceItems(pack_annotations(records[:len(records) // BATCH_SIZE * BATCH_SIZE]), output="uint8", seed=seed)',
        f"DataLoader(dataset, batch_sampler={_SAMPLER}, num_workers={_WORKERS}, persistent_workers=True)"),
        "test_packed_annotations_in_the_loader"),
    wrong("make_loader", "faces that no longer wait for storage: a cheaper item, not a faster loop", _loader(
        'FaceItems(pack_annotations(records), output="uint8", seed=seed, wait_s=0, open_s=0)',
        f"DataLoader(dataset, batch_sampler={_SAMPLER}, num_workers={_WORKERS}, persistent_workers=True)"),
        "test_capstone_busy", "test_capstone_every_sample"),
]
