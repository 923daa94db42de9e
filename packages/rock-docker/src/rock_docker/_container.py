"""What a sandbox's container looks like, as plain data: no Docker calls here.

:func:`container_config` turns a :class:`~rock_core.models.SandboxSpec` into the arguments of
Docker's create call; :func:`status_from_inspect` turns Docker's inspect document back into a
:class:`~rock_core.models.RuntimeStatus`. Keeping both free of I/O keeps the runtime's Docker
calls few and readable, and lets them be checked without an engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import attrs

from rock_core.errors import InvalidParameter
from rock_core.models import ROCKLET_PORT, Port, RuntimeStatus, SandboxSpec, UnitState
from rock_core.rocklet.server import TOKEN_ENV
from rock_core.rocklet_delivery import NO_PYTHON_EXIT_CODE, NO_PYTHON_LOG_LINE, ROCKLET_PYZ
from rock_core.rocklet_delivery import launch_command as core_launch_command
from rock_core.sizes import format_size
from rock_core.tenancy import group_network_id

__all__ = [
    "APP_PORT",
    "KEPT_CAPABILITIES",
    "LABEL_NETWORK",
    "LABEL_NETWORK_GROUP",
    "INIT_EXEC_FAILED",
    "NETWORKS",
    "NO_PYTHON_EXIT_CODE",
    "NO_PYTHON_LOG_LINE",
    "ROCKLET_MOUNT",
    "ROCKLET_PORT_LABEL",
    "FORWARD_PORTS_LABEL",
    "HANDOFF_DIR",
    "HANDOFF_NAME",
    "ROCKLET_PYZ",
    "ContainerConfig",
    "container_config",
    "group_network_name",
    "launch_command",
    "network_for",
    "explain_start_failure",
    "no_python_error",
    "status_from_inspect",
]

#: The second port every sandbox publishes (ROCK's default target of the HTTP proxy).
APP_PORT = 8080
#: Where the directory holding ``rocklet.pyz`` is mounted, read-only, in every container.
ROCKLET_MOUNT = "/rock"
#: What Docker's init (tini) writes when it cannot run the command (no ``/bin/sh`` in the image).
INIT_EXEC_FAILED = "exec /bin/sh failed"
#: With ``network: host`` there is nothing to publish: the rocklet listens on a free host port,
#: remembered in this label so that ``inspect`` can report it.
ROCKLET_PORT_LABEL = "rock.docker.rocklet_port"
#: Every network but ``host`` (unless ``publish_ports``): the rocklet serves on a unix socket the
#: engine made (:mod:`rock_core.rocklet_handoff`), at ``<unit folder>/rocklet.sock`` on the host,
#: in a folder no container mounts; this label holds that path.
ROCKLET_SOCKET_LABEL = "rock.docker.rocklet_socket"
#: Where the unit folder's ``handoff`` folder is mounted, read-only: the rocklet takes its
#: listening socket at ``/rock-run/handoff.sock`` when it starts.
SOCKET_MOUNT = "/rock-run"
#: The sub-folder of a unit folder that the container mounts, and the handoff socket in it.
HANDOFF_DIR = "handoff"
HANDOFF_NAME = "handoff.sock"
#: The container ports the engine forwards from its host for a sandbox reached on a unix
#: socket (comma-separated; see :attr:`~rock_core.models.RuntimeStatus.forwarded_ports`).
FORWARD_PORTS_LABEL = "rock.docker.forward_ports"
SOCKET_NAME = "rocklet.sock"
#: The values the ``network`` runtime option may take in a spec.
NETWORKS = ("bridge", "host", "none")
# Runtime options a spec may carry and this runtime honours; anything else is refused.
_OPTIONS = ("network", "network_group", "use_kata_runtime")
#: The capabilities every sandbox keeps: Docker's default set without NET_RAW (raw packets:
#: spoofing on the shared bridge), MKNOD (device nodes), AUDIT_WRITE, SETFCAP and SYS_CHROOT.
#: Enough for package managers (apt drops to its ``_apt`` user), chown and binding low ports.
KEPT_CAPABILITIES = (
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "NET_BIND_SERVICE",
    "SETGID",
    "SETPCAP",
    "SETUID",
)
#: Label on the networks rock makes: ``isolated`` (the shared one, no traffic between its
#: containers) or ``group`` (one per network group, whose containers may talk to each other).
LABEL_NETWORK = "rock.network"
#: Label on a group's network and its containers: the group's name, as its tenant gave it.
LABEL_NETWORK_GROUP = "rock.network_group"
#: Label on a group's containers: the Docker network of their group (removed with its last one).
LABEL_GROUP_NETWORK = "rock.group_network"
#: What the ``network`` entry of a unit's ``security`` says for each Docker network mode.
_NETWORK_SECURITY = {
    "host": "host (shares the host's network: trusted code only)",
    "none": "none (loopback only)",
}


def group_network_name(group_id: str) -> str:
    """The Docker network of the network group whose id (within its tenant) is ``group_id``
    (:func:`rock_core.tenancy.group_network_id`): two tenants' groups of one name are two networks."""
    return f"rock-group-{group_id}"


