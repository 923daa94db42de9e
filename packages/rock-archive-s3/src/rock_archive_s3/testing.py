"""A real S3 HTTP server on 127.0.0.1 for tests: moto's server, in a subprocess.

:class:`MotoServer` starts ``python -m moto.server`` on a free port of 127.0.0.1, creates an IAM
user whose access key may do anything on S3, and then switches moto's authentication on: from
then on only that key (:attr:`MotoServer.access_key_id`, :attr:`MotoServer.access_key_secret`)
is accepted, so wrong credentials are refused as by a real S3. Needs ``moto[server]``
(``pip install rock-archive-s3[testing]``)::

    with MotoServer() as s3:
        s3.create_bucket("rock-test")
        store = S3ArchiveStore(**s3.settings("rock-test"))

The server keeps objects in its own memory (a 1 GiB object costs it a few GiB while its
multipart upload completes), never in the test process's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from types import TracebackType
from typing import Any

from rock_core.ports import listen_port

__all__ = ["MotoServer"]

_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
}


class MotoServer:
    """moto's S3 server in a subprocess on 127.0.0.1, with IAM authentication on.

    :param startup_timeout: seconds to wait for the server to answer.
    """

    region = "us-east-1"

    def __init__(self, *, startup_timeout: float = 60.0) -> None:
        self.startup_timeout = startup_timeout
        self.port = 0
        self.access_key_id = ""
        self.access_key_secret = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MotoServer:
        """Start the server and set up its credentials; idempotent."""
        if self._process is not None:
            return self
        for attempt in range(3):  # the free port may be taken before moto binds it
            self.port = listen_port()
            self._log = tempfile.TemporaryFile()
            self._process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=self._log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # Objects stay in moto's memory, not on this machine's disk (each part and each
                # completed object would otherwise be written to a temporary file).
                env={**os.environ, "MOTO_S3_DEFAULT_KEY_BUFFER_SIZE": str(64 * 1024**3)},
            )
            if self._wait_ready():
                break
            output = self.output()
            self.stop()
            if attempt == 2:
                raise RuntimeError(f"moto's S3 server did not start on 127.0.0.1: {output}")
        self._set_up_credentials()
        return self

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2):
                    return True
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
        return False

    def _set_up_credentials(self) -> None:
        iam = self.client("iam", access_key_id="setup", access_key_secret="setup")
        iam.create_user(UserName="rock")
        iam.put_user_policy(UserName="rock", PolicyName="s3", PolicyDocument=json.dumps(_POLICY))
        key = iam.create_access_key(UserName="rock")["AccessKey"]
        self.access_key_id, self.access_key_secret = key["AccessKeyId"], key["SecretAccessKey"]
        # From now on every request is authenticated (0 more unauthenticated actions).
        request = urllib.request.Request(
            f"{self.endpoint}/moto-api/reset-auth",
            data=b"0",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=10):
            pass

    def client(
        self,
        service: str = "s3",
        *,
        access_key_id: str | None = None,
        access_key_secret: str | None = None,
    ) -> Any:
        """A boto3 client of this server, with its credentials unless others are given."""
        import boto3.session

        session = boto3.session.Session(
            aws_access_key_id=access_key_id or self.access_key_id,
            aws_secret_access_key=access_key_secret or self.access_key_secret,
            region_name=self.region,
        )
        return session.client(service, endpoint_url=self.endpoint)

    def create_bucket(self, name: str) -> str:
        """Create the bucket ``name`` (S3's rules: 3-63 lower-case letters, digits, ``-``)."""
        self.client().create_bucket(Bucket=name)
        return name

    def settings(self, bucket: str, **extra: Any) -> dict[str, Any]:
        """The ``[plugins.archive-s3]`` table of an :class:`~rock_archive_s3.S3ArchiveStore` on
        this server: endpoint, bucket, region and credentials, plus ``extra``."""
        return {
            "endpoint": self.endpoint,
            "bucket": bucket,
            "region": self.region,
            "access_key_id": self.access_key_id,
            "access_key_secret": self.access_key_secret,
            **extra,
        }

    def output(self) -> str:
        """What the server printed (its request log), for a failing test's message."""
        if self._log is None:
            return ""
        self._log.seek(0)
        text: str = self._log.read().decode(errors="replace")
        return text[-4000:]

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s); idempotent."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
