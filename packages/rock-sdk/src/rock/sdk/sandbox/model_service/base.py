"""ROCK's ``rock.sdk.sandbox.model_service.base``: the model service of one sandbox, from the
trainer's side: install it (offline), start and stop it, watch the agent, answer its calls.

Install ships rock's model service into the sandbox as one zipapp (standard library only, run by
the image's ``python3``; :mod:`rock.sdk.model.zipapp`) with a ``rock`` command beside it, so
ROCK's own commands (``rock model-service start --type local`` ...) work there with no network
and nothing to ``pip install``. ``install_cmd``, when set, runs after (ROCK: ``pip install
rl_rock[model-service]``, the way it gets the service).

The trainer's side, two ways:

- ROCK's :meth:`ModelService.anti_call_llm` (``index`` 0: wait for the first call; else answer
  call ``index`` and wait for the next), which returns the request's JSON text or
  ``"SESSION_END"``;
- rock's: :meth:`ModelService.next_call` (a :class:`ModelCall`), :meth:`ModelCall.answer`,
  :meth:`ModelService.end_session`, :meth:`ModelService.trajectory`; and for many sandboxes at
  once one :class:`~rock.sdk.sandbox.model_service.hub.ModelCallHub`.

Both reach the service over HTTP through :meth:`Sandbox.get_url` (embedded: a local port
through the sandbox's rocklet; remote: the admin's proxy), each wait one held request (the
service answers as soon as the call is made), not a poll.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import tempfile
from collections.abc import Callable
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, Any

import attrs
import httpx

from rock.sdk.sandbox.model_service._channel import Channel
from rock_core.actions import Command

if TYPE_CHECKING:
    from rock.sdk.sandbox.client import Sandbox

__all__ = ["ModelCall", "ModelService", "ModelServiceConfig", "ModelServiceError"]

#: The sandbox's folder for rock's model service: the zipapp and ``bin/rock``.
INSTALL_DIR = "/tmp/rock-model-service"


class ModelServiceError(RuntimeError):
    """A step of the model service failed: ``step`` names it, ``output`` is what it printed."""

    def __init__(self, step: str, message: str, output: str = "") -> None:
        text = f"model service {step} failed: {message}"
        if output.strip():
            text += f"\n--- output of {step} ---\n{output.strip()[-4000:]}"
        super().__init__(text)
        self.step = step
        self.output = output


@attrs.define(kw_only=True)
class ModelServiceConfig:
    """ROCK's ``ModelServiceConfig`` (the SDK's; the server's settings are
    :class:`rock.sdk.model.server.config.ModelServiceConfig`). rock's additions: ``port``,
    ``proxy_base_url``, ``retryable_status_codes``, ``request_timeout``, ``replay_file``
    (appended to the start command when set), ``install_dir``, ``data_dir``."""

    enabled: bool = False
    type: str = "local"
    install_cmd: str = ""
    install_timeout: int = 300
    start_cmd: str = "rock model-service start --type ${type}"
    stop_cmd: str = "rock model-service stop"
    config_ini_cmd: str = "mkdir -p ~/.rock && touch ~/.rock/config.ini"
    watch_agent_cmd: str = "rock model-service watch-agent --pid ${pid}"
    logging_path: str = "/data/logs"
    logging_file_name: str = "model_service.log"
    port: int = 8080
    proxy_base_url: str | None = None
    retryable_status_codes: str | None = None
    request_timeout: int | None = None
    replay_file: str | None = None
    install_dir: str = INSTALL_DIR
    data_dir: str = "/data/logs"
    #: ROCK's, accepted and unused: rock runs the service with the image's ``python3``, and its
    #: trainer's side needs no command in the sandbox.
    runtime_env_config: dict[str, Any] | None = None
    anti_call_llm_cmd: str | None = None
    anti_call_llm_cmd_file: str | None = None
    anti_call_llm_cmd_no_response: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ModelServiceConfig:
        """From a mapping (a YAML block); an unknown key is a :class:`ValueError` naming it."""
        data = dict(data or {})
        known = {f.name for f in attrs.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"model_service_config: unknown keys {unknown}")
        return cls(**data)


@attrs.frozen
class ModelCall:
    """One model call of an agent: ``request`` (the OpenAI-style body), or the episode's end
    (``session_end``, with ``reason``), or ``error`` (the service could not be reached)."""

    sandbox_id: str
    index: int
    request: dict[str, Any] | None = None
    request_text: str = ""
    session_end: bool = False
    reason: str | None = None
    error: str | None = None
    service: ModelService | None = attrs.field(default=None, repr=False, eq=False)

    async def answer(self, response: dict[str, Any] | str) -> None:
        """Answer the call with an OpenAI-shaped ChatCompletion (a dict or its JSON text)."""
        if self.service is None or self.session_end or self.error:
            raise ValueError(f"call {self.index} of {self.sandbox_id} cannot be answered: {self}")
        await self.service.answer(self.index, response)


_clients: dict[int, httpx.AsyncClient] = {}


def _client() -> httpx.AsyncClient:
    """One HTTP client per event loop, shared by every model service of the process."""
    loop = asyncio.get_running_loop()
    client = _clients.get(id(loop))
    if client is None or client.is_closed:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=2000)
        client = httpx.AsyncClient(trust_env=False, limits=limits, timeout=None)
        _clients[id(loop)] = client
    return client


class ModelService:
    """The model service of ``sandbox``, managed from the trainer (ROCK's class)."""

    def __init__(self, sandbox: Sandbox, config: ModelServiceConfig | None = None) -> None:
        self._sandbox = sandbox
        self.config = config or ModelServiceConfig(enabled=True)
        self.is_installed = False
        self.is_started = False
        self._base: str | None = None
        self._next_index = 1
        self._channel: Channel | None = None
        self._channel_lock = asyncio.Lock()
        self._arrived: dict[int, ModelCall] = {}
        self._end: ModelCall | None = None
        self._broken: str | None = None
        self._delivered = 0
        self._sink: Callable[[ModelCall], None] | None = None
        self._changed = asyncio.Event()

    @property
    def bin_dir(self) -> str:
        return f"{self.config.install_dir}/bin"

    # -- lifecycle -------------------------------------------------------------------------------

    async def _sh(self, step: str, script: str, timeout: float = 300) -> str:
        env_path = f"export PATH={shlex.quote(self.bin_dir)}:$PATH; "
        result = await self._sandbox.execute(
            Command(command=["bash", "-c", env_path + script], timeout=timeout)
        )
        output = (result.stdout or "") + (result.stderr or "")
        if result.exit_code != 0:
            raise ModelServiceError(step, f"exit code {result.exit_code}: {script}", output)
        return output

    async def install(self) -> None:
        """Ship the service into the sandbox: ``python3`` found, the zipapp uploaded, ``rock``
        written beside it (and linked into ``/usr/local/bin`` when no ``rock`` is there), ROCK's
        config file made, then ``install_cmd`` if set. A failed step raises
        :class:`ModelServiceError` naming it, with its output."""
        python = (await self._sh("install (find python3)", _FIND_PYTHON, 60)).strip()
        pyz = await asyncio.to_thread(_local_zipapp)
        target = f"{self.config.install_dir}/rock-model-service.pyz"
        uploaded = await self._sandbox.upload_by_path(pyz, target)
        if not uploaded.success:
            raise ModelServiceError("install (upload the zipapp)", uploaded.message)
        wrapper = f'#!/bin/sh\nexec {shlex.quote(python)} {shlex.quote(target)} "$@"\n'
        await self._sh(
            "install (write the rock command)",
            f"mkdir -p {shlex.quote(self.bin_dir)} && printf %s {shlex.quote(wrapper)} > "
            f"{shlex.quote(self.bin_dir)}/rock && chmod +x {shlex.quote(self.bin_dir)}/rock && "
            f"([ -e /usr/local/bin/rock ] || ln -s {shlex.quote(self.bin_dir)}/rock "
            "/usr/local/bin/rock 2>/dev/null || true)",
            60,
        )
        await self._sh("install (config_ini_cmd)", self.config.config_ini_cmd, 60)
        if self.config.install_cmd.strip():
            await self._sh(
                "install (install_cmd)", self.config.install_cmd, self.config.install_timeout
            )
        self.is_installed = True

    def _start_command(self) -> str:
        c = self.config
        cmd = Template(c.start_cmd).safe_substitute(type=c.type)
        extras: list[tuple[str, object]] = [("--port", c.port if c.port != 8080 else None)]
        extras += [("--proxy-base-url", c.proxy_base_url), ("--replay-file", c.replay_file)]
        extras += [("--retryable-status-codes", c.retryable_status_codes)]
        extras += [("--request-timeout", c.request_timeout)]
        for flag, value in extras:
            if value is not None and flag not in cmd:
                cmd += f" {flag} {shlex.quote(str(value))}"
        return cmd

    async def start(self) -> None:
        """Start the service (ROCK: stop, then start); :class:`RuntimeError` before install."""
        if not self.is_installed:
            raise RuntimeError(
                f"[{self._sandbox.sandbox_id}] Cannot start model service: ModelService has not "
                "been installed yet. Please call install() first."
            )
        c = self.config
        script = (
            f"export ROCK_LOGGING_PATH={shlex.quote(c.logging_path)} && "
            f"export ROCK_LOGGING_FILE_NAME={shlex.quote(c.logging_file_name)} && "
            f"export ROCK_MODEL_SERVICE_DATA_DIR={shlex.quote(c.data_dir)} && "
            f"{c.stop_cmd} && {self._start_command()}"
        )
        await self._reset_channel()
        await self._sh("start", script, 60)
        self.is_started = True

    async def stop(self) -> None:
        """Stop the service (skipped when it is not running)."""
        if not self.is_started:
            return
        await self._reset_channel()
        await self._sh("stop", self.config.stop_cmd, 60)
        self.is_started = False

    async def watch_agent(self, pid: str | int) -> None:
        """``SESSION_END`` once process ``pid`` of the sandbox ends (at once: the service waits
        on a pidfd, ROCK looks every 5 s)."""
        self._require_started("watch agent")
        cmd = Template(self.config.watch_agent_cmd).safe_substitute(pid=pid)
        if "--port" not in cmd and self.config.port != 8080:
            cmd += f" --port {self.config.port}"
        await self._sh("watch-agent", cmd, 60)

    def _require_started(self, what: str) -> None:
        if not self.is_started:
            raise RuntimeError(
                f"[{self._sandbox.sandbox_id}] Cannot {what}: ModelService is not started. "
                "Please call start() first."
            )

    # -- the trainer's side ------------------------------------------------------------------

    async def base_url(self) -> str:
        if self._base is None:
            self._base = (await self._sandbox.get_url(self.config.port)).rstrip("/")
        return self._base

    def _headers(self) -> dict[str, str]:
        headers = dict(getattr(self._sandbox.config, "extra_headers", None) or {})
        key = os.environ.get("ROCK_API_KEY")
        if key and not any(h.lower() in ("x-api-key", "authorization") for h in headers):
            headers["X-API-Key"] = key
        return headers

    async def _http(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        url = await self.base_url() + path
        answer = await _client().request(method, url, headers=self._headers(), **kwargs)
        if answer.status_code >= 400:
            raise ModelServiceError(
                path, f"the service answered {answer.status_code}: {answer.text[:500]}"
            )
        return answer

    async def poll_call(self, index: int, wait: float = 20.0) -> ModelCall | None:
        """Call ``index`` (or the session's end) if it comes within ``wait`` seconds, else
        ``None``: one request the service holds until then."""
        answer = await self._http(
            "GET", "/v1/rock/next", params={"index": index, "wait": wait}, timeout=wait + 30
        )
        if answer.status_code == 204:
            return None
        data = answer.json()
        sandbox_id = self._sandbox.sandbox_id or ""
        if data.get("session_end"):
            return ModelCall(sandbox_id, index, session_end=True, reason=data.get("reason"))
        return ModelCall(sandbox_id, index, data["request"], data["request_text"], service=self)

    # The channel: calls pushed to the trainer as they are made (see _channel.py).

    async def _ensure_channel(self) -> Channel:
        async with self._channel_lock:
            if self._channel is None or self._channel.closed:
                if self._end is not None:
                    raise ConnectionError(f"the session ended: {self._end.reason}")
                self._broken = None
                self._channel = await Channel.open(
                    self._sandbox, self.config.port, self._delivered + 1, self._deliver
                )
            return self._channel

    def _deliver(self, message: dict[str, Any]) -> None:
        sandbox_id = self._sandbox.sandbox_id or ""
        if "closed" in message:
            if self._end is not None:
                return
            self._broken = str(message["closed"])
            call = ModelCall(sandbox_id, self._delivered + 1, error=self._broken)
        elif message.get("session_end"):
            call = ModelCall(
                sandbox_id, int(message["index"]), session_end=True, reason=message.get("reason")
            )
            self._end = call
        else:
            text = message["request_text"]
            index = int(message["index"])
            call = ModelCall(sandbox_id, index, json.loads(text), text, service=self)
            self._delivered = index
        if self._sink is not None:
            self._sink(call)
        elif not call.error and not call.session_end:
            self._arrived[call.index] = call
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def listen(self, sink: Callable[[ModelCall], None]) -> None:
        """(rock) Hand every call from now on to ``sink`` (what :class:`ModelCallHub` does)."""
        self._sink = sink
        await self._ensure_channel()

    async def next_call(self, index: int | None = None, timeout: float | None = None) -> ModelCall:
        """The agent's next model call (or call ``index``), or the session's end, whichever
        comes first: pushed by the service the moment it is made. :class:`TimeoutError` after
        ``timeout`` seconds (``None``: no limit); :class:`ModelServiceError` if the channel to
        the service broke."""
        wanted = self._next_index if index is None else index
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        await self._ensure_channel()
        while True:
            call = self._arrived.pop(wanted, None)
            if call is not None:
                self._next_index = wanted + 1
                return call
            if self._end is not None and wanted >= self._end.index:
                return self._end
            if self._broken is not None:
                raise ModelServiceError("channel", self._broken)
            changed = self._changed
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                raise TimeoutError(f"no model call {wanted} within {timeout} s")
            try:
                await asyncio.wait_for(changed.wait(), left)
            except asyncio.TimeoutError:  # noqa: UP041 - distinct on Python 3.10
                raise TimeoutError(f"no model call {wanted} within {timeout} s") from None

    async def answer(self, index: int, response: dict[str, Any] | str) -> None:
        """Answer call ``index`` (an OpenAI-shaped response, a dict or its JSON text)."""
        payload = response if isinstance(response, str) else json.dumps(response)
        channel = self._channel
        if channel is not None and not channel.closed:
            await channel.send({"answer": index, "response": payload})
            return
        await self._http("POST", "/v1/rock/answer", json={"index": index, "response": payload})

    async def end_session(self, reason: str = "ended by the trainer") -> None:
        """End the episode: the agent's waiting call and any later one fail (``SESSION_END``)."""
        await self._http("POST", "/v1/rock/end", json={"reason": reason})

    async def _reset_channel(self) -> None:
        if self._channel is not None:
            await self._channel.aclose()
        self._channel = None
        self._arrived.clear()
        self._end = None
        self._broken = None
        self._delivered = 0
        self._next_index = 1

    async def trajectory(self) -> dict[str, Any]:
        """Every call so far: ``{"calls": [{index, request, response, status, start_time,
        end_time, response_time, usage ...}], "session_end", "reason", "agent_exit"}``."""
        return (await self._http("GET", "/v1/rock/trajectory")).json()

    async def anti_call_llm(
        self,
        index: int,
        response_payload: str | None = None,
        call_timeout: int = 600,
        check_interval: int = 3,
    ) -> str:
        """ROCK's core call: answer call ``index`` with ``response_payload`` (none for index 0),
        return the next call's request JSON text, or ``"SESSION_END"``.

        ``check_interval`` is accepted and unused: the wait is one held request, not a poll.
        """
        del check_interval
        self._require_started("execute anti-call LLM")
        if index < 0:
            raise ValueError("index must be greater than 0")
        if index == 0 and response_payload is not None:
            raise ValueError("last_response must be None when index is 0")
        if index > 0:
            if response_payload is None:
                raise ValueError("last_response must not be None when index is greater than 0")
            await self.answer(index, response_payload)
        try:
            call = await self.next_call(index + 1, timeout=call_timeout)
        except TimeoutError as exc:
            raise RuntimeError(f"Anti-call LLM command failed: {exc}") from None
        return "SESSION_END" if call.session_end else call.request_text


_FIND_PYTHON = (
    "p=$(command -v python3 || command -v python) || "
    "{ echo 'no python3 in the sandbox image: the model service needs one (3.9+)'; exit 127; }; "
    '"$p" -c "import sys; assert sys.version_info >= (3, 9), sys.version" && echo "$p"'
)


def _local_zipapp() -> Path:
    from rock.sdk.model.zipapp import build_zipapp, content_hash

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    cache = Path(base) / "rock"
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:
        cache = Path(tempfile.gettempdir())
    target = cache / f"rock-model-service-{content_hash()}.pyz"
    if not target.is_file():
        build_zipapp(target)
    return target
