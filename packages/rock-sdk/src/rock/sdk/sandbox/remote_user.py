"""Users inside a sandbox (ROCK's ``rock.sdk.sandbox.remote_user``).

Create a user, then open a session that runs as that user::

    await sandbox.remote_user.create_remote_user("agent")
    await sandbox.create_session(CreateBashSessionRequest(session="s", remote_user="agent"))
"""

from __future__ import annotations

import abc
import logging
from typing import Any

from rock_core.actions import Command

__all__ = ["RemoteUser", "LinuxRemoteUser"]

log = logging.getLogger(__name__)


class RemoteUser(abc.ABC):
    """Creates and checks users inside ``sandbox`` (a :class:`~rock.sdk.sandbox.client.Sandbox`)."""

    current_user: str = "root"

    def __init__(self, sandbox: Any = None) -> None:
        self.sandbox = sandbox

    @abc.abstractmethod
    async def create_remote_user(self, user_name: str) -> bool:
        """Create ``user_name`` unless it exists; whether it exists afterwards."""

    @abc.abstractmethod
    async def is_user_exist(self, user_name: str) -> bool:
        """Whether ``user_name`` exists in the sandbox."""


class LinuxRemoteUser(RemoteUser):
    """Users of a Linux sandbox: ``id`` to check, ``useradd -m -s /bin/bash`` to create."""

    async def create_remote_user(self, user_name: str) -> bool:
        """Create ``user_name`` with a home directory and bash as its shell (existing: no-op).

        Returns ``False`` (and logs ``useradd``'s complaint) when it could not be created.
        """
        if await self.is_user_exist(user_name):
            return True
        result = await self.sandbox.execute(
            Command(command=["useradd", "-m", "-s", "/bin/bash", user_name])
        )
        if result.exit_code != 0:
            log.warning(
                "useradd %s failed with exit code %s: %s",
                user_name,
                result.exit_code,
                result.stderr.strip(),
            )
            return False
        return True

    async def is_user_exist(self, user_name: str) -> bool:
        """Whether ``id user_name`` succeeds in the sandbox."""
        result = await self.sandbox.execute(Command(command=["id", user_name]))
        return result.exit_code == 0
