"""EnvHub's client models, as ROCK's ``rock.sdk.envhub.schema``."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EnvHubClientConfig", "RockEnvInfo"]


def _default_base_url() -> str:
    return os.environ.get("ROCK_ENVHUB_BASE_URL") or "http://localhost:8081"


@dataclass
class EnvHubClientConfig:
    """Where EnvHub is: ``base_url`` (default ``$ROCK_ENVHUB_BASE_URL``, else ROCK's
    ``http://localhost:8081``); rock's admin serves EnvHub on its own address."""

    base_url: str = field(default_factory=_default_base_url)


@dataclass
class RockEnvInfo:
    """One EnvHub entry (ROCK's field names)."""

    env_name: str
    image: str
    owner: str = ""
    create_at: str = ""
    update_at: str = ""
    description: str = ""
    tags: list[str] = field(default_factory=list)
    extra_spec: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The entry as JSON."""
        return {
            "env_name": self.env_name,
            "image": self.image,
            "owner": self.owner,
            "create_at": self.create_at,
            "update_at": self.update_at,
            "description": self.description,
            "tags": list(self.tags),
            "extra_spec": self.extra_spec,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RockEnvInfo:
        """The entry of a server's JSON (unknown keys are ignored)."""
        known = {
            k: data[k]
            for k in (
                "env_name",
                "image",
                "owner",
                "create_at",
                "update_at",
                "description",
                "tags",
                "extra_spec",
            )
            if k in data
        }
        for key in ("create_at", "update_at", "owner", "description"):
            if known.get(key) is None:
                known[key] = ""
        known["tags"] = list(known.get("tags") or [])
        return cls(**known)
