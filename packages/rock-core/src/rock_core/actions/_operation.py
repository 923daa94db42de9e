"""What declares one operation on a sandbox: :class:`Operation`.

Each operation is declared once, next to its request and response models (in the module of
its job: :mod:`~rock_core.actions.commands`, :mod:`~rock_core.actions.sessions`,
:mod:`~rock_core.actions.files`, ...); :mod:`rock_core.operations` gathers them into the
catalog that the surfaces follow.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import attrs

from rock_core.models import NonBlankStr, constrained

__all__ = ["Operation", "KINDS"]

Req = TypeVar("Req")
Resp = TypeVar("Resp")

#: How an operation travels: ``call`` (a JSON body, a JSON answer: every surface serves it
#: through one generic path) or one of the forms with hand-written surfaces: ``ndjson`` (a
#: stream of events), ``bytes`` (raw bytes), ``multipart`` (an uploaded file), ``custom``
#: (path parts, query parameters, or a body of its own on the way to the rocklet).
KINDS = ("call", "ndjson", "bytes", "multipart", "custom")


def _route(text: str) -> tuple[str, str]:
    method, _, path = text.partition(" ")
    if method not in ("GET", "POST") or not path.startswith("/"):
        raise ValueError(f"a route is 'GET /path' or 'POST /path', got {text!r}")
    return method, path


def _with_sandbox_id(request: type) -> type:
    """``request`` plus a required, non-blank ``sandbox_id``: the admin's body when the
    declaration names none (``StatRequest`` -> ``SandboxStatRequest``)."""
    cls = attrs.make_class(
        "Sandbox" + request.__name__,
        {"sandbox_id": constrained(NonBlankStr, type=NonBlankStr)},
        bases=(request,),
        kw_only=True,
        frozen=True,
    )
    cls.__module__ = request.__module__
    cls.__doc__ = f":class:`{request.__name__}` with ``sandbox_id`` (the admin's body)."
    return cls


@attrs.frozen(kw_only=True, eq=False)
class Operation(Generic[Req, Resp]):
    """One operation on a sandbox, declared once.

    :param name: the operation's name: the ``attempted`` of its errors, the admin route's name,
        and the :class:`~rock.sdk.sandbox.client.Sandbox` method unless ``method`` says another.
    :param request: the model a client passes (``Command``, ``ReadFileRequest``).
    :param response: the model of the answer.
    :param rocklet: the rocklet's route, ``"POST /read_file"``.
    :param admin: the admin's route under its sandbox prefix (``/apis/envs/sandbox/v1``).
    :param admin_body: the model the admin reads: ROCK's server variant (``SandboxCommand``),
        sent on to the rocklet whole as ROCK does; ``None``: for a ``call``, ``request`` plus
        ``sandbox_id`` (:attr:`body`), of which the rocklet gets the ``request``'s fields; for
        the other kinds, the admin's handler reads its own input.
    :param failure: the envelope's ``message`` when the admin's call fails (ROCK's words).
    :param summary: one line for the admin's OpenAPI document.
    :param activity: whether a call counts as the sandbox's activity (its idle timer restarts,
        and it is never idle-stopped under it). Reads of its status do not; calls into the
        sandbox (commands, sessions, files) do.
    :param runs_for: the request's field giving the seconds the call may run (a command's
        ``timeout``): the HTTP calls wait that long plus a margin.
    :param kind: one of :data:`KINDS`.
    :param method: the ``Sandbox`` method, when it is not ``name`` (``interrupt``).
    """

    name: str
    request: type[Req]
    response: type[Resp]
    rocklet: str
    admin: str
    failure: str
    summary: str
    description: str = ""
    admin_body: type | None = None
    activity: bool = True
    runs_for: str | None = None
    kind: str = attrs.field(default="call", validator=attrs.validators.in_(KINDS))
    method: str | None = None
    # Worked out once here, so no call pays for it.
    rocklet_method: str = attrs.field(init=False)
    rocklet_path: str = attrs.field(init=False)
    admin_method: str = attrs.field(init=False)
    admin_path: str = attrs.field(init=False)
    body: type | None = attrs.field(init=False)
    sandbox_method: str = attrs.field(init=False)
    _forward_whole: bool = attrs.field(init=False)
    _request_fields: tuple[str, ...] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        rocklet_method, rocklet_path = _route(self.rocklet)
        admin_method, admin_path = _route(self.admin)
        body = self.admin_body or (_with_sandbox_id(self.request) if self.kind == "call" else None)
        fields = (
            tuple(f.name for f in attrs.fields(self.request)) if attrs.has(self.request) else ()
        )
        for name, value in (
            ("rocklet_method", rocklet_method),
            ("rocklet_path", rocklet_path),
            ("admin_method", admin_method),
            ("admin_path", admin_path),
            ("body", body),
            ("sandbox_method", self.method or self.name),
            ("_forward_whole", self.admin_body is not None),
            ("_request_fields", fields),
        ):
            object.__setattr__(self, name, value)

    @property
    def generic(self) -> bool:
        """Whether every surface serves it through its one generic path (kind ``call``)."""
        return self.kind == "call"

    def forward(self, body: Any) -> Req:
        """What the admin sends the rocklet for ``body`` (a :attr:`body`): ROCK's server
        variant whole, else the ``request`` made of its fields (``sandbox_id`` left out)."""
        if self._forward_whole:
            return body  # type: ignore[no-any-return]
        return self.request(**{name: getattr(body, name) for name in self._request_fields})

    def seconds(self, request: Any) -> float | None | str:
        """How long the call may run: the request's :attr:`runs_for` field (``None``: no
        limit), or ``"default"`` when the operation runs no command."""
        if self.runs_for is None:
            return "default"
        value = getattr(request, self.runs_for)
        return None if value is None else float(value)

    def __repr__(self) -> str:
        return f"<Operation {self.name}: rocklet {self.rocklet}, admin {self.admin}>"