# Docker's "never set" time.
_ZERO_TIME = "0001-01-01T00:00:00Z"


def launch_command(
    *,
    host: str = "0.0.0.0",
    port: int = ROCKLET_PORT,
    listen_fd_from: str | None = None,
    prelude: str = "",
) -> list[str]:
    """The container's command: rock-core's :func:`~rock_core.rocklet_delivery.launch_command`
    for the rocklet mounted at ``/rock``.

    Under Docker's init process, which reaps the orphans the sandbox's commands leave behind.
    """
    return core_launch_command(
        f"{ROCKLET_MOUNT}/{ROCKLET_PYZ}",
        host=host,
        port=port,
        listen_fd_from=listen_fd_from,
        prelude=prelude,
    )


def no_python_error(image: str) -> str:
    """What ``inspect`` says about a container that exited because its image has no python3."""
    return (
        f"image {image} has no python3; rock needs python3 >= 3.8 in the image to run its agent "
        "(install python3 in the image, or choose an image that has it)"
    )


def explain_start_failure(image: str, detail: str) -> str | None:
    """The fix for a start Docker refused because the image has no ``/bin/sh``, or because the
    open-files limit is above what the Docker engine may grant; ``None`` for other failures."""
    text = detail.lower()
    if "rlimit" in text and "type 7" in text:
        return (
            "the Docker engine may not raise the open-files limit that high (its own limit is lower); "
            f"lower the docker runtime's nofile_limit option (docker: {detail})"
        )
    mentions_shell = '"/bin/sh"' in text or INIT_EXEC_FAILED in text
    if not mentions_shell or not ("no such file" in text or "not found" in text):
        return None
    return (
        f"image {image} has no /bin/sh and python3; rock needs python3 >= 3.8 in the image to run "
        f"its agent (docker: {detail})"
    )


def network_for(spec: SandboxSpec, default: str) -> str:
    """The Docker network of ``spec``'s container: its network group's, else its ``network``
    option, else ``default``.

    Refuses runtime options this runtime cannot honour (:class:`InvalidParameter`), rather
    than ignore them.
    """
    options = spec.runtime_options

    def refuse(key: str, why: str, value: Any) -> InvalidParameter:
        return InvalidParameter(
            f"runtime_options.{key}: {why}",
            field=f"runtime_options.{key}",
            value=value,
            sandbox_id=spec.sandbox_id,
            attempted="create",
        )

    for key, value in options.items():
        if key not in _OPTIONS:
            raise refuse(
                key,
                f"the docker runtime has no option {key!r} (it knows {', '.join(_OPTIONS)})",
                value,
            )
    if options.get("use_kata_runtime"):
        raise refuse(
            "use_kata_runtime",
            "the docker runtime cannot run Kata containers",
            options["use_kata_runtime"],
        )
    network = options.get("network", default)
    if "network" in options and network not in NETWORKS:
        raise refuse("network", f"expected one of {', '.join(NETWORKS)}, got {network!r}", network)
    group = options.get("network_group")
    if group is not None:
        if network in ("host", "none"):
            raise refuse(
                "network_group",
                f"a sandbox on network {network!r} cannot join a network group",
                group,
            )
        group_id = group_network_id(spec)
        assert group_id is not None
        return group_network_name(group_id)
    return str(network)


