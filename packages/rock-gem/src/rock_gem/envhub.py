"""EnvHub: a registry of environment names → image and defaults, in SQLite (ROCK's ``rock.envhub``).

An entry (:class:`EnvInfo`, ROCK's field names) says which image an environment's sandboxes run
and, in ``extra_spec``, what ``rock.make(env_name)`` makes there: ``{"env_id": <GEM id>,
"kwargs": {...}}`` (both optional: the GEM id defaults to the name itself). The admin serves
ROCK's EnvHub API (:func:`routes`); ``rock envhub`` is its command line.

Entries live in namespaces, as everything a tenant names does (rock's addition to ROCK's shared
registry). An admin's tenant (its API key) registers, gets, deletes and ``rock.make``s names of
its own namespace; the operator's namespace (``tenant`` ``None``: an operator key, an admin
without keys, the embedded engine, the local command line) is shared: every tenant sees its
entries, and a tenant's own entry of the same name wins for that tenant only. So a tenant's
entry never reroutes another tenant's name or GEM id; only the operator's entries are seen by
all, and only an operator key changes them (or, naming ``tenant``, any tenant's). Entries of a
database written before namespaces are the operator's.

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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs

from rock_core.errors import BadRequestRockError, InvalidParameter
from rock_gem.options import GemOptions

__all__ = [
    "DEFAULT_ENV_NAME",
    "EnvHub",
    "EnvInfo",
    "EnvNotRegistered",
    "EnvNotYours",
    "database_path",
    "namespace_of",
]

#: The entry ROCK's EnvHub registers at start: the default image of env sandboxes.
DEFAULT_ENV_NAME = "EnvhubDefaultDockerImage"

#: The operator's namespace in the ``tenant`` column (a tenant's name is never blank).
_SHARED = ""
_COLUMNS = "tenant, env_name, image, owner, description, tags, extra_spec, create_at, update_at"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS envs (
    tenant TEXT NOT NULL DEFAULT '',
    env_name TEXT NOT NULL,
    image TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT '',
    description TEXT NOT NULL DEFAULT '',
    tags TEXT NOT NULL DEFAULT '[]',
    extra_spec TEXT,
    create_at TEXT NOT NULL,
    update_at TEXT NOT NULL,
    PRIMARY KEY (tenant, env_name)
)
"""


class EnvNotRegistered(BadRequestRockError):
    """No EnvHub entry has the name."""


class EnvNotYours(BadRequestRockError):
    """The entry is the operator's (or another tenant's): the caller may not change it."""


@attrs.frozen
class EnvInfo:
    """One EnvHub entry, with ROCK's field names (``create_at``/``update_at``: ISO 8601, UTC),
    and rock's ``tenant``: whose namespace holds it (``None``: the operator's, shared)."""

    env_name: str
    image: str
    owner: str = ""
    description: str = ""
    tags: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    extra_spec: dict[str, Any] | None = None
    create_at: str = ""
    update_at: str = ""
    tenant: str | None = None

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
            "tenant": self.tenant,
        }


def database_path(configured: str | None = None, store_path: str | None = None) -> Path:
    """Where EnvHub's SQLite file is (see the module's docstring)."""
    url = configured or os.environ.get("ROCK_ENVHUB_DB_URL")
    if url:
        if url.startswith("sqlite:///"):
            url = url[len("sqlite:///") :]
        elif "://" in url:
            raise InvalidParameter(
                f"envhub_db: only sqlite:///PATH or a file path is supported, got {url!r}",
                field="envhub_db",
                value=url,
            )
        return Path(os.path.expanduser(url))
    if store_path:
        return Path(store_path).expanduser().parent / "envhub.sqlite"
    return Path.home() / ".rock" / "rock_envs.db"


def _text(name: str, value: Any, *, blank: bool = True) -> str:
    if not isinstance(value, str) or (not blank and not value.strip()):
        raise InvalidParameter(
            f"{name}: expected a {'' if blank else 'non-blank '}string, got {value!r}",
            field=name,
            value=value,
        )
    return value if blank else value.strip()


