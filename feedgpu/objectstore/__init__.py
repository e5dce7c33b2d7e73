"""The course's object store: a local S3 that is as slow and as unreliable as you ask.

moto's S3 server answers on 127.0.0.1; a WSGI middleware of ours in front of it adds what
makes remote storage hard to feed a GPU from, failing the way S3 fails: a time to first
byte per request with a slow tail, a bandwidth per connection, a limit on requests served
at once, S3's ``503 SlowDown`` answers (at random, or for every request beyond a request
rate), connections dropped before the answer and cut in the middle of a body. What each
request meets is drawn from a seed, so that a run can be repeated. Students reach it with
boto3, exactly as they would reach Amazon S3::

    from feedgpu.objectstore import ObjectStore, fill_from_tree

    with ObjectStore(latency_s=0.05, seed=0) as store:
        s3 = store.client()                      # boto3, retry mode "standard"
        keys = fill_from_tree(s3, "lfw", limit=500)
        body = s3.get_object(Bucket="lfw", Key=keys[0])["Body"].read()
        store.set(latency_s=0.2)                 # sweep without a restart
        store.set(latency_sigma=1.0, requests_per_s=100, cut_rate=0.05)  # a tail, S3's rate limit, cut bodies
        print(store.stats())                     # requests, peak_in_flight, slowdowns, cuts, ...

* :mod:`~feedgpu.objectstore.server`: :class:`ObjectStore`, :class:`StoreSettings`, the
  :class:`FaultInjector` middleware and :func:`make_client` (which DataLoader workers
  call to build their own client from ``store.endpoint_url``).
* :mod:`~feedgpu.objectstore.faults`: :func:`~feedgpu.objectstore.faults.draw_fate` (what
  one request meets, from the seed) and :class:`~feedgpu.objectstore.faults.TokenBucket`
  (the request-rate limit).
* :mod:`~feedgpu.objectstore.filling`: :func:`fill_from_tree` (one object per image),
  :func:`pack_shards` and :func:`read_shard` (tar shards of many images), :func:`list_keys`.
* ``python -m feedgpu.objectstore`` (``make objectstore``) serves the LFW tree in the
  foreground until Ctrl-C.
"""

from .faults import Fate, TokenBucket, draw_fate
from .filling import IMAGES_PER_SHARD, ensure_bucket, fill_from_tree, list_images, list_keys, pack_shards, read_shard
from .server import REGION, SLOWDOWN_XML, FaultInjector, ObjectStore, StoreSettings, make_client

__all__ = [
    "ObjectStore",
    "StoreSettings",
    "FaultInjector",
    "Fate",
    "TokenBucket",
    "draw_fate",
    "make_client",
    "REGION",
    "SLOWDOWN_XML",
    "fill_from_tree",
    "pack_shards",
    "read_shard",
    "list_keys",
    "list_images",
    "ensure_bucket",
    "IMAGES_PER_SHARD",
]
