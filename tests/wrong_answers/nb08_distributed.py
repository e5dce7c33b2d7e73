"""Notebook 08 (beyond one machine): wrong answers and delegations (see ``__init__.py``)."""

from wrong_answers import wrong

DELEGATIONS = {
    "shard_indices": "from feedgpu.distributed.shards import padded_indices as shard_indices",
    "shard_stream": """
        from feedgpu.distributed.shards import shard_by_rank_and_worker as shard_stream


        def even_shard_stream(ids, rank, world_size, worker_id, num_workers):
            share = shard_stream(ids, rank, world_size, worker_id, num_workers)
            return share[: len(ids) // (world_size * num_workers)]
    """,
    "exact_accuracy": """
        from feedgpu.distributed.shards import exact_accuracy as _exact


        def exact_accuracy(pairs):
            return _exact(pairs)[0]
    """,
}

WRONG_ANSWERS = []