class EnvHub:
    """The registry in one SQLite file; safe to use from several threads and processes.

    Every method takes the ``tenant`` whose namespace it acts in (``None``: the operator's,
    shared by all); it trusts its caller: the admin's routes decide which namespace a request
    may name.

    :param path: the database file (made with its folder when missing).
    :param default_image: the image of the :data:`DEFAULT_ENV_NAME` entry (the operator's),
        written at open (``None``: not written).
    """

    def __init__(self, path: str | os.PathLike[str], *, default_image: str | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._migrate()
        if default_image:
            self.register(
                DEFAULT_ENV_NAME,
                default_image,
                owner="ENVHUB",
                description="the default image of env sandboxes",
                tags=["default", "system", "envhub"],
            )

    def _migrate(self) -> None:
        """Make the table; one of a database written before namespaces (no ``tenant`` column)
        becomes the operator's entries. In one transaction that other processes wait for."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            columns = {row[1] for row in db.execute("PRAGMA table_info(envs)")}
            if columns and "tenant" not in columns:
                db.execute("ALTER TABLE envs RENAME TO envs_before_tenants")
                db.execute(_SCHEMA)
                db.execute(
                    f"INSERT INTO envs ({_COLUMNS}) SELECT '', env_name, image, owner, description, tags, extra_spec, "
                    "create_at, update_at FROM envs_before_tenants"
                )
                db.execute("DROP TABLE envs_before_tenants")
            else:
                db.execute(_SCHEMA)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    @staticmethod
    def _row(row: tuple[Any, ...]) -> EnvInfo:
        tenant, name, image, owner, description, tags, extra, created, updated = row
        return EnvInfo(
            name,
            image,
            owner,
            description,
            json.loads(tags),
            json.loads(extra) if extra else None,
            created,
            updated,
            tenant or None,
        )

    @staticmethod
    def _namespace(tenant: str | None) -> str:
        if tenant is None:
            return _SHARED
        return _text("tenant", tenant, blank=False)

    def register(
        self,
        env_name: str,
        image: str,
        *,
        owner: str = "",
        description: str = "",
        tags: Iterable[str] | None = None,
        extra_spec: Mapping[str, Any] | None = None,
        tenant: str | None = None,
    ) -> EnvInfo:
        """Add ``env_name`` to ``tenant``'s namespace or replace its fields there (its
        ``create_at`` stays); an entry of the same name elsewhere is left alone."""
        namespace = self._namespace(tenant)
        env_name = _text("env_name", env_name, blank=False)
        image = _text("image", image, blank=False)
        _text("owner", owner)
        _text("description", description)
        tag_list = list(tags or [])
        if not all(isinstance(t, str) for t in tag_list):
            raise InvalidParameter(
                f"tags: expected a list of strings, got {tag_list!r}", field="tags", value=tag_list
            )
        if extra_spec is not None and not isinstance(extra_spec, Mapping):
            raise InvalidParameter(
                f"extra_spec: expected an object or null, got {extra_spec!r}",
                field="extra_spec",
                value=extra_spec,
            )
        now = datetime.now(UTC).isoformat()
        extra = json.dumps(dict(extra_spec)) if extra_spec is not None else None
        with self._lock, self._db:
            self._db.execute(
                f"INSERT INTO envs ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(tenant, env_name) "
                "DO UPDATE SET image=excluded.image, owner=excluded.owner, description=excluded.description, "
                "tags=excluded.tags, extra_spec=excluded.extra_spec, update_at=excluded.update_at",
                (
                    namespace,
                    env_name,
                    image,
                    owner,
                    description,
                    json.dumps(tag_list),
                    extra,
                    now,
                    now,
                ),
            )
        info = self.find(env_name, tenant=tenant, shared=False)
        assert info is not None
        return info

    def find(
        self, env_name: str, *, tenant: str | None = None, shared: bool = True
    ) -> EnvInfo | None:
        """The entry ``tenant`` sees as ``env_name``: its own, else (with ``shared``) the
        operator's; ``None`` when there is none. Another tenant's entry is never found."""
        namespaces = [self._namespace(tenant)]
        if shared and namespaces[0] != _SHARED:
            namespaces.append(_SHARED)
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM envs WHERE env_name = ? AND tenant IN ({', '.join('?' * len(namespaces))})",
                (env_name, *namespaces),
            ).fetchall()
        rows.sort(key=lambda row: row[0] == _SHARED)  # the tenant's own first
        return self._row(rows[0]) if rows else None

    def get(self, env_name: str, *, tenant: str | None = None) -> EnvInfo:
        """The entry ``tenant`` sees as ``env_name`` (see :meth:`find`).

        :raises EnvNotRegistered: it sees none (the name is in the message).
        """
        info = self.find(env_name, tenant=tenant)
        if info is None:
            raise EnvNotRegistered(f"env {env_name!r} is not registered in EnvHub")
        return info

    def list(
        self,
        owner: str | None = None,
        tags: Iterable[str] | None = None,
        *,
        tenant: str | None = None,
        everyone: bool = False,
    ) -> list[EnvInfo]:
        """The entries ``tenant`` sees (its own, and the operator's it has none of the same name
        of), or with ``everyone`` those of every namespace; only ``owner``'s (when given) that
        have any of ``tags`` (when given), by name."""
        namespace = self._namespace(tenant)
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM envs ORDER BY env_name, tenant"
            ).fetchall()
        if everyone:
            visible = [self._row(row) for row in rows]
        else:
            by_name: dict[str, tuple[Any, ...]] = {}
            for row in rows:  # the operator's ('') sort first: the tenant's own replaces it
                if row[0] in (namespace, _SHARED):
                    by_name[row[1]] = row
            visible = [self._row(row) for row in by_name.values()]
        wanted = set(tags or [])
        return [
            info
            for info in visible
            if (owner is None or info.owner == owner)
            and (not wanted or wanted.intersection(info.tags))
        ]

    def delete(self, env_name: str, *, tenant: str | None = None) -> bool:
        """Remove ``env_name`` from ``tenant``'s namespace; ``False`` when it has none there."""
        namespace = self._namespace(tenant)
        with self._lock, self._db:
            cursor = self._db.execute(
                "DELETE FROM envs WHERE env_name = ? AND tenant = ?", (env_name, namespace)
            )
        return cursor.rowcount > 0


