"""ROCK's ``rock.actions.response``: the admin API's envelope."""

from rock_core.actions import ResponseStatus, RockResponse

__all__ = ["ResponseStatus", "RockResponse"]
