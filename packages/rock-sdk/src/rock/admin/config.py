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

    [engine]                            # rock_core.engine.config.EngineConfig, same names
    runtime = "docker"
    store_path = "~/.rock/admin/rock.db"  # default: <state_dir>/rock.db
    max_concurrent_starts = 16
    default_auto_clear_seconds = 21600
    max_memory = "64g"
    default_pids_limit = 4096          # processes per sandbox unless the request says
    max_pids_limit = 65536
    allowed_cap_add = ["NET_RAW", "MKNOD", "AUDIT_WRITE", "SETFCAP", "SYS_CHROOT", "SYS_PTRACE"]
    disk_check_interval = 5            # seconds between looks at unenforced disk limits
    disk_keep_seconds = 3600           # a sandbox stopped for its disk keeps its files this long
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
list of tables). A bad value names its source and key.
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
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
from rock_core.converters import capability_names
from rock_core.engine.config import EngineConfig, WarmPoolConfig, warm_pools_from
from rock_core.errors import InvalidParameter
from rock_core.units import size_to_bytes

from rock.admin.auth import ApiKey, parse_api_keys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["AdminSettings", "load_settings", "default_state_dir", "MiB"]

MiB = 1024 * 1024


def default_state_dir() -> Path:
    """``$ROCK_ADMIN_STATE_DIR``, else ``~/.rock/admin``."""
    return Path(os.environ.get("ROCK_ADMIN_STATE_DIR") or "~/.rock/admin").expanduser()


@attrs.frozen(kw_only=True)
class AdminSettings:
    """Everything the admin server needs to run (see the module docstring for each key).

    :param engine: the engine's settings, with ``remove_on_close=False`` and a file store.
    """

    host: str = "127.0.0.1"
    port: int = 8080
    state_dir: Path = attrs.field(factory=default_state_dir)
    max_json_body: int = 10 * MiB
    max_upload_body: int = 100 * MiB
    start_wait_seconds: float = 85.0
    batch_max_count: int = 2000
    log_level: str = "info"
    access_log: bool = False
    api_keys: tuple[ApiKey, ...] = ()
    allow_host_network: bool = False
    strict_fields: bool = False
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
        """The ``rock.owner`` label of the admin's sandboxes: never reaped as a dead process's."""
        return f"admin:{self.engine.store_path}"


# ---------------------------------------------------------------------------------------------
# Value parsing: one function per kind, each naming the key and the source on failure.


def _fail(source: str, key: str, value: Any, why: str) -> InvalidParameter:
    return InvalidParameter(f"{source}: {key}: {why}, got {value!r}", field=key, value=value)


def _to_int(source: str, key: str, value: Any) -> int:
    if isinstance(value, bool):
        raise _fail(source, key, value, "expected an integer")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise _fail(source, key, value, "expected an integer") from None


def _to_float(source: str, key: str, value: Any) -> float:
    if isinstance(value, bool):
        raise _fail(source, key, value, "expected a number")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise _fail(source, key, value, "expected a number") from None