# -- where an engine's EnvHub is -----------------------------------------------------------------

#: The ``[plugins.gem]`` table, as ``rock_configure`` read it.
configured: GemOptions = GemOptions()
_HUBS: dict[int, tuple[Any, EnvHub]] = {}
_HUBS_LOCK = threading.Lock()


def envhub_for(engine: Any, *, create: bool = True) -> EnvHub | None:
    """The EnvHub of ``engine`` (one per engine and database file); ``None`` when ``create`` is
    false and the database does not exist yet."""
    store = getattr(getattr(engine, "config", None), "store_path", None)
    path = database_path(configured.envhub_db, store)
    with _HUBS_LOCK:
        held = _HUBS.get(id(engine))
        if held is not None and held[0] is engine and held[1].path == path:
            return held[1]
        if not create and not path.exists():
            return None
        from rock_gem.provider import default_image

        hub = EnvHub(path, default_image=default_image(configured.image))
        _HUBS[id(engine)] = (engine, hub)
        return hub


# -- ROCK's EnvHub API on the admin --------------------------------------------------------------


def namespace_of(request: Any, body: Mapping[str, Any]) -> str | None:
    """The namespace a request to EnvHub's routes acts in: its tenant's; the operator's (``None``)
    for an operator or on an admin without keys; the one a body's ``tenant`` names, which only
    an operator may name beyond its own.

    :raises InvalidParameter: ``tenant`` is not a non-blank string.
    :raises EnvNotYours: a tenant named another tenant.
    """
    named = body.get("tenant")
    if named is not None:
        named = _text("tenant", named, blank=False)
    if request.operator:
        return named
    if named is not None and named != request.tenant:
        raise EnvNotYours(
            f"tenant: only an operator key may name another tenant's EnvHub entries, got {named!r}"
        )
    tenant: str | None = request.tenant
    return tenant


