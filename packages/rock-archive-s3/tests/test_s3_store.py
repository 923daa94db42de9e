"""What S3ArchiveStore does beyond the conformance suite, against moto's S3 server on 127.0.0.1:
where objects go, multipart uploads, credentials from the AWS variables, and an error naming the
setting to fix for a missing bucket, refused credentials and an unreachable endpoint."""

from __future__ import annotations

import socket
import uuid

import anyio
import pytest

from rock_archive_s3 import S3ArchiveStore
from rock_archive_s3.testing import MotoServer
from rock_core.errors import InternalServerRockError, SandboxNotFound
from rock_core.sizes import MiB
from rock_core.testing import GeneratedStream, read_part


@pytest.fixture(scope="module")
def bucket(moto_server: MotoServer) -> str:
    return moto_server.create_bucket(f"rock-store-{uuid.uuid4().hex[:8]}")


def run(store: S3ArchiveStore, scenario):
    async def main():
        async with store:
            return await scenario(store)

    return anyio.run(main)


async def _chunks(data: bytes):
    yield data


def test_parts_are_objects_under_prefix_sandbox_part_and_big_ones_are_multipart(
    moto_server: MotoServer, bucket: str
):
    store = S3ArchiveStore(
        **moto_server.settings(bucket, prefix="/team-a/archives/", part_size="5m")
    )

    async def scenario(store):
        await store.put("sbx-1", "rootfs", GeneratedStream(12 * MiB))
        await store.put("sbx-1", "logs", _chunks(b"log\n"))

    run(store, scenario)
    s3 = moto_server.client()
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="team-a/")["Contents"]
    assert sorted((o["Key"], o["Size"]) for o in listed) == [
        ("team-a/archives/sbx-1/logs", 4),
        ("team-a/archives/sbx-1/rootfs", 12 * MiB),
    ]
    # Three parts of 5 MiB, 5 MiB and 2 MiB: S3 marks a multipart object's ETag with "-<parts>".
    etag = s3.head_object(Bucket=bucket, Key="team-a/archives/sbx-1/rootfs")["ETag"]
    assert etag.strip('"').endswith("-3")
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_credentials_come_from_the_aws_variables_when_not_configured(
    moto_server: MotoServer, bucket: str, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", moto_server.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", moto_server.access_key_secret)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    store = S3ArchiveStore(endpoint=moto_server.endpoint, bucket=bucket)

    async def scenario(store):
        await store.put("sbx-env", "logs", _chunks(b"from the environment"))
        return await read_part(store, "sbx-env", "logs")

    assert run(store, scenario) == b"from the environment"


def test_a_missing_bucket_is_named(moto_server: MotoServer):
    store = S3ArchiveStore(**moto_server.settings("rock-no-such-bucket"))
    for operation in (
        lambda s: s.put("sbx", "logs", _chunks(b"x")),
        lambda s: s.put("sbx", "rootfs", GeneratedStream(12 * MiB)),
        lambda s: s.exists("sbx", "logs"),
        lambda s: s.get("sbx", "logs"),
        lambda s: s.delete("sbx"),
    ):
        with pytest.raises(InternalServerRockError) as info:
            run(S3ArchiveStore(**moto_server.settings("rock-no-such-bucket")), operation)
        assert not isinstance(info.value, SandboxNotFound)
        assert "bucket 'rock-no-such-bucket' does not exist" in str(info.value)
        assert "`bucket`" in str(info.value)
    assert store.bucket == "rock-no-such-bucket"


@pytest.mark.parametrize("secret_only", [False, True])
def test_refused_credentials_are_named(moto_server: MotoServer, bucket: str, secret_only: bool):
    settings = moto_server.settings(bucket, access_key_secret="wrong-secret")
    if not secret_only:
        settings["access_key_id"] = "AKIAUNKNOWNKEY000000"
    for operation in (
        lambda s: s.put("sbx", "logs", _chunks(b"x")),
        lambda s: s.exists("sbx", "logs"),
    ):
        with pytest.raises(InternalServerRockError) as info:
            run(S3ArchiveStore(**settings), operation)
        message = str(info.value)
        assert "refused the credentials" in message
        assert "`access_key_id`" in message and "AWS_ACCESS_KEY_ID" in message


def test_an_unreachable_endpoint_is_named():
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    settings = {
        "endpoint": endpoint,
        "bucket": "b",
        "access_key_id": "k",
        "access_key_secret": "s",
        "max_attempts": 1,
    }
    for operation in (
        lambda s: s.put("sbx", "logs", _chunks(b"x")),
        lambda s: s.get("sbx", "logs"),
    ):
        with pytest.raises(InternalServerRockError) as info:
            run(S3ArchiveStore(**settings), operation)
        assert f"cannot reach the endpoint {endpoint}" in str(info.value)
        assert "`endpoint`" in str(info.value)


def test_a_closed_store_says_so(moto_server: MotoServer, bucket: str):
    store = S3ArchiveStore(**moto_server.settings(bucket))

    async def main():
        await store.exists("sbx", "logs")
        await store.aclose()
        await store.aclose()  # idempotent
        await store.exists("sbx", "logs")

    with pytest.raises(InternalServerRockError, match="closed"):
        anyio.run(main)
