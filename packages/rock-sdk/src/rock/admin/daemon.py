"""Running the admin server: in the foreground (:func:`serve`) or as a daemon (:func:`start`,
:func:`stop`, :func:`status`), with a pid file and a log file in the state directory.

The pid file (``<state_dir>/admin.pid``) is written by the serving process itself, as JSON
(``pid``, ``url``, ``log_file``, ``store_path``, ...), and holds the process's start time too, so
a pid reused by another process after a crash is not mistaken for a running admin. Only one
admin runs per state directory.

A graceful stop is SIGTERM: uvicorn stops accepting connections, lets requests in flight finish
(at most ``GRACEFUL_SECONDS``), then the engine closes without touching the sandboxes, which
keep running and are listed again by the next admin on the same store. ``rock admin stop
--remove-sandboxes`` first leaves a mark (``<state_dir>/admin.remove-sandboxes``, naming the
admin's pid) that the admin reads as it closes: then it removes its sandboxes before it exits
(:func:`take_removal_mark`).
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import ipaddress
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import attrs

from rock.admin.config import AdminSettings
from rock_core.engine.owners import proc_start_time, process_alive
from rock_core.errors import InvalidParameter
from rock_core.private_paths import private_dir

__all__ = [
    "AdminAlreadyRunning",
    "AdminStatus",
    "KeylessRemoteRefused",
    "check_exposure",
    "is_loopback",
    "serve",
    "start",
    "stop",
    "status",
    "read_pid_file",
    "sandboxes_held",
    "take_removal_mark",
    "GRACEFUL_SECONDS",
]

#: Seconds requests in flight get to finish after SIGTERM before they are cut.
GRACEFUL_SECONDS = 10.0
#: Seconds the admin keeps an idle client connection open.
KEEP_ALIVE_SECONDS = 75
#: The admin's garbage collector thresholds: Python's are (700, 10, 10). A young collection
#: walks every object made since the last one that still lives (more than the count says, as
#: it goes down for old objects freed, such as the records a start replaces), and in a burst
#: those are the starts in flight and the sandboxes' state, not garbage: a whole run at 16,000
#: found about 6,500 objects in cycles. With 200,000 new objects a burst of 16,000 starts made
#: four young collections of 30 to 170 ms, 0.37 s of the loop; with 1,000,000 it made none
#: (0.02 s in all), the loop's CPU a start 0.54 -> 0.43 ms, the admin's memory 194 -> 200 MB.
#: The middle generation after 50 young ones, a full collection after 100 of those (each walks
#: every object of every sandbox held: about 90 ms with 4,000). The cyclic garbage a collection
#: finds waits longer: at most some 1,000,000 objects' worth, about 100 MB.
GC_THRESHOLDS = (1_000_000, 50, 100)

log = logging.getLogger("rock.admin")


class AdminAlreadyRunning(RuntimeError):
    """An admin already runs with this state directory."""


class UnsafeStateDir(RuntimeError):
    """The state directory (which holds the store, with every rocklet secret) is not the admin's
    own: a link, another user's, or writable by others."""


def _private_state_dir(settings: AdminSettings) -> None:
    """Make the state directory mode 0700, or narrow an existing one of this user to it.

    :raises UnsafeStateDir: naming the path, its owner and mode, and the setting.
    """
    try:
        private_dir(settings.state_dir, setting="admin.state_dir (ROCK_ADMIN_STATE_DIR)")
    except InvalidParameter as exc:
        raise UnsafeStateDir(exc.message) from None


