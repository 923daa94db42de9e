"""EnvHub, as ROCK's ``rock.sdk.envhub``: :class:`EnvHubClient` (``.client``) and its models
(``.schema``). rock's admin serves ROCK's EnvHub API (with rock-gem installed)."""

from __future__ import annotations

from rock.sdk.envhub.client import EnvHubClient, EnvHubError
from rock.sdk.envhub.schema import EnvHubClientConfig, RockEnvInfo

__all__ = ["EnvHubClient", "EnvHubClientConfig", "EnvHubError", "RockEnvInfo"]
