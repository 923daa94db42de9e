"""S3ArchiveStore against a real S3 HTTP server on 127.0.0.1 (moto's): the archive store
conformance suite, with what the bucket holds checked directly (objects and unfinished
multipart uploads)."""

from __future__ import annotations

import functools
import uuid

import anyio.to_thread
import pytest

from rock_archive_s3 import S3ArchiveStore
from rock_archive_s3.testing import MotoServer
from rock_core.sizes import MiB
from rock_core.testing import ArchiveStoreConformance


class TestS3ArchiveStore(ArchiveStoreConformance):
    # moto's server completes a multipart upload by copying the whole object in Python, so the
    # big stream is 256 MiB: 32 parts of 8 MiB, four times the memory growth allowed (a store
    # that held the object fails), and the store's memory does not depend on the size.
    big_size = 256 * MiB

    @pytest.fixture(scope="class")
    @classmethod
    async def store(cls, moto_server: MotoServer):
        bucket = moto_server.create_bucket(f"rock-conformance-{uuid.uuid4().hex[:8]}")
        async with S3ArchiveStore(**moto_server.settings(bucket, prefix="archives/")) as store:
            yield store

    async def residue(self, store: S3ArchiveStore, sandbox_id: str) -> list[str]:
        return await anyio.to_thread.run_sync(functools.partial(_residue, store, sandbox_id))


def _residue(store: S3ArchiveStore, sandbox_id: str) -> list[str]:
    client = store._client
    prefix = store.key(sandbox_id)
    objects = client.list_objects_v2(Bucket=store.bucket, Prefix=prefix).get("Contents", [])
    uploads = client.list_multipart_uploads(Bucket=store.bucket, Prefix=prefix).get("Uploads", [])
    return [o["Key"] for o in objects] + [f"upload of {u['Key']}" for u in uploads]