@attrs.frozen
class ContainerConfig:
    """The arguments of ``APIClient.create_container`` (``create``) and of its host config (``host``).

    ``notes`` are the parts of the spec the container will not enforce, in words for the user.
    """

    create: dict[str, Any]
    host: dict[str, Any]
    notes: tuple[str, ...] = ()
    #: The hardening applied, for the sandbox's status (see :attr:`UnitHandle.security`).
    security: dict[str, Any] = attrs.field(factory=dict)


def container_config(
    spec: SandboxSpec,
    *,
    labels: Mapping[str, str],
    rocklet_dir: str,
    publish_host: str,
    network: str,
    disk_unsupported: str | None,
    host_cpus: int | None = None,
    host_rocklet_port: int | None = None,
    socket_dir: str | None = None,
    publish_ports: bool = False,
    stop_timeout: float = 10.0,
    init: bool = True,
    rocklet_token: str = "",
    isolated_network: str = "bridge",
    nofile_limit: int | None = None,
    prelude: str = "",
) -> ContainerConfig:
    """Docker's create arguments for ``spec``: name, labels, command, ports, limits, mounts.

    :param rocklet_dir: host directory holding ``rocklet.pyz``, mounted read-only at ``/rock``.
    :param publish_host: the host address ports are published on (``127.0.0.1``).
    :param network: the network mode (see :func:`network_for`).
    :param disk_unsupported: why the storage driver cannot limit disk, or ``None`` when it can.
    :param host_cpus: the engine's CPU count; a larger CPU limit is lowered to it, with a note.
    :param host_rocklet_port: with ``network == "host"``, the host port the rocklet listens on.
    :param socket_dir: the unit's folder on the host (every network but ``host``, unless
        ``publish_ports``): the rocklet's socket, made by the engine, and the ``handoff`` folder
        the container mounts read-only at ``/rock-run`` to take it.
    :param publish_ports: publish ports 22555 and 8080 through Docker (a ``docker-proxy`` each)
        and reach the rocklet there, instead of a unix socket with the engine forwarding the
        ports (:data:`FORWARD_PORTS_LABEL`).
    :param rocklet_token: the sandbox's rocklet secret, handed over in ``ROCK_ROCKLET_TOKEN``.
    :param isolated_network: the network ``network`` is when it is rock's isolated one (for
        the ``security`` summary).
    :param nofile_limit: the open-files limit of every process (soft and hard); ``None``: Docker's.
    :param prelude: shell the command runs before the rocklet (see :func:`launch_command`).
    """
    assert spec.sandbox_id is not None, "the engine sets sandbox_id before create"
    notes: list[str] = []
    labels = dict(labels)
    if network == "host":
        assert host_rocklet_port is not None, "host networking needs a rocklet port"
        command = launch_command(host=publish_host, port=host_rocklet_port, prelude=prelude)
        labels[ROCKLET_PORT_LABEL] = str(host_rocklet_port)
        ports: list[int] = []
        bindings: dict[int, tuple[str]] = {}
        notes.append(
            f"network host: the rocklet listens on {publish_host}:{host_rocklet_port}; port {APP_PORT} is "
            "the host's own, not published"
        )
    elif network == "none":
        assert socket_dir is not None, "a sandbox without a network needs a socket directory"
        command = launch_command(listen_fd_from=f"{SOCKET_MOUNT}/{HANDOFF_NAME}", prelude=prelude)
        labels[ROCKLET_SOCKET_LABEL] = f"{socket_dir}/{SOCKET_NAME}"
        ports, bindings = [], {}
        notes.append(
            "network none: the sandbox has only a loopback interface; rock reaches its agent through a "
            "unix socket, and no port is published"
        )
    elif publish_ports:
        command = launch_command(host="0.0.0.0", port=ROCKLET_PORT, prelude=prelude)
        ports = [ROCKLET_PORT, APP_PORT]
        # A one-item tuple binds the address and lets Docker choose a free host port.
        bindings = {port: (publish_host,) for port in ports}
    else:
        # The rocklet listens on a unix socket only; the engine serves host ports for 22555 and
        # 8080 and carries their connections through it (rock_core.engine.forwarding).
        assert socket_dir is not None, "a sandbox reached on a unix socket needs a socket directory"
        command = launch_command(listen_fd_from=f"{SOCKET_MOUNT}/{HANDOFF_NAME}", prelude=prelude)
        labels[ROCKLET_SOCKET_LABEL] = f"{socket_dir}/{SOCKET_NAME}"
        labels[FORWARD_PORTS_LABEL] = f"{ROCKLET_PORT},{APP_PORT}"
        ports, bindings = [], {}
    mounts = [{"Type": "bind", "Source": rocklet_dir, "Target": ROCKLET_MOUNT, "ReadOnly": True}]
    if socket_dir is not None:
        # Read-only: the sandbox writes nothing on the host through it, and cannot swap the socket.
        mounts.append(
            {
                "Type": "bind",
                "Source": f"{socket_dir}/{HANDOFF_DIR}",
                "Target": SOCKET_MOUNT,
                "ReadOnly": True,
            }
        )
    capabilities = [*KEPT_CAPABILITIES, *(c for c in spec.cap_add if c not in KEPT_CAPABILITIES)]
    host: dict[str, Any] = {
        "port_bindings": bindings,
        "mounts": mounts,
        # Memory and swap equal: a hard limit, the sandbox never swaps (ROCK's --memory-swap).
        "mem_limit": spec.memory,
        "memswap_limit": spec.memory,
        "network_mode": network,
        "init": init,
        "privileged": False,
        # Hardening (docs/security.md): no privilege gain through setuid binaries, a reduced
        # capability set, and a process quota so that a fork bomb exhausts only its own.
        "security_opt": ["no-new-privileges"],
        "cap_drop": ["ALL"],
        "cap_add": capabilities,
    }
    if spec.pids_limit is not None:
        host["pids_limit"] = spec.pids_limit
    if nofile_limit is not None:
        host["ulimits"] = [{"name": "nofile", "soft": nofile_limit, "hard": nofile_limit}]
    if network == isolated_network:
        network_summary = "isolated"
    elif network.startswith("rock-group-"):
        network_summary = (
            f"group:{spec.runtime_options.get('network_group')}"  # the name its tenant gave
        )
    else:
        network_summary = _NETWORK_SECURITY.get(network, network)
    security: dict[str, Any] = {
        "network": network_summary,
        "pids_limit": spec.pids_limit,
        "nofile_limit": nofile_limit,
        "no_new_privileges": True,
        "capabilities": capabilities,
        "rocklet_auth": bool(rocklet_token),
    }
    ceiling = float(spec.limit_cpus if spec.limit_cpus is not None else spec.cpus)
    if host_cpus is not None and ceiling > host_cpus:
        # Docker refuses a quota above the host's CPU count; the whole host is the most it can get.
        which = "limit_cpus" if spec.limit_cpus is not None else "cpus"
        notes.append(
            f"{which} {ceiling:g} lowered to {host_cpus}: the Docker host has only {host_cpus} CPUs"
        )
        ceiling = float(host_cpus)
    if spec.limit_cpus is not None:
        # ROCK's overcommit: a share proportional to what was asked, a ceiling at limit_cpus.
        host["cpu_shares"] = max(2, round(spec.cpus * 1024))
    host["nano_cpus"] = round(ceiling * 1e9)
    if spec.disk is not None:
        if disk_unsupported is None:
            host["storage_opt"] = {"size": str(spec.disk)}
        else:
            notes.append(
                f"disk limit {format_size(spec.disk)} not enforced by the storage driver "
                f"({disk_unsupported}): rock's disk watch measures the sandbox and stops it past "
                "the limit"
            )
    if spec.num_gpus:
        notes.append(
            f"{spec.num_gpus} GPU(s) requested but the docker runtime does not attach GPUs"
        )
    create: dict[str, Any] = {
        "image": spec.image,
        "name": spec.sandbox_id,
        "command": command,
        "entrypoint": "",
        "labels": labels,
        "environment": {**spec.env, **({TOKEN_ENV: rocklet_token} if rocklet_token else {})},
        "ports": ports,
        "stop_timeout": max(1, round(stop_timeout)),
    }
    return ContainerConfig(create=create, host=host, notes=tuple(notes), security=security)


