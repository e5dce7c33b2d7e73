"""``python -m feedgpu.objectstore``: serve the LFW tree from a local S3 until Ctrl-C (``make objectstore``)."""

from __future__ import annotations

import argparse
import signal
import sys
import time

from ..base.cli import OneLineParser, UsageError, run_command
from .filling import IMAGES_PER_SHARD, fill_from_tree, pack_shards
from .server import DUMMY_CREDENTIALS, REGION, ObjectStore

SNIPPET = """\
From Python (boto3), in a notebook or a DataLoader worker:

    import boto3
    s3 = boto3.client("s3", endpoint_url="{endpoint}", region_name="{region}",
                      aws_access_key_id="{key_id}", aws_secret_access_key="{secret}")
    data = s3.get_object(Bucket="{bucket}", Key="{key}")["Body"].read()
    shard = s3.get_object(Bucket="{shard_bucket}", Key="{shard_key}")["Body"].read()

or: from feedgpu.objectstore import make_client; s3 = make_client("{endpoint}")
"""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m feedgpu.objectstore",
        description="Serve an LFW tree from a local S3-compatible object store (moto) with injected "
                    "latency (and its tail), bandwidth, concurrency and request-rate limits and failures, "
                    "until Ctrl-C.")
    parser.add_argument("--root", default=None, help="the LFW tree (default: the course's data tree)")
    parser.add_argument("--bucket", default="lfw", help="bucket of the images, one object each (default: lfw)")
    parser.add_argument("--shard-bucket", default="lfw-shards",
                        help="bucket of the tar shards (default: lfw-shards; '' for none)")
    parser.add_argument("--images-per-shard", type=int, default=IMAGES_PER_SHARD)
    parser.add_argument("--limit", type=int, default=None, help="serve only the first N images")
    parser.add_argument("--port", type=int, default=9000, help="port on 127.0.0.1 (default 9000; 0 for any free one)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="time to first byte per request (the median)")
    parser.add_argument("--latency-sigma", type=float, default=0.0,
                        help="tail of the time to first byte: log-normal spread (default 0: none; 1: p99 ~10x median)")
    parser.add_argument("--bandwidth-mb-s", type=float, default=None,
                        help="megabytes (10**6 bytes) per second per connection (default: no limit)")
    parser.add_argument("--max-concurrent", type=int, default=None,
                        help="requests served at once; more wait (default: no limit)")
    parser.add_argument("--requests-per-s", type=float, default=None,
                        help="request rate beyond which requests get 503 SlowDown, as S3's per prefix (default: no limit)")
    parser.add_argument("--burst", type=float, default=None,
                        help="requests let through at once by the rate limit (default: a tenth of a second's worth)")
    parser.add_argument("--slowdown-rate", type=float, default=0.0, help="probability of 503 SlowDown at random")
    parser.add_argument("--drop-rate", type=float, default=0.0, help="probability of a dropped connection")
    parser.add_argument("--cut-rate", type=float, default=0.0,
                        help="probability that a body is cut part-way (the client's read fails)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the failures (default 0)")
    return parser


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # `kill` or a closing terminal stops the store as cleanly as Ctrl-C


def main(argv: list[str] | None = None) -> int:
    return run_command("", _main, argv)


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
        # A shell without job control starts background commands with Ctrl-C ignored, and
        # Python then keeps it ignored; this command promises that Ctrl-C stops it.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # main() called from a thread other than the main one
        pass
    settings = dict(
        latency_s=args.latency_ms / 1000.0,
        latency_sigma=args.latency_sigma,
        bandwidth_bytes_per_s=None if args.bandwidth_mb_s is None else args.bandwidth_mb_s * 1e6,
        max_concurrent=args.max_concurrent,
        requests_per_s=args.requests_per_s,
        burst=args.burst,
        slowdown_rate=args.slowdown_rate,
        drop_rate=args.drop_rate,
        cut_rate=args.cut_rate,
        seed=args.seed,
    )
    store = ObjectStore(port=args.port)
    try:
        store.start()
    except OSError as e:
        raise UsageError(str(e)) from None
    # filled at full speed first; the injected costs apply once the data is in
    with store:
        client = store.client()
        keys = fill_from_tree(client, args.bucket, args.root, args.limit)
        shard_keys = []
        if args.shard_bucket:
            shard_keys = pack_shards(client, args.shard_bucket, args.root, limit=args.limit,
                                     images_per_shard=args.images_per_shard, prefix="")
        client.close()
        store.set(**settings)
        store.reset_stats()
        print(f"\nObject store at {store.endpoint_url}: bucket '{args.bucket}' holds {len(keys)} images"
              + (f", bucket '{args.shard_bucket}' {len(shard_keys)} shards" if shard_keys else ""))
        print(f"Injected: {store.settings}\n")
        print(SNIPPET.format(endpoint=store.endpoint_url, region=REGION, bucket=args.bucket, key=keys[0],
                             shard_bucket=args.shard_bucket or args.bucket,
                             shard_key=shard_keys[0] if shard_keys else keys[0],
                             key_id=DUMMY_CREDENTIALS["aws_access_key_id"],
                             secret=DUMMY_CREDENTIALS["aws_secret_access_key"]))
        print("Press Ctrl-C to stop.", flush=True)
        try:
            while True:  # until Ctrl-C; a short sleep, because Windows delivers Ctrl-C only between waits
                time.sleep(0.5)
        except KeyboardInterrupt:
            print(f"\nStopping; served {store.stats()['requests']} requests.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
