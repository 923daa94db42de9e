"""Settings of the admin server: a TOML file, then ``ROCK_*`` environment variables, then flags.

Later sources win: built-in defaults < the config file < environment variables < command-line
flags. The file is TOML (``--config FILE`` or ``$ROCK_CONFIG``)::

    [admin]
    host = "127.0.0.1"
    port = 8080
    state_dir = "~/.rock/admin"        # pid file, log file, default store
    max_json_body = "10m"              # larger JSON bodies are answered with HTTP 413
    max_upload_body = "100m"           # larger /upload bodies are answered with HTTP 413
    start_wait_seconds = 85            # how long POST /start waits for running (ROCK: 85 s)
    batch_max_count = 2000             # most ids in one POST /sandboxes/batch, largest page_size
    log_level = "info"
    access_log = false
    api_keys = [                       # none: no authentication (as ROCK); see rock.admin.auth
        { tenant = "team-a", sha256 = "<hex sha256 of the key>" },
        { tenant = "team-b", key = "<a long random token>" },   # hashed when read, never kept
        { tenant = "ops", sha256 = "<hex>", allow_host_network = true },
    ]
    strict_fields = false              # true: refuse requests with unknown fields (else: ignore
                                       # them, with a Warning header and a log line)
    allow_host_network = false         # network="host" for every caller (trusted code only);
                                       # else only for keys with allow_host_network = true
    proxy_timeout = 120                # seconds a proxied request may wait for its answer, and
                                       # between two reads of it (ROCK: 120 s); see rock.admin.proxy
    ws_max_message = "64m"             # largest WebSocket message the proxy and port-forward carry
    per_sandbox_metrics = false        # true: /metrics has each running sandbox's CPU, memory,
                                       # network and process gauges (a series set per sandbox)
    allowed_hosts = []                 # DNS names the admin is served under, besides IP addresses
                                       # and localhost (Host is checked: DNS rebinding); "*": any
    allowed_origins = []               # web origins whose pages may call the admin (none: every
                                       # request with an Origin header is refused); see
                                       # rock.admin.origin_guard
    allow_keyless_remote = false       # true: serve without api_keys on a non-loopback address
                                       # (anyone who reaches the port drives every sandbox)
    max_request_head = "64k"           # request line and headers; larger: HTTP 431
    header_timeout = 30                # seconds a client may take to send its request's headers
    max_connections = 2048             # open connections (WebSockets and held requests count);
                                       # past it requests are answered HTTP 503
    max_concurrent_uploads = 8         # /upload bodies read at once; the rest wait their turn
    default_egress = { default = "deny", rules = [{ action = "allow", cidr = "A.B.C.D" }] }
                                       # the egress policy of starts without one (docs/security.md)

    [engine]                            # rock_core.engine.config.EngineConfig, same names
    runtime = "docker"
    store_path = "~/.rock/admin/rock.db"  # default: <state_dir>/rock.db
    # store = "postgresql://rock@/rock?host=/run/postgresql"  # records in PostgreSQL instead
                                       # (rock-postgres); wins over store_path
    max_concurrent_starts = 16
    default_auto_clear_seconds = 21600
    max_memory = "64g"
    default_pids_limit = 4096          # processes per sandbox unless the request says
    max_pids_limit = 65536
    allowed_cap_add = ["NET_RAW", "MKNOD", "AUDIT_WRITE", "SETFCAP", "SYS_CHROOT", "SYS_PTRACE"]
    disk_check_interval = 5            # seconds between looks at unenforced disk limits
    disk_keep_seconds = 3600           # a sandbox stopped for its disk keeps its files this long
    archive_store = "s3"               # where archive() stores sandboxes (rock-archive-s3; "fs": a folder)
    archive_timeout = 1800             # seconds an archive may take, then it fails (stopped again)
    restore_timeout = 1800             # seconds a restore may take, then it fails (archived again)
    forward_rocklet_port = false       # true: port_mapping also has 22555 (the rocklet's own port,
                                       # forwarded on 127.0.0.1), as ROCK's does; rock never needs it
    max_rocklet_answer = "64m"         # largest answer read from a rocklet (a command's output...)
    idle_counts_paused = false         # true: time paused counts towards auto_clear_seconds
    commit_registries = []             # registries ROCK's commit may push to ("registry.example.com");
                                       # none: a commit's tag naming a registry is refused
    ...

    [engine.runtime_options]            # keyword arguments of the runtime's constructor

    [plugins.archive-s3]                # one table per plugin, named like its entry point: what
    bucket = "rock-archives"            # its rock_configure hook receives (and, for a store, its
                                        # constructor's keyword arguments)

    [[engine.warm_pools]]               # started sandboxes kept ready, one table per kind
    image = "python:3.11"               # any start-request field: memory, cpus, disk, env, ...
    memory = "2g"
    cpus = 1
    size = 8

Environment variables: ``ROCK_ADMIN_<KEY>`` for each ``[admin]`` key (``ROCK_ADMIN_PORT=9000``,
``ROCK_ADMIN_STATE_DIR=/var/lib/rock``) and ``ROCK_ENGINE_<KEY>`` for each ``[engine]`` key
(``ROCK_ENGINE_MAX_CONCURRENT_STARTS=8``; ``ROCK_ENGINE_WARM_POOLS`` takes the pools as a JSON
list of tables, ``ROCK_ENGINE_RUNTIME_OPTIONS`` a JSON table, ``ROCK_ENGINE_ALLOWED_CAP_ADD``,
``ROCK_ENGINE_COMMIT_REGISTRIES``, ``ROCK_ADMIN_ALLOWED_HOSTS`` and ``ROCK_ADMIN_ALLOWED_ORIGINS`` comma-separated names, and
booleans are ``true`` or ``false``).

Every value, from any source, is read by rock-core's wire converter as the type its key has in
``_ADMIN_KEYS``/``_ENGINE_KEYS`` (the checks a request's fields get: ``port`` 1..65535, sizes
such as ``"10m"``, counts > 0, ...), and the settings' classes then check them together. A bad
value stops start-up with an :class:`~rock_core.errors.InvalidParameter` naming its source, its
dotted path and the value, every problem of a file at once::

    config file admin.toml: admin.port: expected a port number 1..65535, got 0; engine.max_cpus: expected a number > 0, got 0
``ROCK_ADMIN_API_KEYS="team-a=sha256:HEX,team-b=TOKEN"`` adds keys to those of the file.
``ROCK_PLUGIN_<NAME>_<KEY>`` sets a key of a plugin's table (``ROCK_PLUGIN_ARCHIVE_S3_BUCKET=b``);
a table or variable naming no installed plugin stops start-up, naming it.

Two engine settings are fixed for the admin, whatever the file says: ``remove_on_close`` is
false (``rock admin stop`` leaves sandboxes running) and ``store_path`` is a file (the records
survive a restart).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from rock.admin.auth import ApiKey, ApiKeyEntry, api_key_tables, optional_egress
from rock_core.converters import read_types, structure_fields
from rock_core.egress import EgressPolicy
from rock_core.engine.config import EngineConfig
from rock_core.errors import InvalidParameter
from rock_core.models import ByteSize, NonBlankStr, Port, PositiveFloat, PositiveInt

__all__ = ["AdminSettings", "load_settings", "default_state_dir", "MiB"]

MiB = 1024 * 1024


def default_state_dir() -> Path:
    """``$ROCK_ADMIN_STATE_DIR``, else ``~/.rock/admin``."""
    return Path(os.environ.get("ROCK_ADMIN_STATE_DIR") or "~/.rock/admin").expanduser()


def _api_keys(entries: Iterable[ApiKey | ApiKeyEntry]) -> tuple[ApiKey, ...]:
    return tuple(entry.api_key() if isinstance(entry, ApiKeyEntry) else entry for entry in entries)


def _one_tenant_per_key(
    instance: Any, attribute: attrs.Attribute[Any], keys: tuple[ApiKey, ...]
) -> None:
    tenants: dict[str, str] = {}
    for key in keys:
        if tenants.setdefault(key.sha256, key.tenant) != key.tenant:
            raise InvalidParameter(
                f"{attribute.name}: one key is given to two tenants ({tenants[key.sha256]!r} and {key.tenant!r})",
                field=attribute.name,
            )


@attrs.frozen(kw_only=True)
class AdminSettings:
    """Everything the admin server needs to run (see the module docstring for each key).

    :param default_egress: the egress policy of starts that ask for none (``None``: none).
    :param engine: the engine's settings, with ``remove_on_close=False`` and a file store.
    """

    host: str = "127.0.0.1"
    port: int = 8080
    state_dir: Path = attrs.field(
        factory=default_state_dir, converter=lambda value: Path(value).expanduser()
    )
    max_json_body: int = 10 * MiB
    max_upload_body: int = 100 * MiB
    start_wait_seconds: float = 85.0
    batch_max_count: int = 2000
    log_level: str = "info"
    access_log: bool = False
    api_keys: tuple[ApiKey, ...] = attrs.field(
        default=(), converter=_api_keys, validator=_one_tenant_per_key
    )
    allow_host_network: bool = False
    strict_fields: bool = False
    proxy_timeout: float = 120.0
    ws_max_message: int = 64 * MiB
    per_sandbox_metrics: bool = False
    allowed_hosts: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    allowed_origins: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    allow_keyless_remote: bool = False
    max_request_head: int = 64 * 1024
    header_timeout: float = 30.0
    max_connections: int = 2048
    max_concurrent_uploads: int = 8
    default_egress: EgressPolicy | None = attrs.field(default=None, converter=optional_egress)
    engine: EngineConfig = attrs.field(factory=lambda: EngineConfig(remove_on_close=False))

    @property
    def url(self) -> str:
        """The base URL clients use (``http://host:port``)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        """Where the running server writes its pid and address."""
        return self.state_dir / "admin.pid"

    @property
    def log_file(self) -> Path:
        """Where ``rock admin start`` sends the server's output."""
        return self.state_dir / "admin.log"

    @property
    def owner(self) -> str:
        """The ``rock.owner`` label of the admin's sandboxes: never reaped as a dead process's.
        The admins of one cluster share one (``cluster:<name>``): the leader holds them all."""
        if self.engine.cluster is not None:
            return f"cluster:{self.engine.cluster}"
        return f"admin:{self.engine.store_path}"


# ---------------------------------------------------------------------------------------------
# Reading: every value is read by rock-core's wire converter as the type its key names here (the
# checks a request's fields get), and a bad one is named by its source and dotted path:
# "config file admin.toml: admin.port: expected a port number 1..65535, got 0".

_ADMIN_KEYS: Mapping[str, Any] = {
    "host": str,
    "port": Port,
    "state_dir": str,
    "max_json_body": ByteSize,
    "max_upload_body": ByteSize,
    "start_wait_seconds": PositiveFloat,
    "batch_max_count": PositiveInt,
    "log_level": NonBlankStr,
    "access_log": bool,
    "api_keys": list[ApiKeyEntry],
    "allow_host_network": bool,
    "strict_fields": bool,
    "proxy_timeout": PositiveFloat,
    "ws_max_message": ByteSize,
    "per_sandbox_metrics": bool,
    "allowed_hosts": list[NonBlankStr],
    "allowed_origins": list[NonBlankStr],
    "allow_keyless_remote": bool,
    "max_request_head": ByteSize,
    "header_timeout": PositiveFloat,
    "max_connections": PositiveInt,
    "max_concurrent_uploads": PositiveInt,
    "default_egress": dict[str, Any],
}

#: Not keys of [engine]: fixed for the admin (see the module docstring), or the [plugins] tables.
_NOT_ENGINE_KEYS = ("remove_on_close", "plugin_options")

#: Every other field of EngineConfig, read as the type its field says (rock_core.converters.read_types).
_ENGINE_KEYS: Mapping[str, Any] = {
    name: kind for name, kind in read_types(EngineConfig).items() if name not in _NOT_ENGINE_KEYS
}

_FILE_TABLES: Mapping[str, Any] = {
    "admin": _ADMIN_KEYS,
    "engine": _ENGINE_KEYS,
    "plugins": dict[
        str, dict[str, Any]
    ],  # each plugin's table is its own to check (rock_configure)
}


def _json(text: str, path: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidParameter(
            f"{path}: expected JSON ({exc}), got {text!r}", field=path, value=text
        ) from None


# Keys whose value may also be written as text (as environment variables must): the text form
# becomes what a TOML file would hold, and is then read like it.
_TEXT_FORMS: Mapping[str, Callable[[str, str], Any]] = {
    "api_keys": lambda text, path: api_key_tables(text, path=path),
    "allowed_cap_add": lambda text, _path: [
        part.strip() for part in text.split(",") if part.strip()
    ],
    "allowed_hosts": lambda text, _path: [part.strip() for part in text.split(",") if part.strip()],
    "commit_registries": lambda text, _path: [
        part.strip() for part in text.split(",") if part.strip()
    ],
    "allowed_origins": lambda text, _path: [
        part.strip() for part in text.split(",") if part.strip()
    ],
    "warm_pools": _json,
    "runtime_options": _json,
    "max_auto_delete_seconds": lambda text, _path: (
        None if text.strip().lower() in ("", "none", "null") else text
    ),
    "archive_store": lambda text, _path: text or None,  # "": archiving off, as when unset
}


def _from(source: str, exc: InvalidParameter) -> InvalidParameter:
    return InvalidParameter(f"{source}: {exc.message}", field=exc.field, value=exc.value)


def _from_text(table: Any, path: str) -> Any:
    if not isinstance(table, Mapping):
        return table
    return {
        key: _TEXT_FORMS[key](value, f"{path}.{key}")
        if key in _TEXT_FORMS and isinstance(value, str)
        else value
        for key, value in table.items()
    }


def _read(source: str, table: Any, keys: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The settings of one table of one source, each read as the type ``keys`` gives it.

    :raises InvalidParameter: naming ``source``, then every bad key by its dotted path.
    """
    try:
        return structure_fields(_from_text(table, path), keys, path=path)
    except InvalidParameter as exc:
        raise _from(source, exc) from None


def _in_table(exc: InvalidParameter, table: str, origin: Mapping[str, str]) -> InvalidParameter:
    """An error of :class:`EngineConfig` or :class:`AdminSettings` (which name their own fields),
    named by its dotted path in the settings and by the source of the bad key."""
    name = re.split(r"[.\[, ]", exc.field or "", maxsplit=1)[0]
    message = (
        f"{table}.{exc.message}"
        if name and exc.message.startswith(name)
        else f"{table}: {exc.message}"
    )
    source = origin.get(f"{table}.{name}")
    field = f"{table}.{exc.field}" if exc.field else table
    return InvalidParameter(
        f"{source}: {message}" if source else message, field=field, value=exc.value
    )


def _read_file(path: Path, source: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise InvalidParameter(
            f"{source}: {exc.strerror}", field="config", value=str(path)
        ) from exc
    except tomllib.TOMLDecodeError as exc:
        raise InvalidParameter(
            f"{source}: not valid TOML: {exc}", field="config", value=str(path)
        ) from exc
    try:
        data = {
            name: _from_text(table, name) if name != "plugins" else table
            for name, table in data.items()
        }
    except InvalidParameter as exc:
        raise _from(source, exc) from None
    return _read(source, data, _FILE_TABLES, "")


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> AdminSettings:
    """The admin's settings from defaults, ``config_file`` (else ``$ROCK_CONFIG``), the
    environment and ``overrides`` (``host=``, ``port=``, ... from command-line flags; ``None``
    values are ignored).

    :raises InvalidParameter: an unreadable file, an unknown key or a bad value, naming its
        source and its dotted path (``admin.port``, ``engine.warm_pools[0].memory``,
        ``admin.api_keys[2].tenant``) and the value (never a key's).
    """
    env = os.environ if environ is None else environ
    tables: dict[str, dict[str, Any]] = {"admin": {}, "engine": {}}
    origin: dict[str, str] = {}  # dotted key -> the source that set it, for EngineConfig's errors

    def take(source: str, table: str, read: dict[str, Any]) -> None:
        if "api_keys" in read:  # keys add up: a deployment may keep some in the file, inject others
            read["api_keys"] = tables[table].get("api_keys", []) + read["api_keys"]
        tables[table].update(read)
        origin.update(dict.fromkeys((f"{table}.{key}" for key in read), source))

    plugin_options: dict[str, Any] = {}
    path = config_file or env.get("ROCK_CONFIG")
    if path:
        source = f"config file {path}"
        data = _read_file(Path(path).expanduser(), source)  # every table's problems at once
        take(source, "admin", data.get("admin", {}))
        take(source, "engine", data.get("engine", {}))
        plugin_options = data.get("plugins", {})
    for table, keys in (("admin", _ADMIN_KEYS), ("engine", _ENGINE_KEYS)):
        for key in keys:
            name = f"ROCK_{table.upper()}_{key.upper()}"
            if env.get(name):
                source = f"environment variable {name}"
                take(source, table, _read(source, {key: env[name]}, keys, table))
    flags = {k: v for k, v in overrides.items() if v is not None}
    take("command line", "admin", _read("command line", flags, _ADMIN_KEYS, "admin"))

    admin, engine = tables["admin"], tables["engine"]
    state_dir = Path(admin.setdefault("state_dir", default_state_dir())).expanduser()
    engine["store_path"] = str(Path(engine.get("store_path") or state_dir / "rock.db").expanduser())
    try:
        engine_config = EngineConfig(**engine, plugin_options=plugin_options, remove_on_close=False)
    except InvalidParameter as exc:
        raise _in_table(exc, "engine", origin) from None
    try:
        return AdminSettings(**admin, engine=engine_config)
    except InvalidParameter as exc:
        raise _in_table(exc, "admin", origin) from None
