"""What every part of :class:`~rock.sdk.sandbox.client.Sandbox` stands on: the sandbox's identity
(id, host, cluster, URL), ROCK's request headers, the driver it runs through, and one call to it.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, TypeVar

from rock.sdk._drivers.base import Driver
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.actions import Command, CommandResponse
from rock_core.errors import BadRequestRockError
from rock_core.operations import Operation

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class SandboxHandle:
    """The identity and driver of a :class:`~rock.sdk.sandbox.client.Sandbox` (its base class).

    :class:`~rock.sdk.sandbox.client.Sandbox`'s ``__init__`` sets the fields declared here.
    """

    config: SandboxConfig
    _driver: Driver | None
    _sandbox_id: str | None
    _host_name: str | None
    _host_ip: str | None
    _cluster: str | None
    _url: str | None

    if TYPE_CHECKING:  # defined by Sandbox; used by the files' and services' mixins

        async def execute(self, command: Command, *, check: bool = False) -> CommandResponse: ...

    # -- identity ------------------------------------------------------------------------------

    @property
    def sandbox_id(self) -> str | None:
        """The sandbox's id once started or attached (also its container's name), else ``None``."""
        return self._sandbox_id

    @property
    def host_name(self) -> str | None:
        """The name of the host the sandbox runs on."""
        return self._host_name

    @property
    def host_ip(self) -> str | None:
        """The address of the host the sandbox runs on (``127.0.0.1`` in embedded mode)."""
        return self._host_ip

    @property
    def cluster(self) -> str | None:
        """The cluster label of the sandbox (``config.cluster``)."""
        return self._cluster

    @property
    def url(self) -> str | None:
        """The sandbox API's root on the admin server; ``None`` in embedded mode (no server)."""
        return self._url

    @url.setter
    def url(self, value: str | None) -> None:
        self._url = value

    def __str__(self) -> str:
        return (
            f"Sandbox(sandbox_id={self._sandbox_id}, host_name={self._host_name!r}, host_ip={self._host_ip}, "
            f"image={self.config.image}, cluster={self._cluster})"
        )

    def __repr__(self) -> str:
        return f"Sandbox(config={self.config!r}, sandbox_id={self._sandbox_id!r})"

    def _build_headers(self) -> dict[str, str]:
        """ROCK's request headers for a server: cluster, identity, extra headers, authorization."""
        cfg = self.config
        headers = {"X-Cluster": self._cluster or ""}
        if cfg.xrl_authorization and "XRL-Authorization" not in cfg.extra_headers:
            warnings.warn(
                "xrl_authorization is deprecated; put the header in extra_headers instead",
                DeprecationWarning,
                stacklevel=2,
            )
            headers["XRL-Authorization"] = f"Bearer {cfg.xrl_authorization}"
        headers.update(cfg.extra_headers)
        for name, value in (
            ("X-User-Id", cfg.user_id),
            ("X-Experiment-Id", cfg.experiment_id),
            ("X-Namespace", cfg.namespace),
        ):
            if value:
                headers[name] = value
        return headers

    def _get_driver(self) -> Driver:
        # With a base_url the sandbox lives on an admin server (remote mode); the driver is
        # shared by handles with the same server and headers, so they share connection pools.
        if self._driver is None:
            # Imported here: a remote trainer never loads the embedded engine (rock-core's).
            if self.config.base_url:
                from rock.sdk._drivers.remote import get_remote_driver

                self._driver = get_remote_driver(self.config.base_url, self._build_headers())
            else:
                from rock.sdk._drivers.embedded_default import get_embedded_driver

                self._driver = get_embedded_driver()
        return self._driver

    async def _call(self, op: Operation[Req, Resp], request: Req) -> Resp:
        """``op`` (an operation of kind ``call`` of :mod:`rock_core.operations`) on this sandbox."""
        return await self._get_driver().call(self._require_id(op.name), op, request)

    def _require_id(self, attempted: str) -> str:
        if not self._sandbox_id:
            raise BadRequestRockError(
                f"{attempted}: this Sandbox has no sandbox yet; call `await sandbox.start()` "
                "(or `await sandbox.attach(sandbox_id)`) first",
                attempted=attempted,
            )
        return self._sandbox_id