def _to_bool(source: str, key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise _fail(source, key, value, "expected true or false")


def _to_size(source: str, key: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return size_to_bytes(str(value))
    except (TypeError, ValueError):
        raise _fail(source, key, value, "expected a size such as '10m' or '8g'") from None


def _to_str(source: str, key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _fail(source, key, value, "expected a string")
    return value


def _to_optional_int(source: str, key: str, value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null")):
        return None
    return _to_int(source, key, value)


def _to_optional_path(source: str, key: str, value: Any) -> str | None:
    if value is None or value == "":
        return None
    return str(Path(_to_str(source, key, value)).expanduser())


_ADMIN_KEYS = {
    "host": _to_str,
    "port": _to_int,
    "state_dir": lambda s, k, v: Path(_to_str(s, k, v)).expanduser(),
    "max_json_body": _to_size,
    "max_upload_body": _to_size,
    "start_wait_seconds": _to_float,
    "batch_max_count": _to_int,
    "log_level": _to_str,
    "access_log": _to_bool,
    "api_keys": lambda s, _k, v: parse_api_keys(s, v),
    "allow_host_network": _to_bool,
    "strict_fields": _to_bool,
}

def _to_capabilities(source: str, key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):  # from the environment: comma-separated
        value = [part for part in (p.strip() for p in value.split(",")) if part]
    try:
        return capability_names(value)
    except ValueError as exc:
        raise _fail(source, key, value, str(exc)) from None


def _to_warm_pools(source: str, key: str, value: Any) -> tuple[WarmPoolConfig, ...]:
    if isinstance(value, str):  # from the environment: JSON
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise _fail(source, key, value, f"expected a JSON list of pool tables ({exc})") from None
    try:
        return warm_pools_from(value)
    except InvalidParameter as exc:
        raise InvalidParameter(f"{source}: {exc.message}", field=exc.field, value=exc.value) from None


_ENGINE_KEYS = {
    "runtime": _to_str,
    "store_path": _to_optional_path,
    "max_concurrent_starts": _to_int,
    "default_auto_clear_seconds": _to_int,
    "default_auto_delete_seconds": _to_int,
    "max_auto_delete_seconds": _to_optional_int,
    "default_startup_timeout": _to_float,
    "max_cpus": _to_float,
    "max_memory": _to_size,
    "max_disk": _to_size,
    "stop_timeout": _to_float,
    "reconcile_interval": _to_float,
    "timer_interval": _to_float,
    "engine_label": _to_str,
    "reap_orphans": _to_bool,
    "warm_pools": _to_warm_pools,
    "max_warm_pool_members": _to_int,
    "default_pids_limit": _to_int,
    "max_pids_limit": _to_int,
    "allowed_cap_add": lambda s, k, v: _to_capabilities(s, k, v),
    "disk_check_interval": _to_float,
    "disk_keep_seconds": _to_int,
    "archive_store": lambda s, k, v: None if v in (None, "") else _to_str(s, k, v),
}


def _take(table: Mapping[str, Any], keys: Mapping[str, Any], source: str, out: dict[str, Any]) -> None:
    for key, value in table.items():
        if key not in keys:
            known = ", ".join(sorted(keys))
            raise InvalidParameter(f"{source}: unknown key {key!r} (known: {known})", field=key, value=value)
        out[key] = keys[key](source, key, value)


def _read_file(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise InvalidParameter(f"config file {path}: {exc.strerror}", field="config", value=str(path)) from exc
    except tomllib.TOMLDecodeError as exc:
        raise InvalidParameter(f"config file {path}: not valid TOML: {exc}", field="config", value=str(path)) from exc
    unknown = set(data) - {"admin", "engine", "plugins"}
    if unknown:
        raise InvalidParameter(
            f"config file {path}: unknown table(s) {', '.join(sorted(unknown))} (known: admin, engine, plugins)",
            field="config", value=str(path),
        )
    for name, table in (data.get("plugins") or {}).items():
        if not isinstance(table, dict):
            raise InvalidParameter(
                f"config file {path}: [plugins.{name}] must be a table of the plugin's settings, got {table!r}",
                field=f"plugins.{name}", value=table,
            )
    return data


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> AdminSettings:
    """The admin's settings from defaults, ``config_file`` (else ``$ROCK_CONFIG``), the
    environment and ``overrides`` (``host=``, ``port=``, ... from command-line flags; ``None``
    values are ignored).

    :raises InvalidParameter: an unreadable file, an unknown key or a bad value (naming it).
    """
    env = os.environ if environ is None else environ
    admin: dict[str, Any] = {}
    engine: dict[str, Any] = {}
    runtime_options: dict[str, Any] = {}
    plugin_options: dict[str, Any] = {}
    path = config_file or env.get("ROCK_CONFIG")
    if path:
        data = _read_file(Path(path).expanduser())
        source = f"config file {path}"
        _take(data.get("admin", {}), _ADMIN_KEYS, f"{source} [admin]", admin)
        engine_table = dict(data.get("engine", {}))
        runtime_options = dict(engine_table.pop("runtime_options", {}) or {})
        _take(engine_table, _ENGINE_KEYS, f"{source} [engine]", engine)
        plugin_options = dict(data.get("plugins") or {})
    for key, parse in _ADMIN_KEYS.items():
        name = f"ROCK_ADMIN_{key.upper()}"
        if env.get(name):
            value = parse(f"environment variable {name}", key, env[name])
            # Keys add up: a deployment may keep some in the file and inject others.
            admin[key] = admin.get(key, ()) + value if key == "api_keys" else value
    for key, parse in _ENGINE_KEYS.items():
        name = f"ROCK_ENGINE_{key.upper()}"
        if env.get(name):
            engine[key] = parse(f"environment variable {name}", key, env[name])
    _take({k: v for k, v in overrides.items() if v is not None}, _ADMIN_KEYS, "command line", admin)

    tenants: dict[str, str] = {}
    for entry in admin.get("api_keys", ()):
        if tenants.setdefault(entry.sha256, entry.tenant) != entry.tenant:
            raise InvalidParameter(
                f"api_keys: one key is given to two tenants ({tenants[entry.sha256]!r} and {entry.tenant!r})",
                field="api_keys",
            )
    state_dir = Path(admin.get("state_dir") or default_state_dir())
    admin["state_dir"] = state_dir
    if not engine.get("store_path"):
        engine["store_path"] = str(state_dir / "rock.db")
    engine_config = EngineConfig(
        **engine, runtime_options=runtime_options, plugin_options=plugin_options, remove_on_close=False
    )
    return AdminSettings(**admin, engine=engine_config)
