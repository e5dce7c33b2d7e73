"""Notebook 08 (beyond one machine): wrong answers and delegations (see ``__init__.py``).

The graded tests of Parts B and C call the answer in the kernel first, where the
references are hidden, and then in the ranks of a real torchrun launch, where they are not.
So most mistakes fail before anything is launched; the two that work in the kernel but
not in the ranks (a name the ranks do not have) each cost one launch of the notebook's
one-kernel run.
"""

from wrong_answers import wrong

DELEGATIONS = {
    "shard_indices": """
        from torch.utils.data import DistributedSampler


        def shard_indices(n_items, rank, world_size, *, epoch=0, seed=0, shuffle=True, drop_last=False):
            sampler = DistributedSampler(range(n_items), num_replicas=world_size, rank=rank, shuffle=shuffle,
                                         seed=seed, drop_last=drop_last)
            sampler.set_epoch(epoch)
            return list(sampler)
    """,
    # both of the answer's references: torch's datapipe for one function, the course's for the other
    "shard_stream": """
        from torch.utils.data.datapipes.iter import IterableWrapper
        from torch.utils.data.datapipes.iter.sharding import SHARDING_PRIORITIES

        from feedgpu.distributed.shards import shard_by_rank_and_worker


        def shard_stream(ids, rank, world_size, worker_id, num_workers):
            if world_size < 1 or num_workers < 1 or not 0 <= rank < world_size or not 0 <= worker_id < num_workers:
                raise ValueError(f"bad place: rank {rank} of {world_size}, worker {worker_id} of {num_workers}")
            stream = IterableWrapper(list(ids)).sharding_filter()
            stream.apply_sharding(world_size, rank, SHARDING_PRIORITIES.DISTRIBUTED)
            stream.apply_sharding(num_workers, worker_id, SHARDING_PRIORITIES.MULTIPROCESSING)
            return list(stream)


        def even_shard_stream(ids, rank, world_size, worker_id, num_workers):
            share = shard_by_rank_and_worker(ids, rank, world_size, worker_id, num_workers)
            return share[: len(ids) // (world_size * num_workers)]
    """,
    "exact_accuracy": """
        from feedgpu.distributed.shards import exact_accuracy as _exact


        def exact_accuracy(pairs):
            return _exact(pairs)[0]
    """,
}

# ------------------------------------------------------------------------------- Part B

_CHECK = """if world_size < 1 or not 0 <= rank < world_size:
                raise ValueError(f"rank {rank} of {world_size}")"""
_SHUFFLE = """if shuffle:
                g = torch.Generator()
                g.manual_seed(seed + epoch)
                order = torch.randperm(n_items, generator=g).tolist()
            else:
                order = list(range(n_items))"""
_PAD = """if drop_last:
                total = (n_items // world_size) * world_size
                order = order[:total]
            else:
                total = math.ceil(n_items / world_size) * world_size
                while order and len(order) < total:
                    order += order[: total - len(order)]"""


def _shard_indices(check: str = _CHECK, shuffle: str = _SHUFFLE, pad: str = _PAD,
                   deal: str = "return order[rank:total:world_size]", before: str = "") -> str:
    return before + f"""
        def shard_indices(n_items, rank, world_size, *, epoch=0, seed=0, shuffle=True, drop_last=False):
            {check}
            {shuffle}
            {pad}
            {deal}
    """


# ------------------------------------------------------------------------------- Part C

_SHARD = """
        def shard_stream(ids, rank, world_size, worker_id, num_workers):
            if world_size < 1 or num_workers < 1 or not 0 <= rank < world_size or not 0 <= worker_id < num_workers:
                raise ValueError(f"rank {rank} of {world_size}, worker {worker_id} of {num_workers}")
            return list(ids)[rank * num_workers + worker_id::world_size * num_workers]
"""
_EVEN = """
        def even_shard_stream(ids, rank, world_size, worker_id, num_workers):
            share = shard_stream(ids, rank, world_size, worker_id, num_workers)
            return share[: len(ids) // (world_size * num_workers)]
"""