def routes() -> list[Any]:
    """``POST /env/{register,get,list,delete}`` and ``GET /health``, as ROCK's EnvHub server
    answers them: the entry's JSON, ``{"envs": [...]}``, ``true``; an unknown name is HTTP 404
    ``{"detail"}``, a malformed field HTTP 422 ``{"detail"}`` naming it, anything else HTTP 500.

    Each acts in the caller's namespace (:func:`namespace_of`): a tenant's register of a name
    another tenant (or the operator) has makes an entry of its own, a get or a make finds the
    caller's own entry, else the operator's; a delete of the operator's entry by a tenant is
    HTTP 403; another tenant's entry is answered as a missing one."""
    from rock_core.routes import AdminRoute, RouteRequest, RouteResponse

    def body_of(request: RouteRequest) -> dict[str, Any]:
        body = request.json()
        if not isinstance(body, dict):
            raise InvalidParameter(
                f"body: expected an object, got {type(body).__name__}", field="body"
            )
        return body

    def handler(call: Any) -> Any:
        async def run(request: RouteRequest) -> Any:
            try:
                hub = envhub_for(request.engine)
                assert hub is not None
                body = body_of(request) if request.method == "POST" else {}
                return call(hub, body, namespace_of(request, body), request.operator)
            except EnvNotRegistered as exc:
                return RouteResponse({"detail": exc.message}, status=404)
            except EnvNotYours as exc:
                return RouteResponse({"detail": exc.message}, status=403)
            except InvalidParameter as exc:
                return RouteResponse({"detail": exc.message}, status=422)
            except Exception as exc:  # noqa: BLE001 - ROCK's EnvHub answers 500 {detail}
                return RouteResponse({"detail": f"{type(exc).__name__}: {exc}"}, status=500)

        return run

    def register(hub: EnvHub, body: dict[str, Any], tenant: str | None, operator: bool) -> Any:
        for name in ("env_name", "image"):
            if name not in body:
                raise InvalidParameter(f"{name}: field required", field=name)
        return hub.register(
            body["env_name"],
            body["image"],
            owner=body.get("owner") or "",
            description=body.get("description") or "",
            tags=body.get("tags") or [],
            extra_spec=body.get("extra_spec"),
            tenant=tenant,
        ).to_json()

    def name_of(body: dict[str, Any]) -> str:
        if "env_name" not in body:
            raise InvalidParameter("env_name: field required", field="env_name")
        return _text("env_name", body["env_name"], blank=False)

    def get(hub: EnvHub, body: dict[str, Any], tenant: str | None, operator: bool) -> Any:
        return hub.get(name_of(body), tenant=tenant).to_json()

    def list_envs(hub: EnvHub, body: dict[str, Any], tenant: str | None, operator: bool) -> Any:
        owner = body.get("owner")
        tags = body.get("tags")
        if owner is not None:
            _text("owner", owner)
        if tags is not None and (
            not isinstance(tags, list) or not all(isinstance(t, str) for t in tags)
        ):
            raise InvalidParameter(
                f"tags: expected a list of strings or null, got {tags!r}", field="tags", value=tags
            )
        # An operator not naming a tenant sees every namespace (each entry says whose it is).
        everyone = operator and body.get("tenant") is None
        return {
            "envs": [
                info.to_json() for info in hub.list(owner, tags, tenant=tenant, everyone=everyone)
            ]
        }

    def delete(hub: EnvHub, body: dict[str, Any], tenant: str | None, operator: bool) -> Any:
        name = name_of(body)
        if hub.delete(name, tenant=tenant):
            return True
        if not operator and hub.find(name, tenant=None) is not None:
            raise EnvNotYours(
                f"env {name!r} is the operator's (every tenant sees it): only an operator key may delete it"
            )
        raise EnvNotRegistered(f"Environment {name} not found or already deleted")

    return [
        AdminRoute(
            "POST",
            "/env/register",
            handler(register),
            summary="Register or update an EnvHub env (ROCK)",
        ),
        AdminRoute("POST", "/env/get", handler(get), summary="An EnvHub env by name (ROCK)"),
        AdminRoute(
            "POST", "/env/list", handler(list_envs), summary="EnvHub envs by owner and tags (ROCK)"
        ),
        AdminRoute("POST", "/env/delete", handler(delete), summary="Delete an EnvHub env (ROCK)"),
        AdminRoute("GET", "/health", lambda request: _health(), summary="EnvHub's health (ROCK)"),
    ]


async def _health() -> Any:
    return {"status": "ok"}
