"""GEM environments in sandboxes: :class:`GemProvider` places envs, :class:`GemEnv` drives one.

An env runs inside a sandbox, in a process of its own that the sandbox's rocklet forked for it
(:mod:`rock_core.rocklet.envs`). Several envs share a sandbox, up to ``envs_per_sandbox``, so
a sandbox's start is paid once for many envs; the sandbox is stopped when its last env closes
(or its last env's process dies).

An env sandbox hosts the envs of one tenant only (the admin's API key that made them; embedded
and on an admin without keys, the engine's owner): a ``code:*`` env runs the model's code as
root in its sandbox, so envs that share a sandbox share everything GEM's rewards come from. The
sandbox is the tenant's own, started with its tenant in ``metadata["rock.tenant"]`` as the
admin's start route does, so the admin's tenancy rules and counts see it.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from rock_core.actions import SandboxStartRequest
from rock_core.envs import EnvFailed, Environment, EnvProvider
from rock_core.errors import InvalidParameter, RockError, RockletUnreachable, SandboxNotFound
from rock_core.models import NonBlankStr, PositiveFloat, SizeStr
from rock_core.tenancy import Quota
from rock_gem.channel import RockletChannel
from rock_gem.options import GemOptions

if TYPE_CHECKING:
    from rock_core.engine.manager import SandboxManager

__all__ = ["DEFAULT_IMAGE", "GemEnv", "GemProvider", "provider_for"]

#: The env image when neither ``[plugins.gem] image`` nor ``ROCK_ENVHUB_DEFAULT_DOCKER_IMAGE``
#: names one, as in ROCK. It has no GEM: each new env sandbox gets GEM's runtime uploaded
#: (:mod:`rock_gem.runtime`, about a second); ``rock-gem/python:3.11``
#: (``scripts/ensure-gem-image.sh``) has it built in.
DEFAULT_IMAGE = "python:3.11"
#: ROCK's variable for the image of env sandboxes.
IMAGE_ENV = "ROCK_ENVHUB_DEFAULT_DOCKER_IMAGE"
#: Where GEM's runtime is unpacked in a sandbox whose image has no GEM.
RUNTIME_DIR = "/tmp/rock-gem-runtime"
#: Metadata key marking the env sandboxes this provider starts.
ENV_SANDBOX_TAG = "rock.gem"
#: Metadata key of a sandbox's tenant: the admin's (``rock.admin.auth.TENANT_METADATA_KEY``).
TENANT_METADATA_KEY = "rock.tenant"

_PROVIDERS: weakref.WeakKeyDictionary[Any, GemProvider] = weakref.WeakKeyDictionary()


def default_image(configured: str | None = None) -> str:
    """The env image: ``configured``, else ``$ROCK_ENVHUB_DEFAULT_DOCKER_IMAGE``, else :data:`DEFAULT_IMAGE`."""
    return configured or os.environ.get(IMAGE_ENV) or DEFAULT_IMAGE


def provider_for(engine: Any) -> GemProvider | None:
    """The GEM provider an engine built, or ``None`` before its first GEM env."""
    return _PROVIDERS.get(engine)


@attrs.define(eq=False)
class _Host:
    """A sandbox that hosts envs of one tenant (or is being started to)."""

    image: str
    #: Whose envs it hosts: an admin's tenant, or ``None`` for the engine's owner.
    tenant: str | None = None
    #: What the tenant may hold at once, as the make that starts the sandbox was given it.
    quota: Quota | None = None
    admit: Callable[[Any], Any] | None = None  # the admin's admission of the key's starts
    slots: int = 1  # envs placed on it or being placed
    waiting: int = 0  # makes waiting for its start (the starter's not counted)
    sandbox_id: str | None = None
    ready: anyio.Event = attrs.field(factory=anyio.Event)
    error: BaseException | None = None
    channel: RockletChannel | None = None
    channel_key: tuple[Any, ...] | None = None
    #: Where the env worker finds GEM when the image has none: the uploaded runtime.
    pythonpath: str | None = None

    def worker_args(self, options: GemOptions | None = None) -> dict[str, Any]:
        """What ``/env/make`` (given ``options``: its ``share``) and ``/env/list`` need."""
        share = {"share": options.shared_processes} if options else {}
        return {"pythonpath": self.pythonpath, **share} if self.pythonpath else share


def unknown_env(env_id: str, known: frozenset[str] | set[str]) -> EnvFailed:
    """The error of an id GEM has not registered, with the closest ids registered."""
    import difflib

    ids = sorted(known)
    close = difflib.get_close_matches(env_id, ids, n=5, cutoff=0.6)
    if not close:
        close = [i for i in ids if i.startswith(env_id) or env_id.lower() in i.lower()][:5]
    hint = f"; close matches: {', '.join(close)}" if close else ""
    return EnvFailed(
        f"env_id {env_id!r} is not a registered GEM environment{hint} ({len(ids)} ids registered)",
        kind="unknown_env",
        env_id=env_id,
    )


def _gem_missing(exc: EnvFailed) -> bool:
    return exc.kind == "missing_dependency" and "cannot import GEM" in exc.message


class GemProvider(EnvProvider):
    """Serves every env id GEM may register (``game:*``, ``rg:*``, ``math:*``, a user's own).

    Built by the engine as ``GemProvider(engine, **table)``, the table being ``[plugins.gem]``
    (or ``ROCK_PLUGIN_GEM_<KEY>``), read as :class:`~rock_gem.options.GemOptions` (each key is
    described there: ``image``, ``envs_per_sandbox``, ``memory``, ``cpus``, ``timeout``,
    ``start_timeout``, ``warm_sandboxes``, ``envhub_db``, ``runtime_dir``). A name registered in EnvHub is made
    in its image, as the GEM id and constructor arguments its ``extra_spec`` says.

    :raises InvalidParameter: a bad or unknown option, named ``plugins.gem.<key>`` with its value.
    """

    name = "gem"

    def __init__(self, engine: SandboxManager, **options: Any) -> None:
        read = GemOptions.from_table(options)
        self.engine = engine
        self.options = read
        self.image = default_image(read.image)
        self.envhub_db = read.envhub_db
        self.envs_per_sandbox: int = read.envs_per_sandbox
        self.memory: str = read.memory
        self.cpus: float = read.cpus
        self.timeout: float = read.timeout
        self.start_timeout: float = read.start_timeout
        self.warm_sandboxes: int = read.warm_sandboxes
        self._hosts: list[_Host] = []
        self._envs: dict[str, GemEnv] = {}
        self._closed_handles: dict[str, str | None] = {}  # handle -> the tenant that made it
        self._lock = anyio.Lock()
        self._warm_set = False
        self._swept = False
        # The ids GEM registers in each image, learnt from its first sandbox. Kept per tenant
        # and image: a sandbox's answers are its tenant's to forge, never another's to trust.
        self._known_ids: dict[tuple[str | None, str], frozenset[str]] = {}
        self._needs_runtime: dict[tuple[str | None, str], bool] = {}
        self._python: dict[tuple[str | None, str], str | None] = {}
        _PROVIDERS[engine] = self

    def accepts(self, env_id: str) -> bool:
        """Any non-blank id: GEM's registry is open (ROLL and users register their own)."""
        return isinstance(env_id, str) and bool(env_id.strip())

    def start_request(
        self, image: str | None = None, tenant: str | None = None
    ) -> SandboxStartRequest:
        """The start request of an env sandbox of ``tenant`` (``None``: the engine's owner; also
        the warm pool's kind, whose members any tenant may claim: the metadata is not part of it)."""
        metadata = {ENV_SANDBOX_TAG: "env"}
        if tenant is not None:
            metadata[TENANT_METADATA_KEY] = tenant
        return SandboxStartRequest(
            image=NonBlankStr(image or self.image),
            memory=SizeStr(self.memory),
            cpus=PositiveFloat(self.cpus),
            metadata=metadata,
        )

    # -- envs --------------------------------------------------------------------------------

    def get(self, handle: str, *, tenant: str | None = None) -> GemEnv:
        """The live env of a handle (what ROCK's API calls ``sandbox_id``) that ``tenant`` made.

        :raises EnvFailed: kind ``no_env``: never made here, closed, or another tenant's (which
            is answered exactly as one never made).
        """
        env = self._envs.get(handle)
        if env is None or env.tenant != tenant:
            closed = self.is_closed(handle, tenant=tenant)
            why = "it was closed" if closed else "no env was made with this id"
            raise EnvFailed(f"sandbox_id {handle!r}: no GEM env ({why})", kind="no_env")
        return env

    def is_closed(self, handle: str, *, tenant: str | None = None) -> bool:
        """Whether ``handle`` named an env of ``tenant`` that is closed now."""
        return handle in self._closed_handles and self._closed_handles[handle] == tenant

    async def make(
        self,
        env_id: str,
        *,
        image: str | None = None,
        tenant: str | None = None,
        quota: Quota | None = None,
        admit: Callable[[Any], Any] | None = None,
        **kwargs: Any,
    ) -> GemEnv:
        """Make ``env_id`` in a sandbox of ``tenant`` with room (started when none has);
        ``kwargs`` go to GEM's constructor (``max_turns=...``); ``image`` overrides the provider's.

        ``tenant`` is the admin's tenant asking (``None``: the engine's owner, embedded or on an
        admin without keys): its EnvHub entries resolve ``env_id``, its sandboxes host the env; a
        sandbox started for it counts against its ``quota`` and passes ``admit``, the admin's
        admission of the key's starts (``RouteRequest.admit``: default egress, what it may ask).

        :raises EnvFailed: the id is unknown (the message lists close matches), a dependency or
            offline data is missing, the image cannot run GEM.
        """
        if not self.accepts(env_id):
            raise InvalidParameter(
                f"env_id: expected a non-blank string, got {env_id!r}", field="env_id", value=env_id
            )
        env_id, image, kwargs = self._resolve(env_id, image, kwargs, tenant)
        image = image or self.image
        known = self._known_ids.get((tenant, image))
        if known is not None and env_id not in known:
            raise unknown_env(env_id, known)  # no sandbox is started for an id GEM does not have
        host = await self._place(_Host(image, tenant, quota, admit))
        assert host.sandbox_id is not None
        try:
            channel = self.channel(host, "env/make")
            async with self.engine.call(host.sandbox_id):
                made = await channel.post(
                    "make",
                    {"env_id": env_id, "kwargs": kwargs, **host.worker_args(self.options)},
                    self.timeout,
                )
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await self._release(host)
            if isinstance(exc, EnvFailed):
                exc.env_id = env_id
            raise
        env = GemEnv(self, host, made["env"], env_id, pid=made.get("pid"))
        env.tenant = tenant
        self._envs[env.handle] = env
        return env

    def channel(self, host: _Host, attempted: str) -> RockletChannel:
        """The channel to ``host``'s rocklet (the engine says whether the sandbox runs, and where)."""
        assert host.sandbox_id is not None
        client = self.engine.rocklet(host.sandbox_id, attempted)
        key = (client.host, client.port, client.token)
        if host.channel is None or host.channel_key != key:
            host.channel = RockletChannel.of(client, host.sandbox_id)
            host.channel_key = key
        return host.channel

    def _resolve(
        self, env_id: str, image: str | None, kwargs: dict[str, Any], tenant: str | None
    ) -> tuple[str, str | None, dict[str, Any]]:
        """An EnvHub name → its GEM id, image and default constructor arguments: ``tenant``'s own
        entry, else the operator's (shared) one; never another tenant's."""
        from rock_gem.envhub import envhub_for

        hub = envhub_for(self.engine, create=False)
        info = hub.find(env_id, tenant=tenant) if hub is not None else None
        if info is None:
            return env_id, image, kwargs
        spec = info.extra_spec or {}
        gem_id = spec.get("env_id", env_id)
        defaults = spec.get("kwargs") or {}
        if not isinstance(gem_id, str) or not isinstance(defaults, dict):
            raise EnvFailed(
                f'EnvHub env {env_id!r}: extra_spec must be {{"env_id": str, "kwargs": object}}, got {spec!r}',
                kind="bad_request",
                env_id=env_id,
            )
        return gem_id, image or info.image, {**defaults, **kwargs}

    async def _place(self, new: _Host) -> _Host:
        """A slot on a sandbox of ``new``'s tenant and image with room; the first make that finds
        none starts ``new``, and makes that come meanwhile join it."""
        async with self._lock:
            if not self._swept:
                self._swept = True
                await self._stop_leftovers()
            if self.warm_sandboxes and not self._warm_set:
                self._warm_set = True
                await self.engine.set_warm_pool(self.start_request(), self.warm_sandboxes)
            for host in self._hosts:
                if (
                    host.tenant == new.tenant
                    and host.image == new.image
                    and host.slots < self.envs_per_sandbox
                    and host.error is None
                ):
                    host.slots += 1
                    break
            else:
                host = new
                self._hosts.append(host)
        if host is new:
            await self._start_host(host)  # on failure or cancellation it leaves the host's list
        else:
            host.waiting += 1
            try:
                await host.ready.wait()
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self._release(host)  # the starter still holds its slot: no stop here
                raise
            finally:
                host.waiting -= 1
        if host.error is not None:
            raise host.error
        return host

    async def _stop_leftovers(self) -> None:
        """Stop env sandboxes this engine holds that no provider of this process placed: an
        admin's, recovered after its restart, whose envs died with the old process."""
        from rock_core.states import State

        # Only this engine's own (a record store may be shared by several processes).
        for record in self.engine.list_records(
            states=[State.PENDING, State.RUNNING], filters={"owner": self.engine.owner}
        ):
            if record.spec.metadata.get(ENV_SANDBOX_TAG) == "env":
                await self._stop(record.sandbox_id)

    async def _start_host(self, host: _Host) -> None:
        try:
            with anyio.fail_after(self.start_timeout):
                request = self.start_request(host.image, None if host.admit else host.tenant)
                started = await self.engine.start_async(
                    host.admit(request) if host.admit else request,  # admit adds the tenant
                    tenant=host.tenant,
                    quota=host.quota,
                )
                assert started.sandbox_id is not None
                host.sandbox_id = started.sandbox_id
                await self.engine.wait_until_running(started.sandbox_id)
            await self._learn_ids(host)
        except BaseException as exc:
            host.error = (
                exc
                if isinstance(exc, Exception)
                else EnvFailed("the env sandbox's start was cancelled", kind="runtime")
            )
            if isinstance(exc, TimeoutError):
                host.error = EnvFailed(
                    f"the env sandbox (image {host.image}) did not start within {self.start_timeout:g}s",
                    kind="runtime",
                )
            async with self._lock:
                if host in self._hosts:
                    self._hosts.remove(host)
            if host.sandbox_id is not None:
                with anyio.CancelScope(shield=True):
                    await self._stop(host.sandbox_id)
            host.ready.set()
            if not isinstance(exc, Exception):
                raise
            return
        host.ready.set()

    async def _learn_ids(self, host: _Host) -> None:
        """Ask the new sandbox for GEM's ids; an image without GEM gets the runtime uploaded.
        An image seen before is not asked again (its sandboxes get the runtime if it needed it)."""
        assert host.sandbox_id is not None
        kind = (host.tenant, host.image)
        if kind in self._needs_runtime:
            if self._needs_runtime[kind]:
                await self._install_runtime(host, self._python[kind])
            return
        try:
            answer = await self.channel(host, "env/list").post("list", {}, self.timeout)
        except EnvFailed as exc:
            if not _gem_missing(exc):
                return  # GEM is there but failed: the make says why
            python = getattr(exc, "details", {}).get("python")
            await self._install_runtime(host, python)
            answer = await self.channel(host, "env/list").post(
                "list", host.worker_args(), self.timeout
            )
            self._python[kind] = python
        self._needs_runtime[kind] = host.pythonpath is not None
        self._known_ids[kind] = frozenset(answer["env_id"])

    async def _install_runtime(self, host: _Host, python: str | None) -> None:
        """Upload GEM's runtime (:mod:`rock_gem.runtime`) into ``host``'s sandbox, unpacked at
        :data:`RUNTIME_DIR`, for an image whose Python has no GEM."""
        from rock_gem.runtime import runtime_zip

        assert host.sandbox_id is not None
        if python is None:
            raise EnvFailed(
                f"image {host.image}: GEM is not importable and its Python version is unknown",
                kind="missing_dependency",
            )
        try:
            path = await anyio.to_thread.run_sync(
                functools.partial(
                    runtime_zip, python, fetch=False, directory=self.options.runtime_dir
                )
            )
        except (ValueError, RuntimeError) as exc:
            raise EnvFailed(
                f"image {host.image} has no GEM, and rock cannot add it: {exc}",
                kind="missing_dependency",
            ) from None
        client = self.engine.rocklet(host.sandbox_id, "upload")
        async with self.engine.call(host.sandbox_id):
            await client.upload(RUNTIME_DIR, path, unzip=True)
        host.pythonpath = RUNTIME_DIR

    async def _release(self, host: _Host) -> None:
        """One env fewer on ``host``; stop its sandbox when it hosts none."""
        async with self._lock:
            host.slots -= 1
            empty = host.slots <= 0 and host in self._hosts
            if empty:
                self._hosts.remove(host)
        if empty and host.sandbox_id is not None:
            if host.channel is not None:
                await host.channel.aclose()
            await self._stop(host.sandbox_id)

    async def _stop(self, sandbox_id: str) -> None:
        try:
            await self.engine.stop(sandbox_id, reason="gem: no env left")
        except RockError:
            pass  # already gone

    async def forget(self, env: GemEnv, *, end_process: bool) -> bool:
        """Drop ``env`` (its close, or its process's death); ``False`` when it was gone already."""
        if self._envs.get(env.handle) is not env:
            return False
        del self._envs[env.handle]
        self._closed_handles[env.handle] = env.tenant
        with anyio.CancelScope(shield=True):
            if end_process and env.host.sandbox_id is not None:
                try:
                    await self.channel(env.host, "env/close").post("close", {"env": env.key}, 30.0)
                except RockError:
                    pass  # the sandbox or the process is gone: nothing left to end
            await self._release(env.host)
        return True

    async def batch(self, calls: Sequence[tuple[GemEnv, str, Mapping[str, Any]]]) -> list[Any]:
        """Run ``(env, op, args)`` calls (op ``reset`` or ``step``), one rocklet request per sandbox,
        all sandboxes at once. Each result is the call's answer (as the rocklet gives it) or
        its :class:`EnvFailed`."""
        results: list[Any] = [None] * len(calls)
        by_host: dict[str, list[int]] = {}
        for i, (env, _op, _args) in enumerate(calls):
            if env.closed:
                results[i] = env.closed_error()
                continue
            assert env.host.sandbox_id is not None
            by_host.setdefault(env.host.sandbox_id, []).append(i)

        async def run(sandbox_id: str, indexes: list[int]) -> None:
            body = [{"env": calls[i][0].key, "op": calls[i][1], **calls[i][2]} for i in indexes]
            try:
                channel = self.channel(calls[indexes[0]][0].host, "env/batch")
                async with self.engine.call(sandbox_id):
                    answer = await channel.post("batch", {"calls": body}, self.timeout)
                items = answer["results"]
            except (SandboxNotFound, RockletUnreachable) as exc:
                gone = f"the env's sandbox {sandbox_id} is gone: {exc}"
                items = [{"error": {"kind": "env_died", "message": gone}}] * len(indexes)
            for i, item in zip(indexes, items):
                env = calls[i][0]
                if "ok" in item:
                    results[i] = item["ok"]
                    continue
                err = item.get("error") or {}
                results[i] = env.failure(
                    str(err.get("kind", "env_error")), str(err.get("message", ""))
                )
                if results[i].kind in ("env_died", "timeout", "no_env"):
                    await self.forget(env, end_process=False)

        if len(by_host) == 1:  # one sandbox (a vector env's usual case): no task group
            await run(*next(iter(by_host.items())))
            return results
        async with anyio.create_task_group() as tg:
            for sandbox_id, indexes in by_host.items():
                tg.start_soon(run, sandbox_id, indexes)
        return results

    async def list_ids(self, handle: str, *, tenant: str | None = None) -> list[str]:
        """The ids GEM registered in the process of env ``handle`` (``tenant``'s)."""
        return (await self.listing(handle, tenant=tenant))["env_id"]

    async def listing(self, handle: str, *, tenant: str | None = None) -> dict[str, list[str]]:
        """``env_id``: the ids GEM registered in the process of env ``handle`` (``tenant``'s);
        ``busy``: the handles of the envs of its sandbox whose process is serving a request (the
        rocklet's word, kept only for envs this provider made there)."""
        env = self.get(handle, tenant=tenant)
        answer = await env.call("list", {})
        mine = {e.key: e.handle for e in self._envs.values() if e.host is env.host}
        said = answer.get("busy")
        busy = (
            {mine[k] for k in said if isinstance(k, str) and k in mine}
            if isinstance(said, list)
            else set()
        )
        return {"env_id": list(answer["env_id"]), "busy": sorted(busy)}

    def sandboxes(self, *, tenant: str | None = None) -> list[dict[str, Any]]:
        """``tenant``'s env sandboxes, started or starting: ``slots`` (envs placed or being
        placed), ``waiting`` (makes waiting for the start), ``ready``."""
        return [
            {"sandbox_id": h.sandbox_id, "image": h.image, "slots": h.slots}
            | {"waiting": h.waiting, "ready": h.ready.is_set()}
            for h in self._hosts
            if h.tenant == tenant
        ]

    def envs(self) -> list[GemEnv]:
        """The live envs."""
        return list(self._envs.values())


class GemEnv(Environment):
    """One GEM env in a sandbox. Made by :meth:`GemProvider.make`.

    :attr handle: its id on ROCK's wire (``sandbox_id``): ``<sandbox id>.<env key>``.
    """

    def __init__(
        self, provider: GemProvider, host: _Host, key: str, env_id: str, pid: int | None = None
    ) -> None:
        assert host.sandbox_id is not None
        #: The env's process id inside its sandbox.
        self.pid = pid
        self.provider = provider
        self.host = host
        self.key = key
        self.env_id = env_id
        self.handle = f"{host.sandbox_id}.{key}"
        self.closed = False
        #: The admin's tenant (API key) that made the env (``None``: the engine's owner); only
        #: it may drive the env there.
        self.tenant: str | None = host.tenant

    def __repr__(self) -> str:
        return f"<GemEnv {self.env_id} {self.handle}{' closed' if self.closed else ''}>"

    @property
    def sandbox_id(self) -> str:
        """The sandbox the env runs in."""
        assert self.host.sandbox_id is not None
        return self.host.sandbox_id

    def failure(self, kind: str, message: str) -> EnvFailed:
        """An :class:`EnvFailed` of this env (``kind``), its message naming the env."""
        if self.env_id not in message:
            message = f"env {self.env_id} ({self.handle}): {message}"
        return EnvFailed(message, kind=kind, env_id=self.env_id, sandbox_id=self.sandbox_id)

    def closed_error(self) -> EnvFailed:
        """The error of a call after close."""
        return self.failure("no_env", "the env is closed")

    async def call(self, op: str, body: Mapping[str, Any]) -> Any:
        """``/env/{op}`` of this env; a dead process or sandbox drops the env (and the sandbox
        when it was its last)."""
        if self.closed:
            raise self.closed_error()
        try:
            channel = self.provider.channel(self.host, f"env/{op}")
            async with self.provider.engine.call(self.sandbox_id):
                return await channel.post(op, {"env": self.key, **body}, self.provider.timeout)
        except EnvFailed as exc:
            if exc.kind in ("env_died", "timeout", "no_env"):
                await self._lost()
            raise self.failure(exc.kind, exc.message) from None
        except (SandboxNotFound, RockletUnreachable) as exc:
            await self._lost()
            raise self.failure(
                "env_died", f"the env's sandbox {self.sandbox_id} is gone: {exc}"
            ) from exc

    async def _lost(self) -> None:
        self.closed = True
        await self.provider.forget(self, end_process=False)

    async def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        """Start an episode (``seed``: GEM seeds the env's process-global generators)."""
        answer = await self.call("reset", {"seed": seed})
        return answer["observation"], answer["info"]

    async def step(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Apply ``action``. After the episode ended, :class:`EnvFailed` kind ``episode_ended``."""
        a = await self.call("step", {"action": action})
        return a["observation"], a["reward"], a["terminated"], a["truncated"], a["info"]

    async def close(self) -> None:
        """End the env's process; stop its sandbox when it was the sandbox's last env. Idempotent."""
        if self.closed:
            return
        self.closed = True
        await self.provider.forget(self, end_process=True)
