"""EnvHub: a registry of environment names → image and defaults, in SQLite (ROCK's ``rock.envhub``).

An entry (:class:`EnvInfo`, ROCK's field names) says which image an environment's sandboxes run
and, in ``extra_spec``, what ``rock.make(env_name)`` makes there: ``{"env_id": <GEM id>,
"kwargs": {...}}`` (both optional: the GEM id defaults to the name itself). The admin serves
ROCK's EnvHub API (:func:`routes`); ``rock envhub`` is its command line.

Where the database is: ``[plugins.gem] envhub_db``, else ``$ROCK_ENVHUB_DB_URL``
(``sqlite:///path``), else ``envhub.sqlite`` next to the engine's record store (the admin's
state folder), else ``~/.rock/rock_envs.db`` (ROCK's default).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import attrs
from rock_core.errors import BadRequestRockError, InvalidParameter

__all__ = ["DEFAULT_ENV_NAME", "EnvHub", "EnvInfo", "EnvNotRegistered", "database_path"]

#: The entry ROCK's EnvHub registers at start: the default image of env sandboxes.
DEFAULT_ENV_NAME = "EnvhubDefaultDockerImage"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS envs (
    env_name TEXT PRIMARY KEY,
    image TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT '',
    description TEXT NOT NULL DEFAULT '',
    tags TEXT NOT NULL DEFAULT '[]',
    extra_spec TEXT,
    create_at TEXT NOT NULL,
    update_at TEXT NOT NULL
)
"""


class EnvNotRegistered(BadRequestRockError):
    """No EnvHub entry has the name."""


@attrs.frozen
class EnvInfo:
    """One EnvHub entry, with ROCK's field names (``create_at``/``update_at``: ISO 8601, UTC)."""

    env_name: str
    image: str
    owner: str = ""
    description: str = ""
    tags: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    extra_spec: dict[str, Any] | None = None
    create_at: str = ""
    update_at: str = ""

    def to_json(self) -> dict[str, Any]:
        """ROCK's JSON of the entry."""
        return {
            "env_name": self.env_name,
            "image": self.image,
            "owner": self.owner,
            "description": self.description,
            "tags": list(self.tags),
            "extra_spec": self.extra_spec,
            "create_at": self.create_at,
            "update_at": self.update_at,
        }


def database_path(configured: str | None = None, store_path: str | None = None) -> Path:
    """Where EnvHub's SQLite file is (see the module's docstring)."""
    url = configured or os.environ.get("ROCK_ENVHUB_DB_URL")
    if url:
        if url.startswith("sqlite:///"):
            url = url[len("sqlite:///") :]
        elif "://" in url:
            raise InvalidParameter(f"envhub_db: only sqlite:///PATH or a file path is supported, got {url!r}", field="envhub_db", value=url)
        return Path(os.path.expanduser(url))
    if store_path:
        return Path(store_path).expanduser().parent / "envhub.sqlite"
    return Path.home() / ".rock" / "rock_envs.db"


def _text(name: str, value: Any, *, blank: bool = True) -> str:
    if not isinstance(value, str) or (not blank and not value.strip()):
        raise InvalidParameter(f"{name}: expected a {'' if blank else 'non-blank '}string, got {value!r}", field=name, value=value)
    return value if blank else value.strip()


