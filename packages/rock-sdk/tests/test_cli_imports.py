"""The ``rock`` command imports only what the command that runs needs: its start-up is most of
what a person waits for in ``rock sandbox list`` (``rock bench admin`` times it).

Each case runs the command in a fresh interpreter and looks at ``sys.modules`` afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# The engine, the admin's web stack, Docker's client, the benches.
HEAVY = (
    "rock_core.engine.manager",
    "rock.sdk._drivers.embedded",
    "rock.admin.app",
    "rock.bench.admin",
    "starlette",
    "uvicorn",
    "prometheus_client",
    "docker",
)

_RUN = """
import json, sys
from rock.cli import main
try:
    main(sys.argv[1:], prog_name="rock")
except SystemExit:
    pass
json.dump(sorted(sys.modules), sys.stderr)
"""


def _modules_after(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", _RUN, *args], capture_output=True, text=True, timeout=120
    )
    return set(json.loads(done.stderr.splitlines()[-1]))


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return [name for name in names if name in modules]


@pytest.mark.parametrize(
    "args", [["sandbox", "list", "--json"], ["sandbox", "list"], ["sandbox", "status", "some-id"]]
)
def test_sandbox_commands_against_an_admin_load_no_engine(
    args: list[str], free_port: object
) -> None:
    # Nothing listens there: the command fails, after importing all it needs to succeed.
    url = f"http://127.0.0.1:{free_port()}"  # type: ignore[operator]
    modules = _modules_after(*args, "--base-url", url)
    assert "rock.sdk._drivers.remote" in modules
    assert _loaded(modules, HEAVY) == []


def test_version_loads_neither_http_nor_the_models() -> None:
    modules = _modules_after("--version")
    assert (
        _loaded(
            modules, (*HEAVY, "httpx", "rock_core.actions", "rock._cli_sandbox", "rock.admin.cli")
        )
        == []
    )


def test_help_lists_every_command_without_loading_docker_or_the_engine() -> None:
    # --help loads the plugins (for their commands); a runtime's library waits for an engine.
    modules = _modules_after("--help")
    assert _loaded(modules, HEAVY) == []
