"""EnvHub's client, as ROCK's ``rock.sdk.envhub.client.EnvHubClient``: works against rock's admin
(which serves ROCK's EnvHub API) and against ROCK's EnvHub server."""

from __future__ import annotations

import os
from typing import Any

import httpx

from rock.sdk.envhub.schema import EnvHubClientConfig, RockEnvInfo

__all__ = ["EnvHubClient", "EnvHubError"]


class EnvHubError(Exception):
    """An EnvHub call failed; the message names the env and the server's reason."""


class EnvHubClient:
    """Async calls to EnvHub at ``config.base_url``.

    An admin with API keys needs one: ``$ROCK_API_KEY`` is sent as ``X-API-Key``.
    """

    def __init__(self, config: EnvHubClientConfig | None = None) -> None:
        self.config = config or EnvHubClientConfig()
        self.base_url = self.config.base_url.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        key = os.environ.get("ROCK_API_KEY")
        if key:
            self.headers["X-API-Key"] = key

    async def _request(self, method: str, path: str, body: dict[str, Any] | None, what: str) -> Any:
        try:
            async with httpx.AsyncClient(timeout=60, trust_env=False) as http:
                response = await http.request(
                    method, self.base_url + path, json=body, headers=self.headers
                )
        except httpx.HTTPError as exc:
            raise EnvHubError(
                f"Failed to {what}: EnvHub at {self.base_url} is unreachable: {exc!r}"
            ) from exc
        try:
            answer = response.json()
        except ValueError:
            answer = response.text
        if response.status_code != 200:
            detail = answer.get("detail", answer) if isinstance(answer, dict) else answer
            raise EnvHubError(f"Failed to {what}: HTTP {response.status_code}: {detail}")
        return answer

    async def register(
        self,
        env_name: str,
        image: str,
        owner: str = "",
        description: str = "",
        tags: list[str] | None = None,
        extra_spec: dict[str, Any] | None = None,
    ) -> RockEnvInfo:
        """Register ``env_name`` with ``image`` (or update it)."""
        body = {
            "env_name": env_name,
            "image": image,
            "owner": owner,
            "description": description,
            "tags": tags or [],
            "extra_spec": extra_spec,
        }
        return RockEnvInfo.from_dict(
            await self._request("POST", "/env/register", body, f"register environment {env_name}")
        )

    async def get_env(self, env_name: str) -> RockEnvInfo:
        """The entry of ``env_name``."""
        return RockEnvInfo.from_dict(
            await self._request(
                "POST", "/env/get", {"env_name": env_name}, f"get environment {env_name}"
            )
        )

    async def list_envs(
        self, owner: str | None = None, tags: list[str] | None = None
    ) -> list[RockEnvInfo]:
        """Entries of ``owner`` with any of ``tags`` (each filter only when given)."""
        answer = await self._request(
            "POST", "/env/list", {"owner": owner, "tags": tags}, "list environments"
        )
        return [RockEnvInfo.from_dict(item) for item in answer.get("envs", [])]

    async def delete_env(self, env_name: str) -> bool:
        """Delete ``env_name``; ``False`` when it was not registered."""
        try:
            return bool(
                await self._request(
                    "POST", "/env/delete", {"env_name": env_name}, f"delete environment {env_name}"
                )
            )
        except EnvHubError as exc:
            if "HTTP 404" in str(exc):
                return False
            raise

    async def health_check(self) -> dict[str, str]:
        """``{"status": "ok"}``."""
        return dict(await self._request("GET", "/health", None, "health check"))
