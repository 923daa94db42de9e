"""The sandboxes of an admin whose state folder is gone from this host are reaped at the next
engine's start; those of another host on a shared Docker engine, and old ones without a host
label, are left alone.

Real containers on the local Docker engine, labelled as an admin's units are
(``rock.owner=admin:<store path>``, ``rock.owner_host=<host identity>``); a real engine opens on
the same engine label and its start-up sweep judges them.
"""

from __future__ import annotations

from typing import Any

import pytest

from rock_core.engine.config import EngineConfig
from rock_core.engine.live import LABEL_ENGINE, LABEL_OWNER
from rock_core.engine.manager import SandboxManager
from rock_core.engine.owners import LABEL_OWNER_HOST, host_identity

from .conftest import IMAGE, RUN_LABEL

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

ANOTHER_HOST = "0123456789abcdef0123456789abcdef/another-host/4026531840"


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


def _admin_unit(docker_client: Any, engine_label: str, run_labels, **labels: str) -> str:
    """A running container labelled as an admin's sandbox (``labels``: owner and host)."""
    container = docker_client.containers.run(
        IMAGE,
        ["sleep", "600"],
        labels={LABEL_ENGINE: engine_label, **run_labels, **labels},
        detach=True,
    )
    return str(container.id)


def _exists(docker_client: Any, unit_id: str) -> bool:
    return any(c.id == unit_id for c in docker_client.containers.list(all=True, sparse=True))


async def test_sandboxes_of_an_admin_whose_folder_is_gone_from_this_host_are_reaped_at_start(
    tmp_path, run_labels, docker_client
):
    assert host_identity(), "this host has a machine id and a mount namespace"
    engine_label = f"folder-{run_labels[RUN_LABEL][:8]}"
    gone = f"admin:{tmp_path / 'removed-state' / 'rock.db'}"  # its folder never made: gone
    kept_folder = tmp_path / "kept-state"
    kept_folder.mkdir()
    here = host_identity()
    units = {
        "folder gone, this host": _admin_unit(
            docker_client,
            engine_label,
            run_labels,
            **{LABEL_OWNER: gone, LABEL_OWNER_HOST: here},
        ),
        "folder gone, another host": _admin_unit(
            docker_client,
            engine_label,
            run_labels,
            **{LABEL_OWNER: gone, LABEL_OWNER_HOST: ANOTHER_HOST},
        ),
        "folder gone, no host label (an older admin)": _admin_unit(
            docker_client, engine_label, run_labels, **{LABEL_OWNER: gone}
        ),
        "folder still here, this host": _admin_unit(
            docker_client,
            engine_label,
            run_labels,
            **{LABEL_OWNER: f"admin:{kept_folder / 'rock.db'}", LABEL_OWNER_HOST: here},
        ),
    }
    config = EngineConfig(
        runtime_options={"socket_dir": str(tmp_path / "sockets")},
        engine_label=engine_label,
        reap_orphans=True,
        store_path=str(tmp_path / "engine" / "rock.db"),
    )
    (tmp_path / "engine").mkdir()
    async with SandboxManager(config):
        pass  # closing waits for the start-up sweep to finish
    left = {what: _exists(docker_client, unit_id) for what, unit_id in units.items()}
    assert left == {
        "folder gone, this host": False,
        "folder gone, another host": True,
        "folder gone, no host label (an older admin)": True,
        "folder still here, this host": True,
    }
