"""``rock envhub register|list|get|delete``: EnvHub from the command line.

With ``--base-url`` (default ``$ROCK_ENVHUB_BASE_URL``, else ``$ROCK_BASE_URL``) the commands
call that server's EnvHub API (rock's admin, or ROCK's EnvHub server); without one they act on
the local database the embedded engine uses (``$ROCK_ENVHUB_DB_URL``, else
``~/.rock/rock_envs.db``).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from rock_core.hookspecs import LOCAL_ADMIN_URL

__all__ = ["envhub"]


def _url(base_url: str | None) -> str | None:
    """The server the command talks to: the one named, else the admin `rock admin start` runs
    here (as `rock sandbox` finds it), else none (the local database)."""
    named = base_url or os.environ.get("ROCK_ENVHUB_BASE_URL") or os.environ.get("ROCK_BASE_URL")
    if named:
        return named
    context = click.get_current_context(silent=True)
    finder = context.find_root().meta.get(LOCAL_ADMIN_URL) if context is not None else None
    return finder() if callable(finder) else None


def _remote(base_url: str, path: str, body: dict[str, Any]) -> Any:
    import httpx

    headers = {}
    key = os.environ.get("ROCK_API_KEY")
    if key:
        headers["X-API-Key"] = key
    try:
        response = httpx.post(
            base_url.rstrip("/") + path, json=body, headers=headers, timeout=60, trust_env=False
        )
    except httpx.HTTPError as exc:
        raise click.ClickException(f"EnvHub at {base_url} is unreachable: {exc}") from None
    try:
        answer = response.json()
    except ValueError:
        answer = response.text
    if response.status_code == 401:
        raise click.ClickException(
            f"{base_url} needs an API key: set ROCK_API_KEY"
            if not key
            else f"{base_url} does not know the key in ROCK_API_KEY"
        )
    if response.status_code != 200:
        detail = answer.get("detail") if isinstance(answer, dict) else answer
        if detail is None and isinstance(answer, dict):
            detail = answer.get("message") or answer.get("error") or answer
        raise click.ClickException(f"{path} answered HTTP {response.status_code}: {detail}")
    return answer


def _local() -> Any:
    from rock_gem.envhub import EnvHub, database_path

    return EnvHub(database_path())


def _emit(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


_base_url = click.option(
    "--base-url",
    default=None,
    help="The EnvHub server [default: $ROCK_ENVHUB_BASE_URL, else $ROCK_BASE_URL, else the local database].",
)


@click.group()
def envhub() -> None:
    """EnvHub: environment names → image and defaults (ROCK's EnvHub API)."""


@envhub.command()
@click.argument("env_name")
@click.argument("image")
@click.option("--owner", default="", help="Who owns the env.")
@click.option("--description", default="", help="One line about it.")
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable).")
@click.option(
    "--gem-id", default=None, help="The GEM id rock.make(ENV_NAME) makes [default: ENV_NAME]."
)
@click.option(
    "--extra-spec", default=None, help='extra_spec as JSON, e.g. \'{"kwargs": {"max_turns": 5}}\'.'
)
@_base_url
def register(
    env_name: str,
    image: str,
    owner: str,
    description: str,
    tags: tuple[str, ...],
    gem_id: str | None,
    extra_spec: str | None,
    base_url: str | None,
) -> None:
    """Register ENV_NAME (or update it) with its IMAGE."""
    from rock_core.errors import RockError

    spec: dict[str, Any] | None = None
    if extra_spec is not None:
        try:
            spec = json.loads(extra_spec)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--extra-spec") from None
        if not isinstance(spec, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--extra-spec")
    if gem_id is not None:
        spec = {**(spec or {}), "env_id": gem_id}
    body = {
        "env_name": env_name,
        "image": image,
        "owner": owner,
        "description": description,
        "tags": list(tags),
        "extra_spec": spec,
    }
    url = _url(base_url)
    if url:
        _emit(_remote(url, "/env/register", body))
        return
    try:
        _emit(
            _local()
            .register(
                env_name, image, owner=owner, description=description, tags=tags, extra_spec=spec
            )
            .to_json()
        )
    except RockError as exc:
        raise click.ClickException(exc.message) from None


@envhub.command(name="list")
@click.option("--owner", default=None, help="Only this owner's envs.")
@click.option("--tag", "tags", multiple=True, help="Only envs with any of these tags (repeatable).")
@_base_url
def list_envs(owner: str | None, tags: tuple[str, ...], base_url: str | None) -> None:
    """List envs, by owner and tags."""
    url = _url(base_url)
    if url:
        _emit(_remote(url, "/env/list", {"owner": owner, "tags": list(tags) or None})["envs"])
        return
    _emit([info.to_json() for info in _local().list(owner, tags or None, everyone=True)])


@envhub.command()
@click.argument("env_name")
@_base_url
def get(env_name: str, base_url: str | None) -> None:
    """Show ENV_NAME."""
    from rock_core.errors import RockError

    url = _url(base_url)
    if url:
        _emit(_remote(url, "/env/get", {"env_name": env_name}))
        return
    try:
        _emit(_local().get(env_name).to_json())
    except RockError as exc:
        raise click.ClickException(exc.message) from None


@envhub.command()
@click.argument("env_name")
@_base_url
def delete(env_name: str, base_url: str | None) -> None:
    """Delete ENV_NAME."""
    url = _url(base_url)
    if url:
        _remote(url, "/env/delete", {"env_name": env_name})
    elif not _local().delete(env_name):
        raise click.ClickException(f"env {env_name!r} is not registered in EnvHub")
    click.echo(f"deleted {env_name}", err=True)
    sys.stdout.flush()