class EnvHub:
    """The registry in one SQLite file; safe to use from several threads and processes.

    :param path: the database file (made with its folder when missing).
    :param default_image: the image of the :data:`DEFAULT_ENV_NAME` entry, written at open
        (``None``: not written).
    """

    def __init__(self, path: str | os.PathLike[str], *, default_image: str | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        with self._lock, self._db:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(_SCHEMA)
        if default_image:
            self.register(
                DEFAULT_ENV_NAME, default_image, owner="ENVHUB", description="the default image of env sandboxes",
                tags=["default", "system", "envhub"],
            )

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    @staticmethod
    def _row(row: tuple[Any, ...]) -> EnvInfo:
        name, image, owner, description, tags, extra, created, updated = row
        return EnvInfo(name, image, owner, description, json.loads(tags), json.loads(extra) if extra else None, created, updated)

    def register(
        self,
        env_name: str,
        image: str,
        *,
        owner: str = "",
        description: str = "",
        tags: Iterable[str] | None = None,
        extra_spec: Mapping[str, Any] | None = None,
    ) -> EnvInfo:
        """Add ``env_name`` or replace its fields (its ``create_at`` stays)."""
        env_name = _text("env_name", env_name, blank=False)
        image = _text("image", image, blank=False)
        _text("owner", owner)
        _text("description", description)
        tag_list = list(tags or [])
        if not all(isinstance(t, str) for t in tag_list):
            raise InvalidParameter(f"tags: expected a list of strings, got {tag_list!r}", field="tags", value=tag_list)
        if extra_spec is not None and not isinstance(extra_spec, Mapping):
            raise InvalidParameter(f"extra_spec: expected an object or null, got {extra_spec!r}", field="extra_spec", value=extra_spec)
        now = datetime.now(timezone.utc).isoformat()
        extra = json.dumps(dict(extra_spec)) if extra_spec is not None else None
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO envs VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(env_name) DO UPDATE SET "
                "image=excluded.image, owner=excluded.owner, description=excluded.description, tags=excluded.tags, "
                "extra_spec=excluded.extra_spec, update_at=excluded.update_at",
                (env_name, image, owner, description, json.dumps(tag_list), extra, now, now),
            )
        return self.get(env_name)

    def find(self, env_name: str) -> EnvInfo | None:
        """The entry of ``env_name``, or ``None``."""
        with self._lock:
            row = self._db.execute("SELECT * FROM envs WHERE env_name = ?", (env_name,)).fetchone()
        return None if row is None else self._row(row)

    def get(self, env_name: str) -> EnvInfo:
        """The entry of ``env_name``.

        :raises EnvNotRegistered: no entry has that name (named in the message).
        """
        info = self.find(env_name)
        if info is None:
            raise EnvNotRegistered(f"env {env_name!r} is not registered in EnvHub")
        return info

    def list(self, owner: str | None = None, tags: Iterable[str] | None = None) -> list[EnvInfo]:
        """Entries of ``owner`` (when given) that have any of ``tags`` (when given), by name."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM envs ORDER BY env_name").fetchall()
        wanted = set(tags or [])
        out = []
        for info in map(self._row, rows):
            if owner is not None and info.owner != owner:
                continue
            if wanted and not wanted.intersection(info.tags):
                continue
            out.append(info)
        return out

    def delete(self, env_name: str) -> bool:
        """Remove ``env_name``; ``False`` when it was not registered."""
        with self._lock, self._db:
            cursor = self._db.execute("DELETE FROM envs WHERE env_name = ?", (env_name,))
        return cursor.rowcount > 0


# -- where an engine's EnvHub is -----------------------------------------------------------------

#: The ``[plugins.gem]`` table, as ``rock_configure`` handed it to this plugin.
configured: dict[str, Any] = {}
_HUBS: dict[int, tuple[Any, EnvHub]] = {}
_HUBS_LOCK = threading.Lock()


def envhub_for(engine: Any, *, create: bool = True) -> EnvHub | None:
    """The EnvHub of ``engine`` (one per engine and database file); ``None`` when ``create`` is
    false and the database does not exist yet."""
    store = getattr(getattr(engine, "config", None), "store_path", None)
    path = database_path(configured.get("envhub_db"), store)
    with _HUBS_LOCK:
        held = _HUBS.get(id(engine))
        if held is not None and held[0] is engine and held[1].path == path:
            return held[1]
        if not create and not path.exists():
            return None
        from rock_gem.provider import default_image

        hub = EnvHub(path, default_image=default_image(configured.get("image")))
        _HUBS[id(engine)] = (engine, hub)
        return hub


# -- ROCK's EnvHub API on the admin --------------------------------------------------------------


def routes() -> list[Any]:
    """``POST /env/{register,get,list,delete}`` and ``GET /health``, as ROCK's EnvHub server
    answers them: the entry's JSON, ``{"envs": [...]}``, ``true``; an unknown name is HTTP 404
    ``{"detail"}``, a malformed field HTTP 422 ``{"detail"}`` naming it, anything else HTTP 500."""
    from rock_core.routes import AdminRoute, RouteRequest, RouteResponse

    def body_of(request: RouteRequest) -> dict[str, Any]:
        body = request.json()
        if not isinstance(body, dict):
            raise InvalidParameter(f"body: expected an object, got {type(body).__name__}", field="body")
        return body

    def handler(call: Any) -> Any:
        async def run(request: RouteRequest) -> Any:
            try:
                hub = envhub_for(request.engine)
                assert hub is not None
                return call(hub, body_of(request) if request.method == "POST" else {})
            except EnvNotRegistered as exc:
                return RouteResponse({"detail": exc.message}, status=404)
            except InvalidParameter as exc:
                return RouteResponse({"detail": exc.message}, status=422)
            except Exception as exc:  # noqa: BLE001 - ROCK's EnvHub answers 500 {detail}
                return RouteResponse({"detail": f"{type(exc).__name__}: {exc}"}, status=500)

        return run

    def register(hub: EnvHub, body: dict[str, Any]) -> Any:
        for name in ("env_name", "image"):
            if name not in body:
                raise InvalidParameter(f"{name}: field required", field=name)
        return hub.register(
            body["env_name"], body["image"], owner=body.get("owner") or "", description=body.get("description") or "",
            tags=body.get("tags") or [], extra_spec=body.get("extra_spec"),
        ).to_json()

    def name_of(body: dict[str, Any]) -> str:
        if "env_name" not in body:
            raise InvalidParameter("env_name: field required", field="env_name")
        return _text("env_name", body["env_name"], blank=False)

    def get(hub: EnvHub, body: dict[str, Any]) -> Any:
        return hub.get(name_of(body)).to_json()

    def list_envs(hub: EnvHub, body: dict[str, Any]) -> Any:
        owner = body.get("owner")
        tags = body.get("tags")
        if owner is not None:
            _text("owner", owner)
        if tags is not None and (not isinstance(tags, list) or not all(isinstance(t, str) for t in tags)):
            raise InvalidParameter(f"tags: expected a list of strings or null, got {tags!r}", field="tags", value=tags)
        return {"envs": [info.to_json() for info in hub.list(owner, tags)]}

    def delete(hub: EnvHub, body: dict[str, Any]) -> Any:
        name = name_of(body)
        if not hub.delete(name):
            raise EnvNotRegistered(f"Environment {name} not found or already deleted")
        return True

    return [
        AdminRoute("POST", "/env/register", handler(register), summary="Register or update an EnvHub env (ROCK)"),
        AdminRoute("POST", "/env/get", handler(get), summary="An EnvHub env by name (ROCK)"),
        AdminRoute("POST", "/env/list", handler(list_envs), summary="EnvHub envs by owner and tags (ROCK)"),
        AdminRoute("POST", "/env/delete", handler(delete), summary="Delete an EnvHub env (ROCK)"),
        AdminRoute("GET", "/health", lambda request: _health(), summary="EnvHub's health (ROCK)"),
    ]


async def _health() -> Any:
    return {"status": "ok"}