class KeylessRemoteRefused(RuntimeError):
    """The admin would listen beyond this machine without API keys."""


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` reaches this machine only (``127.0.0.1``, ``::1``, ``localhost``)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a name: it may resolve to any address


def check_exposure(settings: AdminSettings) -> None:
    """Refuse to serve without API keys on an address other machines reach, unless the operator
    said so (``[admin] allow_keyless_remote = true`` or ``--insecure-no-keys``).

    :raises KeylessRemoteRefused: naming the address and both ways out.
    """
    if settings.api_keys or settings.allow_keyless_remote or is_loopback(settings.host):
        return
    raise KeylessRemoteRefused(
        f"refusing to serve on {settings.host!r} without API keys: anyone who reaches that address could "
        "start sandboxes and run commands in every one. Configure [admin] api_keys (or ROCK_ADMIN_API_KEYS), "
        "listen on 127.0.0.1, or accept the risk with --insecure-no-keys ([admin] allow_keyless_remote = true)"
    )


@attrs.frozen(kw_only=True)
class AdminStatus:
    """What :func:`status` found: the running admin's pid file and its sandboxes by state."""

    pid: int
    url: str
    #: ``None``: the admin writes to its terminal (``rock admin serve`` in the foreground).
    log_file: str | None
    store_path: str | None
    started_at: float
    sandboxes: dict[str, int] | None = None  # None when the server did not answer
    #: Each warm pool's image, members ready and target size, by pool key.
    warm_pools: dict[str, dict[str, object]] | None = None
    #: Each tenant's use (sandboxes, memory in bytes, cpus) and its quota, by tenant.
    tenants: dict[str, dict[str, Any]] | None = None
    #: Why ``sandboxes`` is unknown, and what to do (``None``: the server answered).
    unanswered: str | None = None
    #: The admin process: ``pid``, ``rss_bytes``, ``gc_thresholds``, ``gc_frozen``
    #: (:func:`rock.admin.status.process_status`; ``None``: not answered).
    process: dict[str, Any] | None = None


def read_pid_file(settings: AdminSettings) -> dict[str, Any] | None:
    """The pid file's content if the admin it names is running, else ``None``."""
    try:
        data = json.loads(settings.pid_file.read_text())
        pid = int(data["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return data if process_alive(pid, str(data.get("proc_start", ""))) else None


def _claim_pid_file(settings: AdminSettings) -> None:
    _private_state_dir(settings)
    running = read_pid_file(settings)
    if running is not None and running["pid"] != os.getpid():
        raise AdminAlreadyRunning(
            f"rock admin already runs (pid {running['pid']}, {running.get('url')}); "
            f"`rock admin stop` first, or use another state directory (ROCK_ADMIN_STATE_DIR)"
        )
    data = {
        "pid": os.getpid(),
        "proc_start": proc_start_time(os.getpid()),
        "url": settings.url,
        "host": settings.host,
        "port": settings.port,
        # Only where the output really goes there (`rock admin start`); `rock admin serve` in
        # the foreground writes to its terminal, and no file would be kept.
        "log_file": str(settings.log_file) if _output_is(settings.log_file) else None,
        "store_path": settings.engine.store_path,
        "started_at": time.time(),
    }
    tmp = settings.pid_file.with_suffix(".pid.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, settings.pid_file)


def _output_is(path: Path) -> bool:
    """Whether this process's standard output is the file ``path``."""
    try:
        out, file = os.fstat(1), os.stat(path)
    except OSError:
        return False
    return (out.st_dev, out.st_ino) == (file.st_dev, file.st_ino)


def _release_pid_file(settings: AdminSettings) -> None:
    try:
        data = json.loads(settings.pid_file.read_text())
        if data.get("pid") == os.getpid():
            settings.pid_file.unlink()
    except (OSError, ValueError):
        pass


#: The libraries of the admin server (module names), installed by ``rock-sdk[admin]``.
SERVER_MODULES = (
    ("starlette",),
    ("uvicorn",),
    ("prometheus_client",),
    ("python_multipart", "multipart"),
    ("wsproto",),
)
#: What to run when they are missing.
INSTALL_HINT = "pip install 'rock-sdk[admin]'"


def require_server_libraries() -> None:
    """Check that the admin server's libraries are installed.

    :raises MissingServerLibraries: naming the missing ones and the install command.
    """
    missing = [
        names[0] for names in SERVER_MODULES if not any(importlib.util.find_spec(n) for n in names)
    ]
    if missing:
        raise MissingServerLibraries(
            f"the admin server needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
            f"not installed: {INSTALL_HINT}"
        )


class MissingServerLibraries(RuntimeError):
    """The admin server's libraries (``rock-sdk[admin]``) are not installed."""


def serve(settings: AdminSettings, *, runtime: Any = None) -> int:
    """Run the admin in this process until SIGTERM or SIGINT; return the exit code.

    ``runtime``: a :class:`~rock_core.runtime.Runtime` instance for the engine instead of the
    plugin the settings name (``rock bench admin --scripted``).

    :raises AdminAlreadyRunning: another admin holds the pid file of ``settings.state_dir``.
    :raises MissingServerLibraries: ``rock-sdk[admin]`` is not installed.
    """
    require_server_libraries()
    check_exposure(settings)
    import uvicorn

    from rock.admin.app import create_app
    from rock.admin.http_limits import bounded_http_protocol

    _claim_pid_file(settings)
    try:
        logging.basicConfig(
            level=settings.log_level.upper(),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        if settings.log_level.lower() != "debug":  # one line per rocklet call drowns the rest
            logging.getLogger("httpx").setLevel(logging.WARNING)
        app = create_app(settings, runtime=runtime)
        _tune_gc()
        config = uvicorn.Config(
            app,
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level.lower(),
            access_log=settings.access_log,
            lifespan="on",
            timeout_graceful_shutdown=int(GRACEFUL_SECONDS),
            # The admin is an API server for trainers: many keep-alive clients, no proxy headers.
            proxy_headers=False,
            # Longer than clients keep an idle connection (httpx: 5 s), so the client always
            # drops it first: a server closing it as a client reuses it broke a start request
            # (ReadError) in a 1,000-sandbox run.
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            server_header=False,
            # What a client may make the admin hold: a bounded request head, sent within
            # header_timeout (rock.admin.http_limits), and at most max_connections connections
            # (WebSockets and held get_status requests count; past it: HTTP 503).
            http=bounded_http_protocol(settings.max_request_head, settings.header_timeout),
            limit_concurrency=settings.max_connections,
            # WebSockets of the proxy, port-forward and shell: wsproto waits for the client in
            # both directions (back-pressure); messages up to ws_max_message.
            ws="wsproto",
            ws_max_size=settings.ws_max_message,
        )
        server = uvicorn.Server(config)
        server.run()
        return 0 if server.started else 1
    finally:
        _release_pid_file(settings)


def _tune_gc() -> None:
    """Leave what the admin made to start (modules, routes, the app) out of every later
    collection (``gc.freeze``: it lives as long as the process), and collect less often
    (:data:`GC_THRESHOLDS`): the collector's work in a burst of starts grows with the sandboxes
    already held, not with what the burst leaves behind."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def start(
    settings: AdminSettings, config_file: str | None = None, *, wait: float = 60.0
) -> dict[str, Any]:
    """Start the admin as a background process and wait until it answers ``/healthz``.

    Its output goes to ``settings.log_file``. Returns the pid file's content.

    :raises AdminAlreadyRunning: an admin already runs with this state directory.
    :raises RuntimeError: the server exited or did not answer within ``wait`` seconds (with the
        end of its log).
    """
    require_server_libraries()
    check_exposure(settings)
    running = read_pid_file(settings)
    if running is not None:
        raise AdminAlreadyRunning(
            f"rock admin already runs (pid {running['pid']}, {running.get('url')}); `rock admin stop` first"
        )
    _private_state_dir(settings)
    command = [
        sys.executable,
        "-m",
        "rock.admin",
        "serve",
        "--host",
        settings.host,
        "--port",
        str(settings.port),
    ]
    if config_file:
        command += ["--config", str(config_file)]
    if settings.allow_keyless_remote:
        command.append("--insecure-no-keys")
    env = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(settings.state_dir)}
    with open(settings.log_file, "ab") as log_out:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + wait
    import httpx  # here: finding the admin (`rock sandbox list`) needs no HTTP client

    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            raise RuntimeError(
                f"rock admin exited with code {code} while starting; the end of {settings.log_file}:\n"
                + _tail(settings.log_file)
            )
        data = read_pid_file(settings)
        if data is not None and data["pid"] == process.pid:
            try:
                response = httpx.get(f"{data['url']}/healthz", timeout=2.0)
                if response.status_code == 200:
                    return data
            except httpx.HTTPError:
                pass
        time.sleep(0.05)
    process.terminate()
    raise RuntimeError(
        f"rock admin did not answer within {wait:g}s; the end of {settings.log_file}:\n"
        + _tail(settings.log_file)
    )


#: The states of a sandbox whose container runs (what keeps running after a stop).
HOLDING_STATES = ("pending", "running", "archiving")


def _removal_mark(settings: AdminSettings) -> Path:
    return settings.state_dir / "admin.remove-sandboxes"


def take_removal_mark(settings: AdminSettings) -> bool:
    """Whether ``rock admin stop --remove-sandboxes`` asked this admin process to remove its
    sandboxes as it closes (the mark names its pid); the mark is taken away either way."""
    mark = _removal_mark(settings)
    try:
        asked = mark.read_text().strip() == str(os.getpid())
    except OSError:
        return False
    with contextlib.suppress(OSError):
        mark.unlink()
    return asked


def sandboxes_held(status: AdminStatus | None) -> int | None:
    """How many sandboxes of a running admin hold a container (``None``: it did not say)."""
    if status is None or status.sandboxes is None:
        return None
    return sum(int(status.sandboxes.get(state, 0)) for state in HOLDING_STATES)


def stop(
    settings: AdminSettings, *, timeout: float = 30.0, remove_sandboxes: bool = False
) -> int | None:
    """Stop the running admin gracefully (SIGTERM; SIGKILL after ``timeout`` seconds).

    Sandboxes keep running (the next admin on the same store takes them back), unless
    ``remove_sandboxes``: then the admin stops and removes them before it exits (an admin
    killed at ``timeout`` leaves the rest running). Returns the pid that was stopped, or
    ``None`` if none ran.
    """
    data = read_pid_file(settings)
    if data is None:
        return None
    pid = int(data["pid"])
    start_time = str(data.get("proc_start", ""))
    if remove_sandboxes:
        _removal_mark(settings).write_text(str(pid))
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return pid
    deadline = time.monotonic() + timeout
    while process_alive(pid, start_time):
        if time.monotonic() > deadline:
            log.warning("rock admin (pid %s) did not stop within %gs; killing it", pid, timeout)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    # A killed server could not remove its own pid file.
    with contextlib.suppress(OSError, ValueError):
        if json.loads(settings.pid_file.read_text()).get("pid") == pid:
            settings.pid_file.unlink()
    with contextlib.suppress(OSError):
        _removal_mark(settings).unlink()  # a killed admin did not take it
    return pid


def _admin_status(url: str) -> tuple[dict[str, Any] | None, str | None]:
    """The admin's ``GET /admin/status`` JSON, or ``None`` and why it did not answer."""
    # With API keys configured, it needs one: the operator's, from ROCK_API_KEY.
    import httpx

    key = os.environ.get("ROCK_API_KEY")
    headers = {"X-API-Key": key} if key else {}
    try:
        response = httpx.get(f"{url}/admin/status", timeout=5.0, headers=headers)
    except httpx.HTTPError as exc:
        return None, f"the server did not answer /admin/status ({exc or type(exc).__name__})"
    if response.status_code in (401, 403):
        if key:
            return None, "ROCK_API_KEY is not a key of this admin (or not an operator's)"
        return None, "the admin has API keys: set ROCK_API_KEY to an operator's key to see them"
    try:
        response.raise_for_status()
        data = response.json()
    except (httpx.HTTPError, ValueError):
        return None, f"/admin/status answered HTTP {response.status_code}"
    return (data, None) if isinstance(data, dict) else (None, "/admin/status answered no object")


def status(settings: AdminSettings) -> AdminStatus | None:
    """The running admin's address, pid, sandboxes by state and warm pools; ``None`` when none runs."""
    data = read_pid_file(settings)
    if data is None:
        return None
    answer, unanswered = _admin_status(str(data["url"]))
    pools = None
    if answer is not None:
        pools = {
            str(p.get("key")): {
                "image": p.get("image"),
                "ready": p.get("ready"),
                "size": p.get("size"),
            }
            for p in answer.get("warm_pools") or []
        }
    return AdminStatus(
        pid=int(data["pid"]),
        url=str(data["url"]),
        log_file=data.get("log_file", str(settings.log_file)),
        store_path=data.get("store_path"),
        started_at=float(data.get("started_at", 0.0)),
        sandboxes=dict(answer.get("sandboxes") or {}) if answer is not None else None,
        warm_pools=pools,
        tenants=dict(answer.get("tenants") or {}) if answer is not None else None,
        unanswered=unanswered,
        process=dict(answer.get("process") or {}) if answer is not None else None,
    )
