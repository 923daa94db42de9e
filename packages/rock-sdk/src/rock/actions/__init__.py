"""ROCK's wire models under ROCK's import path: ``from rock.actions import Command, ...``.

These are the models of :mod:`rock_core.actions` (frozen ``attrs`` classes built with keyword
arguments, read by attribute), re-exported under ROCK's names: requests such as
:class:`Command`, :class:`CreateBashSessionRequest`, :class:`BashAction` (alias
:class:`Action`), :class:`ReadFileRequest`, :class:`WriteFileRequest`, :class:`UploadRequest`;
responses such as :class:`CommandResponse`, :class:`BashObservation` (alias
:class:`Observation`), :class:`SandboxStatusResponse`, :class:`IsAliveResponse`; and the envelope
:class:`RockResponse`. ROCK's submodules ``rock.actions.sandbox.request``,
``rock.actions.sandbox.response`` and ``rock.actions.response`` hold the same objects.

Differences from ROCK: the models are ``attrs`` classes, not pydantic ones, so they have no
``model_dump()``; use :func:`rock_core.converters.unstructure_wire` (or ``attrs.asdict``) to
turn one into JSON-ready data. rock's models add a few fields ROCK lacks (``CommandResponse``'s
``wall_time``/``cpu_time``/``max_rss_bytes``, ``SandboxStatusResponse``'s ``reason``/``notes``/
``queue_position``) and classes for rock's extras (``ProcessInfo``, ``ListDirResponse``,
``InterruptSessionResponse``).
"""

from rock_core.actions import *  # noqa: F403 - the point of this module is the re-export
from rock_core.actions import __all__ as _core_all
from rock_core.states import State

__all__ = [*_core_all, "State"]


def __getattr__(name: str) -> object:
    # ROCK's docs import RunMode from here although ROCK defines it in rock.sdk.sandbox.client;
    # both work in rock (imported lazily: rock.actions does not depend on the SDK otherwise).
    if name == "RunMode":
        from rock.sdk.sandbox.client import RunMode

        return RunMode
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
