"""Putting the LFW tree into a bucket: one object per image, or shards of many images.

Keys mirror the tree, so an image and its person can be told from the key alone::

    root/Aaron_Peirsol/Aaron_Peirsol_0001.jpg  ─►  s3://<bucket>/Aaron_Peirsol/Aaron_Peirsol_0001.jpg
    images 0-255, 256-511, ...                 ─►  s3://<bucket>/shards/shard-00000.tar, shard-00001.tar, ...

A shard is a plain tar file whose members carry the same keys (the layout that WebDataset
reads), written byte for byte the same on every machine.
"""

from __future__ import annotations

import io
import mimetypes
import os
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["list_images", "ensure_bucket", "fill_from_tree", "pack_shards", "read_shard", "list_keys"]

#: Images per shard by default: ~3.5 MB shards of 13 KB faces, a few dozen for all of LFW.
IMAGES_PER_SHARD = 256


def list_images(root: str | os.PathLike | None = None, limit: int | None = None) -> list[tuple[str, Path]]:
    """The images of an LFW-layout tree as ``(key, path)``, sorted by person then file.

    Args:
        root: the tree; ``None`` for :func:`lfw_dataset.default_root`.
        limit: keep only the first ``limit`` images (in that sorted order).

    Raises:
        FileNotFoundError: the tree is missing (the message says which ``make`` target makes
            it) or holds no image.
    """
    # imported here because lfw_dataset imports torch (half a gigabyte), which the
    # store's own process (`make objectstore`) never needs
    import lfw_dataset

    root = Path(root) if root is not None else lfw_dataset.default_root()
    _, class_to_idx = lfw_dataset.find_classes(root)
    samples = lfw_dataset.make_samples(root, class_to_idx)
    if limit is not None:
        if limit < 0:
            raise ValueError(f"limit must be >= 0 images, got {limit}")
        samples = samples[:limit]
    if not samples:
        raise FileNotFoundError(f"no images under {root}; expected <Person>/<Person>_0001.jpg files "
                                "(`make data` writes them)")
    return [(f"{Path(path).parent.name}/{Path(path).name}", Path(path)) for path, _ in samples]


def ensure_bucket(client: Any, bucket: str) -> None:
    """Create ``bucket`` unless it exists already."""
    existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
    if bucket not in existing:
        client.create_bucket(Bucket=bucket)


def _progress(items: Iterable, total: int, desc: str, unit: str, progress: bool) -> Iterable:
    if not progress:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, total=total, desc=desc, unit=unit)


def fill_from_tree(client: Any, bucket: str, root: str | os.PathLike | None = None, limit: int | None = None,
                   *, progress: bool = True) -> list[str]:
    """Upload every image of an LFW tree as its own object, ``<Person>/<file>.jpg``.

    Args:
        client: a boto3 S3 client (``store.client()``).
        bucket: created if missing.
        root: the tree; ``None`` for the course's default tree.
        limit: upload only the first ``limit`` images (sorted by person, then file).
        progress: show a progress bar.

    Returns:
        The keys uploaded, in order.
    """
    images = list_images(root, limit)
    ensure_bucket(client, bucket)
    for key, path in _progress(images, len(images), f"s3://{bucket}", "img", progress):
        content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes(), ContentType=content_type)
    return [key for key, _ in images]


def _tar_bytes(members: Iterable[tuple[str, Path]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for key, path in members:
            data = path.read_bytes()
            info = tarfile.TarInfo(key)
            # fixed metadata, so the same images give the same bytes on every machine
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def pack_shards(client: Any, bucket: str, root: str | os.PathLike | None = None, *,
                images_per_shard: int = IMAGES_PER_SHARD, prefix: str = "shards/",
                limit: int | None = None, progress: bool = True) -> list[str]:
    """Pack the images into tar shards and upload each as one object.

    One GET of a shard brings ``images_per_shard`` images for one time to first byte:
    the "few large objects instead of many small ones" remedy for a high-latency store.

    Args:
        client, bucket, root, limit, progress: as in :func:`fill_from_tree`.
        images_per_shard: images in each shard (the last one may hold fewer).
        prefix: put before each shard's name, ``<prefix>shard-00000.tar``.

    Returns:
        The shard keys, in order; :func:`read_shard` unpacks one.
    """
    if images_per_shard < 1:
        raise ValueError(f"images_per_shard must be >= 1, got {images_per_shard}")
    images = list_images(root, limit)
    ensure_bucket(client, bucket)
    groups = [images[i:i + images_per_shard] for i in range(0, len(images), images_per_shard)]
    keys = []
    for number, group in enumerate(_progress(groups, len(groups), f"s3://{bucket}/{prefix}", "shard", progress)):
        key = f"{prefix}shard-{number:05d}.tar"
        client.put_object(Bucket=bucket, Key=key, Body=_tar_bytes(group), ContentType="application/x-tar")
        keys.append(key)
    return keys


def read_shard(data: bytes) -> list[tuple[str, bytes]]:
    """The ``(key, image bytes)`` pairs of a shard's bytes, in the order they were packed."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        return [(member.name, tar.extractfile(member).read()) for member in tar if member.isfile()]


def list_keys(client: Any, bucket: str, prefix: str = "", page_size: int = 1000) -> list[str]:
    """Every key under ``prefix`` in ``bucket``, in S3's order (sorted by key), page by page."""
    paginator = client.get_paginator("list_objects_v2")
    pages = paginator.paginate(Bucket=bucket, Prefix=prefix, PaginationConfig={"PageSize": page_size})
    return [item["Key"] for page in pages for item in page.get("Contents", [])]
