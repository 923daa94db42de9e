"""ROCK's wire models: the JSON bodies of the admin API and the rocklet, with ROCK's field names.

Each class mirrors the ``rl-rock`` 1.11 model of the same name (``rock/actions/...``,
``rock/admin/proto/...``): same fields, same defaults, keyword construction and attribute reads,
so ``rock.actions`` can re-export them for ROCK users. They are frozen ``attrs`` classes; JSON
goes through :mod:`rock_core.converters` (``structure_wire`` / ``unstructure_wire``), which rejects
unknown keys and reports every bad field with its path.

Client models and their server variants
    ROCK's SDK sends the client model plus ``sandbox_id``; the admin and the rocklet read the
    server variant, which adds that (non-blank) ``sandbox_id`` and a few server-only options:
    :class:`Command` / :class:`SandboxCommand`, :class:`CreateBashSessionRequest` /
    :class:`SandboxCreateBashSessionRequest`, :class:`BashAction` / :class:`SandboxBashAction`,
    :class:`CloseBashSessionRequest` / :class:`SandboxCloseBashSessionRequest`,
    :class:`ReadFileRequest` / :class:`SandboxReadFileRequest`, :class:`WriteFileRequest` /
    :class:`SandboxWriteFileRequest`.

Sizes stay text
    ``SandboxStartRequest.memory`` and ``disk`` keep the text the client sent (``"8g"``); they are
    checked to be sizes on input, and turned into bytes when a
    :class:`~rock_core.models.SandboxSpec` is built (:func:`rock_core.converters.spec_from_start_request`).

Differences from ROCK, on purpose
    - ``SandboxStartRequest`` also accepts ``auto_clear_time`` (sent by ROCK's own SDK, ignored by
      ROCK's server) and four rock additions: ``auto_clear_seconds`` (idle timeout with second
      precision), ``env`` and ``metadata`` (ROCK only offers these through its E2B endpoint),
      and ``network`` (the sandbox's network mode).
      ``auto_clear_time_minutes`` defaults to ``None`` = "the server's configured default", which
      is what ROCK does when the field is not sent (its declared 360 only applies when sent).
    - ``SandboxStatusResponse`` adds ``reason``, ``notes``, ``queue_position`` and ``security``.
    - :class:`SandboxIdRequest` names the ``{"sandbox_id": ...}`` body of ``/stop``, ``/delete``
      and ``/restart``, which ROCK reads as an untyped dict.
    - Unknown keys are an error (ROCK's server silently drops them, e.g. the documented but
      unused ``resources``), so a misspelt field is reported instead of ignored.

Modules by job
    :mod:`~rock_core.actions.commands`, :mod:`~rock_core.actions.sessions`,
    :mod:`~rock_core.actions.files`, :mod:`~rock_core.actions.sandboxes`,
    :mod:`~rock_core.actions.envs` and :mod:`~rock_core.actions.responses` (the envelope); this
    package re-exports every model (each module's ``__all__``), so ``from rock_core.actions
    import Command`` keeps working. Each module also declares the operations of its job
    (:class:`~rock_core.actions._operation.Operation`: ``EXECUTE``, ``READ_FILE``, ...), which
    :mod:`rock_core.operations` gathers into the catalog.
"""

from __future__ import annotations

from rock_core.actions import (
    commands,
    commits,
    envs,
    files,
    responses,
    sandboxes,
    sessions,
    snapshots,
)
from rock_core.actions.commands import *  # noqa: F403 - every module's __all__ is this package's
from rock_core.actions.commits import *  # noqa: F403
from rock_core.actions.envs import *  # noqa: F403
from rock_core.actions.files import *  # noqa: F403
from rock_core.actions.responses import *  # noqa: F403
from rock_core.actions.sandboxes import *  # noqa: F403
from rock_core.actions.sessions import *  # noqa: F403
from rock_core.actions.snapshots import *  # noqa: F403

__all__: list[str] = []
__all__ += commands.__all__
__all__ += sessions.__all__
__all__ += files.__all__
__all__ += sandboxes.__all__
__all__ += envs.__all__
__all__ += responses.__all__
__all__ += snapshots.__all__
__all__ += commits.__all__