def _parse_time(text: str | None) -> datetime | None:
    """Docker's RFC 3339 time with nanoseconds, as an aware ``datetime``; ``None`` when never set."""
    if not text or text == _ZERO_TIME or text.startswith("0001-"):
        return None
    text = text.replace("Z", "+00:00")
    main, _, rest = text.partition(".")
    if rest:
        # Python reads at most microseconds: keep six digits of the fraction, then the offset.
        digits = "".join(ch for ch in rest if ch.isdigit())
        offset = rest[len(digits) :]
        text = f"{main}.{digits[:6].ljust(6, '0')}{offset}"
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


_STATES = {
    "created": UnitState.CREATED,
    "running": UnitState.RUNNING,
    "paused": UnitState.RUNNING,
    "restarting": UnitState.RUNNING,
    "removing": UnitState.EXITED,
    "exited": UnitState.EXITED,
    "dead": UnitState.EXITED,
}


def status_from_inspect(doc: Mapping[str, Any], *, publish_host: str) -> RuntimeStatus:
    """The :class:`RuntimeStatus` of a container from ``docker inspect``'s document."""
    state = doc.get("State") or {}
    unit_state = _STATES.get(state.get("Status", ""), UnitState.EXITED)
    mapping: dict[Port, Port] = {}
    # Ports published on every address are reached on loopback.
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(publish_host, publish_host)
    for key, bindings in ((doc.get("NetworkSettings") or {}).get("Ports") or {}).items():
        port, _, proto = key.partition("/")
        if proto != "tcp" or not bindings:
            continue
        binding = next((b for b in bindings if b.get("HostIp") == publish_host), bindings[0])
        if binding.get("HostPort"):
            mapping[Port(int(port))] = Port(int(binding["HostPort"]))
    labels = (doc.get("Config") or {}).get("Labels") or {}
    if unit_state is UnitState.RUNNING and labels.get(ROCKLET_PORT_LABEL):
        mapping[Port(ROCKLET_PORT)] = Port(int(labels[ROCKLET_PORT_LABEL]))
    rocklet_port = mapping.get(Port(ROCKLET_PORT)) if unit_state is UnitState.RUNNING else None
    rocklet_socket = labels.get(ROCKLET_SOCKET_LABEL) if unit_state is UnitState.RUNNING else None
    forwarded = labels.get(FORWARD_PORTS_LABEL, "") if unit_state is UnitState.RUNNING else ""
    error = state.get("Error") or None
    return RuntimeStatus(
        state=unit_state,
        exit_code=state.get("ExitCode") if unit_state is UnitState.EXITED else None,
        oom_killed=bool(state.get("OOMKilled")),
        rocklet_host=host if rocklet_port is not None else None,
        rocklet_port=rocklet_port,
        error=error,
        started_at=_parse_time(state.get("StartedAt")),
        finished_at=_parse_time(state.get("FinishedAt")),
        port_mapping=mapping if unit_state is UnitState.RUNNING else {},
        rocklet_socket=rocklet_socket or None,
        forwarded_ports=tuple(Port(int(p)) for p in forwarded.split(",") if p.strip().isdigit()),
    )