def _shard_stream(body: str) -> str:
    return """
        def shard_stream(ids, rank, world_size, worker_id, num_workers):
    """ + body + _EVEN


def _even_shard_stream(body: str) -> str:
    return _SHARD + """
        def even_shard_stream(ids, rank, world_size, worker_id, num_workers):
    """ + body


_PLACE = """        if world_size < 1 or num_workers < 1 or not 0 <= rank < world_size or not 0 <= worker_id < num_workers:
                raise ValueError(f"rank {rank} of {world_size}, worker {worker_id} of {num_workers}")
"""

# ------------------------------------------------------------------------------- Part E


def _exact_accuracy(body: str) -> str:
    return """
        def exact_accuracy(pairs):
    """ + body


WRONG_ANSWERS = [
    # Part B: shard_indices
    wrong("shard_indices", "pads with the last indices instead of the first",
          _shard_indices(pad=_PAD.replace("order += order[: total - len(order)]",
                                          "order += order[len(order) - (total - len(order)):]")),
          "test_shard_indices_matches_distributed_sampler"),
    wrong("shard_indices", "deals contiguous blocks instead of round-robin",
          _shard_indices(deal="share = total // world_size\n            return order[rank * share:(rank + 1) * share]"),
          "test_shard_indices_matches_distributed_sampler"),
    wrong("shard_indices", "a rank out of range is accepted",
          _shard_indices(check="if world_size < 1:\n                raise ValueError(world_size)"),
          "test_shard_indices_matches_distributed_sampler"),
    wrong("shard_indices", "the seed leaves out the epoch: set_epoch changes nothing",
          _shard_indices(shuffle=_SHUFFLE.replace("g.manual_seed(seed + epoch)", "g.manual_seed(seed)")),
          "test_shard_indices_matches_distributed_sampler", "test_shard_indices_order_follows_set_epoch"),
    wrong("shard_indices", "a seed per rank: two decks",
          _shard_indices(shuffle=_SHUFFLE.replace("g.manual_seed(seed + epoch)", "g.manual_seed(seed + epoch + rank)")),
          "test_shard_indices_matches_distributed_sampler", "test_shard_indices_covers_every_id_in_the_run"),
    wrong("shard_indices", "no padding: ranks of 6 and 5",
          _shard_indices(pad="total = n_items if not drop_last else (n_items // world_size) * world_size"),
          "test_shard_indices_matches_distributed_sampler", "test_shard_indices_covers_every_id_in_the_run"),
    wrong("shard_indices", "drop_last is ignored: it pads instead",
          _shard_indices(pad=_PAD.replace("if drop_last:", "if False:")),
          "test_shard_indices_matches_distributed_sampler", "test_shard_indices_drop_last_in_the_run"),
    wrong("shard_indices", "a helper of the same cell, which the ranks do not have",
          _shard_indices(deal="return _deal(order, rank, world_size, total)", before="""
        def _deal(order, rank, world_size, total):
            return order[rank:total:world_size]

    """),
          "test_shard_indices_covers_every_id_in_the_run", "test_shard_indices_order_follows_set_epoch",
          "test_shard_indices_drop_last_in_the_run"),
    # Part C: shard_stream and even_shard_stream (one answer cell)
    wrong("shard_stream", "shards by rank only: every worker repeats its rank's share",
          _shard_stream(_PLACE + "            return list(ids)[rank::world_size]"),
          "test_shard_stream_in_this_process", "test_shard_stream_on_two_ranks_and_two_workers"),
    wrong("shard_stream", "shards by worker only: every rank repeats the stream",
          _shard_stream(_PLACE + "            return list(ids)[worker_id::num_workers]"),
          "test_shard_stream_in_this_process", "test_shard_stream_on_two_ranks_and_two_workers"),
    wrong("shard_stream", "numbers the copies rank + worker_id: copies collide",
          _shard_stream(_PLACE + "            return list(ids)[rank + worker_id::world_size * num_workers]"),
          "test_shard_stream_in_this_process", "test_shard_stream_on_two_ranks_and_two_workers"),
    wrong("shard_stream", "a worker id out of range is accepted",
          _shard_stream("""        if world_size < 1 or num_workers < 1 or not 0 <= rank < world_size:
                raise ValueError(rank)
            return list(ids)[rank * num_workers + worker_id::world_size * num_workers]"""),
          "test_shard_stream_in_this_process"),
    wrong("shard_stream", "uses the notebook's WORLD and WORKERS, which the ranks do not have",
          _shard_stream(_PLACE + "            return list(ids)[rank * WORKERS + worker_id::WORLD * WORKERS]"),
          "test_shard_stream_in_this_process", "test_shard_stream_on_two_ranks_and_two_workers",
          "test_even_shards_finish_without_hanging"),
    wrong("shard_stream", "even shards not cut: the round-robin shares",
          _even_shard_stream("        return shard_stream(ids, rank, world_size, worker_id, num_workers)"),
          "test_even_shards_finish_without_hanging"),
    wrong("shard_stream", "even shards cut to 2 ids, the number for 11 ids on 2 x 2",
          _even_shard_stream("        return shard_stream(ids, rank, world_size, worker_id, num_workers)[:2]"),
          "test_even_shards_finish_without_hanging"),
    wrong("shard_stream", "evens out the workers of each rank, not the ranks", _even_shard_stream("""
            share = shard_stream(ids, rank, world_size, worker_id, num_workers)
            return share[: len(list(ids)[rank::world_size]) // num_workers]"""),
          "test_even_shards_finish_without_hanging"),
    wrong("shard_stream", "cuts one id more than evening out needs", _even_shard_stream("""
            share = shard_stream(ids, rank, world_size, worker_id, num_workers)
            return share[: len(ids) // (world_size * num_workers) - 1]"""),
          "test_even_shards_finish_without_hanging"),
    wrong("shard_stream", "divides before checking: ZeroDivisionError, not ValueError", _even_shard_stream("""
            keep = len(ids) // (world_size * num_workers)
            return shard_stream(ids, rank, world_size, worker_id, num_workers)[:keep]"""),
          "test_even_shards_finish_without_hanging"),
    # Part E: exact_accuracy
    wrong("exact_accuracy", "the naive mean over every pair", _exact_accuracy("""
            pairs = list(pairs)
            if not pairs:
                raise ValueError("no pairs")
            return sum(bool(c) for _, c in pairs) / len(pairs)"""),
          "test_exact_accuracy_in_this_process", "test_exact_accuracy_same_on_one_and_two_ranks"),
    wrong("exact_accuracy", "distinct ids over the number of pairs", _exact_accuracy("""
            pairs = list(pairs)
            if not pairs:
                raise ValueError("no pairs")
            right = {int(i) for i, c in pairs if c}
            return len(right) / len(pairs)"""),
          "test_exact_accuracy_in_this_process", "test_exact_accuracy_same_on_one_and_two_ranks"),
    wrong("exact_accuracy", "a conflict is not an error: the last outcome wins", _exact_accuracy("""
            outcome = {int(i): bool(c) for i, c in pairs}
            if not outcome:
                raise ValueError("no pairs")
            return sum(outcome.values()) / len(outcome)"""),
          "test_exact_accuracy_in_this_process"),
    wrong("exact_accuracy", "no pairs: ZeroDivisionError, not ValueError", _exact_accuracy("""
            outcome = {}
            for i, c in pairs:
                if outcome.setdefault(int(i), bool(c)) != bool(c):
                    raise ValueError(f"sample {i} both right and wrong")
            return sum(outcome.values()) / len(outcome)"""),
          "test_exact_accuracy_in_this_process"),
]
