""":class:`S3ArchiveStore`: archived sandboxes as objects in an S3 bucket (AWS, MinIO, OSS, moto...).

Part ``<part>`` of sandbox ``<id>`` is the object ``<prefix>/<id>/<part>``. A put streams its data
as a multipart upload, ``part_size`` bytes a part with at most ``max_concurrency`` parts uploading
at once, so memory stays at about ``max_concurrency * part_size`` whatever the size; the
object appears only when the upload is completed, and a put that fails or is cancelled aborts
its upload (nothing visible). A stream shorter than one part is a single ``PutObject``.

boto3 is blocking: every call runs in a worker thread (``anyio.to_thread``), and is imported
only when the first call needs the client. Errors are translated once, here: a missing object
is :class:`~rock_core.errors.SandboxNotFound`; a missing bucket, refused credentials, a wrong
region or an unreachable endpoint are :class:`~rock_core.errors.InternalServerRockError`\\ s
that name the setting to fix.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable
from typing import Any, ClassVar, Optional

import anyio
import anyio.to_thread

from rock_archive_s3._part import _Part
from rock_core.archive import ArchiveStore, check_archive_address
from rock_core.converters import structure_value
from rock_core.errors import InternalServerRockError, InvalidParameter, RockError, SandboxNotFound
from rock_core.models import ByteSize, NonBlankStr, PositiveFloat, PositiveInt
from rock_core.sizes import GiB, MiB

__all__ = ["S3ArchiveStore"]

log = logging.getLogger("rock.archive.s3")

#: The plugin's table, as errors name its settings.
TABLE = "plugins.archive-s3"
#: S3's limits on multipart uploads.
MIN_PART_SIZE = 5 * MiB
MAX_PART_SIZE = 5 * GiB
MAX_PARTS = 10_000
#: How much a get reads at once.
READ_CHUNK = 1 * MiB

_CREDENTIAL_CODES = frozenset(
    {
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidToken",
        "ExpiredToken",
        "TokenRefreshRequired",
        "InvalidClientTokenId",
        "AccessDenied",
        "AllAccessDisabled",
        "403",
        "Forbidden",
    }
)
_REGION_CODES = frozenset(
    {
        "AuthorizationHeaderMalformed",
        "PermanentRedirect",
        "IllegalLocationConstraintException",
        "301",
    }
)
_MISSING_OBJECT_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


class S3ArchiveStore(ArchiveStore):
    """Archives as objects in an S3-compatible bucket.

    Every setting is a keyword argument, as the plugin's table ``[plugins.archive-s3]`` gives
    it; values may be text (``ROCK_PLUGIN_ARCHIVE_S3_PART_SIZE=16m``).

    :param bucket: the bucket archives are kept in (required; it must exist).
    :param endpoint: the S3 endpoint's URL (``http://127.0.0.1:9000`` for MinIO); default: AWS.
    :param prefix: the key prefix of every object (default ``rock-archives``, as ROCK's);
        objects are ``<prefix>/<sandbox_id>/<part>``. Empty: ``<sandbox_id>/<part>``.
    :param region: the bucket's region; default ``AWS_REGION``, ``AWS_DEFAULT_REGION``, else
        ``us-east-1``.
    :param access_key_id: with ``access_key_secret`` (and ``session_token`` for temporary
        credentials): the credentials. Default: boto3's usual chain (``AWS_ACCESS_KEY_ID`` /
        ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``, ``~/.aws``, an
        instance role).
    :param part_size: bytes per multipart part, 5 MiB to 5 GiB (default 8 MiB; an object holds
        at most 10,000 parts, so at most 78 GiB at 8 MiB).
    :param max_concurrency: parts of one put uploading at once (default 4).
    :param connect_timeout: / ``read_timeout``: seconds (defaults 10 and 60).
    :param max_attempts: attempts per request, retries of throttling and network errors
        included (default 3).
    :param addressing_style: ``auto`` (default), ``path`` or ``virtual`` bucket addressing;
        many S3-compatible servers want ``path``.
    :raises InvalidParameter: a setting is missing or invalid, naming it.
    """

    name: ClassVar[str] = "s3"

    def __init__(
        self,
        *,
        bucket: str | None = None,
        endpoint: str | None = None,
        prefix: str = "rock-archives",
        region: str | None = None,
        access_key_id: str | None = None,
        access_key_secret: str | None = None,
        session_token: str | None = None,
        part_size: int | str = 8 * MiB,
        max_concurrency: int | str = 4,
        connect_timeout: float | str = 10.0,
        read_timeout: float | str = 60.0,
        max_attempts: int | str = 3,
        addressing_style: str = "auto",
    ) -> None:
        if bucket is None:
            raise InvalidParameter(
                f"{TABLE}.bucket: required: the S3 bucket archived sandboxes are kept in",
                field=f"{TABLE}.bucket",
                value=None,
            )
        self.bucket: str = _setting(bucket, NonBlankStr, "bucket")
        self.endpoint: str | None = _setting(endpoint, Optional[NonBlankStr], "endpoint")
        if self.endpoint is not None and not re.fullmatch(r"https?://[^/\s]+/?", self.endpoint):
            raise InvalidParameter(
                f"{TABLE}.endpoint: expected a URL like http://host:port, got {self.endpoint!r}",
                field=f"{TABLE}.endpoint",
                value=self.endpoint,
            )
        self.prefix: str = _setting(prefix, str, "prefix").strip("/")
        self.region: str = (
            _setting(region, Optional[NonBlankStr], "region")
            or os.environ.get("AWS_REGION")
            or os.environ.get("AWS_DEFAULT_REGION")
            or "us-east-1"
        )
        self._access_key_id = _setting(access_key_id, Optional[NonBlankStr], "access_key_id")
        self._access_key_secret = _setting(
            access_key_secret, Optional[NonBlankStr], "access_key_secret"
        )
        self._session_token = _setting(session_token, Optional[NonBlankStr], "session_token")
        if (self._access_key_id is None) != (self._access_key_secret is None):
            given, missing = ("access_key_id", "access_key_secret")[
                :: 1 if self._access_key_id else -1
            ]
            raise InvalidParameter(
                f"{TABLE}.{missing}: required with {given} (or set neither, to use the AWS variables)",
                field=f"{TABLE}.{missing}",
                value=None,
            )
        self.part_size: int = _setting(part_size, ByteSize, "part_size")
        if not MIN_PART_SIZE <= self.part_size <= MAX_PART_SIZE:
            raise InvalidParameter(
                f"{TABLE}.part_size: S3 takes parts of 5 MiB to 5 GiB, got {self.part_size} bytes",
                field=f"{TABLE}.part_size",
                value=self.part_size,
            )
        self.max_concurrency: int = _setting(max_concurrency, PositiveInt, "max_concurrency")
        self.connect_timeout: float = _setting(connect_timeout, PositiveFloat, "connect_timeout")
        self.read_timeout: float = _setting(read_timeout, PositiveFloat, "read_timeout")
        self.max_attempts: int = _setting(max_attempts, PositiveInt, "max_attempts")
        self.addressing_style: str = _setting(addressing_style, NonBlankStr, "addressing_style")
        if self.addressing_style not in ("auto", "path", "virtual"):
            raise InvalidParameter(
                f"{TABLE}.addressing_style: expected auto, path or virtual, got {self.addressing_style!r}",
                field=f"{TABLE}.addressing_style",
                value=self.addressing_style,
            )
        self._client: Any = None
        self._client_lock = anyio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"S3ArchiveStore(bucket={self.bucket!r}, endpoint={self.endpoint!r}, prefix={self.prefix!r})"

    def key(self, sandbox_id: str, part: str | None = None) -> str:
        """The object key of a part (``<prefix>/<sandbox_id>/<part>``), or with ``part=None`` the
        prefix every object of the sandbox's archive starts with (ending in ``/``)."""
        base = f"{self.prefix}/{sandbox_id}/" if self.prefix else f"{sandbox_id}/"
        return base + (part or "")

    # -- the contract ------------------------------------------------------------------------

    async def put(self, sandbox_id: str, part: str, data: AsyncIterable[bytes]) -> None:
        check_archive_address(sandbox_id, part)
        key = self.key(sandbox_id, part)
        client = await self._get_client()
        where = (sandbox_id, part, "put")
        async with contextlib.aclosing(_parts(data, self.part_size)) as parts:
            first = await anext(parts, None)
            if first is None or first.size < self.part_size:
                # The whole stream fits in one part: one PutObject, atomic like a completed upload.
                await self._call(
                    *where, client.put_object, Bucket=self.bucket, Key=key, Body=first or b""
                )
                return
            created = await self._call(
                *where, client.create_multipart_upload, Bucket=self.bucket, Key=key
            )
            upload_id = created["UploadId"]
            try:
                held = [first]
                del first  # the upload holds it once it starts; keep no second reference
                etags = await self._upload_parts(client, key, upload_id, held, parts, where)
                await self._call(
                    *where,
                    client.complete_multipart_upload,
                    Bucket=self.bucket,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={
                        "Parts": [{"PartNumber": n, "ETag": etags[n]} for n in sorted(etags)]
                    },
                )
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self._abort(client, key, upload_id)
                raise

    async def _upload_parts(
        self,
        client: Any,
        key: str,
        upload_id: str,
        held: list[_Part],
        parts: AsyncIterator[_Part],
        where: tuple[str, str, str],
    ) -> dict[int, str]:
        """Upload the part in ``held`` and the rest of ``parts``, ``max_concurrency`` at once; the
        ETags by part number.

        The stream's own exception is raised unchanged; the first failed upload is raised as
        the rock error it became.
        """
        etags: dict[int, str] = {}
        failures: list[BaseException] = []
        stream_error: BaseException | None = None
        slots = anyio.Semaphore(self.max_concurrency)

        async def upload(number: int, body: _Part) -> None:
            try:
                answer = await self._call(
                    *where,
                    client.upload_part,
                    Bucket=self.bucket,
                    Key=key,
                    UploadId=upload_id,
                    PartNumber=number,
                    Body=body,
                )
                etags[number] = answer["ETag"]
            except Exception as exc:
                failures.append(exc)
                tg.cancel_scope.cancel()
            finally:
                slots.release()

        async with anyio.create_task_group() as tg:
            try:
                await slots.acquire()
                tg.start_soon(upload, 1, held.pop())
                number = 1
                while True:
                    # A slot first, then the next part: never more than max_concurrency parts
                    # uploading plus the one being gathered.
                    await slots.acquire()
                    body = await anext(parts, None)
                    if body is None:
                        slots.release()
                        break
                    number += 1
                    if number > MAX_PARTS:
                        raise InternalServerRockError(
                            f"archive-s3: part {where[1]!r} of sandbox {where[0]} is larger than "
                            f"{MAX_PARTS} parts of {self.part_size} bytes; raise `part_size` in [{TABLE}]",
                            sandbox_id=where[0],
                            attempted="archive put",
                        )
                    tg.start_soon(upload, number, body)
                    del body
            except Exception as exc:
                stream_error = exc
                tg.cancel_scope.cancel()
        if failures:
            raise failures[0]
        if stream_error is not None:
            raise stream_error
        return etags

    async def _abort(self, client: Any, key: str, upload_id: str) -> None:
        try:
            await anyio.to_thread.run_sync(
                functools.partial(
                    client.abort_multipart_upload, Bucket=self.bucket, Key=key, UploadId=upload_id
                )
            )
        except Exception as exc:  # already aborted by a delete, or the endpoint is gone
            if _code(exc) != "NoSuchUpload":
                log.warning(
                    "archive-s3: could not abort the upload of s3://%s/%s (%s): %s",
                    self.bucket,
                    key,
                    upload_id,
                    exc,
                )

    async def get(self, sandbox_id: str, part: str) -> AsyncIterator[bytes]:
        check_archive_address(sandbox_id, part)
        key = self.key(sandbox_id, part)
        client = await self._get_client()
        answer = await self._call(
            sandbox_id, part, "get", client.get_object, Bucket=self.bucket, Key=key
        )
        return self._read(answer["Body"], sandbox_id, part)

    async def _read(self, body: Any, sandbox_id: str, part: str) -> AsyncIterator[bytes]:
        try:
            while chunk := await self._call(sandbox_id, part, "get", body.read, READ_CHUNK):
                yield chunk
        finally:
            body.close()

    async def exists(self, sandbox_id: str, part: str) -> bool:
        check_archive_address(sandbox_id, part)
        client = await self._get_client()
        try:
            await self._call(
                sandbox_id,
                part,
                "exists",
                client.head_object,
                Bucket=self.bucket,
                Key=self.key(sandbox_id, part),
            )
        except SandboxNotFound:
            return False
        return True

    async def names(self, prefix: str) -> list[str] | None:
        client = await self._get_client()
        base = f"{self.prefix}/" if self.prefix else ""

        def listing() -> list[str]:
            found: set[str] = set()
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=base + prefix, Delimiter="/"
            )
            for page in pages:
                for common in page.get("CommonPrefixes", []):
                    found.add(common["Prefix"][len(base) :].rstrip("/"))
            return sorted(found)

        return list(await self._call(prefix, None, "list", listing))

    async def delete(self, sandbox_id: str) -> None:
        check_archive_address(sandbox_id)
        client = await self._get_client()
        prefix = self.key(sandbox_id)
        where = (sandbox_id, None, "delete")

        def listing(operation: str, field: str, **kwargs: Any) -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = []
            for page in client.get_paginator(operation).paginate(
                Bucket=self.bucket, Prefix=prefix, **kwargs
            ):
                found.extend(page.get(field, []))
            return found

        # Unfinished uploads first (a put in flight then fails), then the objects.
        for upload in await self._call(*where, listing, "list_multipart_uploads", "Uploads"):
            await self._abort(client, upload["Key"], upload["UploadId"])
        objects = await self._call(*where, listing, "list_objects_v2", "Contents")
        for start in range(0, len(objects), 1000):
            batch = [{"Key": o["Key"]} for o in objects[start : start + 1000]]
            answer = await self._call(
                *where,
                client.delete_objects,
                Bucket=self.bucket,
                Delete={"Objects": batch, "Quiet": True},
            )
            errors = [e for e in answer.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                first = errors[0]
                raise InternalServerRockError(
                    f"archive-s3: could not delete s3://{self.bucket}/{first.get('Key')} "
                    f"({first.get('Code')}: {first.get('Message')}) and {len(errors) - 1} more",
                    sandbox_id=sandbox_id,
                    attempted="archive delete",
                )

    async def aclose(self) -> None:
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            await anyio.to_thread.run_sync(client.close)

    # -- the client and its errors ----------------------------------------------------------

    def _where(self) -> str:
        return self.endpoint or f"AWS S3 ({self.region})"

    async def _get_client(self) -> Any:
        if self._closed:
            raise InternalServerRockError("archive-s3: the store is closed", attempted="archive")
        if self._client is None:
            async with self._client_lock:
                if self._client is None:
                    self._client = await anyio.to_thread.run_sync(self._make_client)
        return self._client

    def _make_client(self) -> Any:
        import boto3.session
        from botocore.config import Config

        session = boto3.session.Session(
            aws_access_key_id=self._access_key_id,
            aws_secret_access_key=self._access_key_secret,
            aws_session_token=self._session_token,
            region_name=self.region,
        )
        config = Config(
            max_pool_connections=self.max_concurrency + 4,
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
            retries={"max_attempts": self.max_attempts, "mode": "standard"},
            s3={"addressing_style": self.addressing_style},
        )
        return session.client("s3", endpoint_url=self.endpoint, config=config)

    async def _call(
        self,
        sandbox_id: str,
        part: str | None,
        attempted: str,
        call: Callable[..., Any],
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        """Run a boto3 call in a worker thread; what it raises becomes a rock error, once, here."""
        try:
            return await anyio.to_thread.run_sync(functools.partial(call, *args, **kwargs))
        except RockError:
            raise
        except Exception as exc:
            raise await self._translate(exc, sandbox_id, part, attempted) from exc

    async def _translate(
        self, exc: Exception, sandbox_id: str, part: str | None, attempted: str
    ) -> RockError:
        from botocore.exceptions import (
            ClientError,
            ConnectionClosedError,
            ConnectTimeoutError,
            EndpointConnectionError,
            NoCredentialsError,
            PartialCredentialsError,
            ReadTimeoutError,
        )

        what = (
            f"part {part!r} of sandbox {sandbox_id}"
            if part
            else f"the archive of sandbox {sandbox_id}"
        )
        context: dict[str, Any] = {"sandbox_id": sandbox_id, "attempted": f"archive {attempted}"}
        code = _code(exc)
        if isinstance(exc, ClientError):
            message = exc.response.get("Error", {}).get("Message") or code
            if code == "NoSuchBucket" or (
                code in _MISSING_OBJECT_CODES
                and attempted == "exists"
                and not await self._bucket_exists()
            ):
                return InternalServerRockError(
                    f"archive-s3: the bucket {self.bucket!r} does not exist at {self._where()}; "
                    f"create it or fix the setting `bucket` in [{TABLE}]",
                    **context,
                )
            if code in _MISSING_OBJECT_CODES and attempted in ("get", "exists"):
                return SandboxNotFound(
                    f"archive-s3: no {what} is stored (s3://{self.bucket}/{self.key(sandbox_id, part)})",
                    **context,
                )
            if code in _CREDENTIAL_CODES:
                return InternalServerRockError(
                    f"archive-s3: {self._where()} refused the credentials for bucket {self.bucket!r} "
                    f"({code}: {message}); check the credentials: `access_key_id` / `access_key_secret` "
                    f"in [{TABLE}], or AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY",
                    **context,
                )
            if code in _REGION_CODES:
                return InternalServerRockError(
                    f"archive-s3: the bucket {self.bucket!r} is not in region {self.region!r} ({code}: {message}); "
                    f"fix the setting `region` in [{TABLE}]",
                    **context,
                )
            if code == "NoSuchUpload":
                return InternalServerRockError(
                    f"archive-s3: the upload of {what} was aborted (its archive was deleted meanwhile?)",
                    **context,
                )
            return InternalServerRockError(
                f"archive-s3: cannot {attempted} {what}: {code}: {message}", **context
            )
        if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
            return InternalServerRockError(
                f"archive-s3: no credentials for {self._where()}: set `access_key_id` and `access_key_secret` "
                f"in [{TABLE}], or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY ({exc})",
                **context,
            )
        if isinstance(
            exc,
            (EndpointConnectionError, ConnectTimeoutError, ConnectionClosedError, ReadTimeoutError),
        ):
            return InternalServerRockError(
                f"archive-s3: cannot reach the endpoint {self._where()} to {attempted} {what}: {exc}; "
                f"check the setting `endpoint` in [{TABLE}]",
                **context,
            )
        return InternalServerRockError(
            f"archive-s3: cannot {attempted} {what} at {self._where()}: {type(exc).__name__}: {exc}",
            **context,
        )

    async def _bucket_exists(self) -> bool:
        try:
            await anyio.to_thread.run_sync(
                functools.partial(self._client.head_bucket, Bucket=self.bucket)
            )
        except Exception as exc:
            return _code(exc) not in ("404", "NoSuchBucket", "NotFound")
        return True


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def _setting(value: Any, kind: Any, key: str) -> Any:
    return structure_value(value, kind, path=f"{TABLE}.{key}")


async def _parts(data: AsyncIterable[bytes], size: int) -> AsyncGenerator[_Part, None]:
    """``data`` cut into parts of ``size`` bytes, the last one shorter (none for an empty stream).

    A part is the stream's own chunks (views of them where a part boundary cuts one), never a
    copy: only the part being gathered is held here.
    """
    views: list[memoryview] = []
    held = 0
    async for chunk in data:
        view = memoryview(chunk).cast("B")
        while view:
            take = min(len(view), size - held)
            views.append(view[:take])
            held += take
            view = view[take:]
            if held == size:
                part, views, held = _Part(views), [], 0
                yield part
                del part
    if held:
        yield _Part(views)
