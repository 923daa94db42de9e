"""deploy/ha/ (two admins, PostgreSQL, a load balancer) and deploy/nomad/rock-admin.nomad.hcl
(two admin allocations) stay true to the admin they deploy.

Every admin TOML under deploy/ha is read by the admin's own config reader
(:func:`rock.admin.config.load_settings`) and joins one cluster on PostgreSQL; the load
balancers send requests to exactly the admins' addresses, check ``GET /healthz`` (haproxy),
carry WebSockets and wait longer than the admin holds an answer. ``haproxy -c`` and
``nginx -t`` check the files too where the binaries are installed; the checks of the text run
everywhere. The Nomad job's admin.toml template, filled in as Nomad would, is read by the same
reader.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import attrs
import pytest

from rock.admin.config import AdminSettings, load_settings
from rock.sdk._drivers.remote_wire import DEFAULT_TIMEOUT, TIMEOUT_MARGIN

ROOT = Path(__file__).resolve().parents[1]
HA = ROOT / "deploy" / "ha"
NOMAD_JOB = ROOT / "deploy" / "nomad" / "rock-admin.nomad.hcl"
ADMIN_FILES = sorted(HA.glob("*.toml"))


def _binary(name: str) -> str | None:
    """A program on PATH, or in /usr/sbin (Debian's place for it, off a user's PATH)."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin")


def _admins() -> dict[str, AdminSettings]:
    """Each admin TOML of deploy/ha as the admin reads it (no environment variables)."""
    return {path.name: load_settings(path, environ={}) for path in ADMIN_FILES}


def _seconds(value: str) -> float:
    """A duration of haproxy (``5s``, ``1h``, ``300`` ms) or nginx (``3600s``, ``1h``, ``60``)."""
    found = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)?", value.strip())
    assert found, f"not a duration: {value!r}"
    number, unit = float(found[1]), found[2] or "s"
    return number * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit]


def _longest_held_answer(admins: dict[str, AdminSettings]) -> float:
    """The longest an admin may take between a request and its answer, without a command's own
    timeout: a start's wait, a proxied request's, the SDK's wait on a lifecycle call."""
    read = DEFAULT_TIMEOUT.read or 0.0
    waits = [read + TIMEOUT_MARGIN]
    for settings in admins.values():
        waits += [settings.start_wait_seconds, settings.proxy_timeout]
    return max(waits)


def _haproxy_servers(text: str) -> set[tuple[str, int]]:
    return {
        (host, int(port))
        for host, port in re.findall(r"^\s*server\s+\S+\s+([\d.]+):(\d+)\b", text, re.M)
    }


def _nginx_upstream(text: str) -> tuple[str, set[tuple[str, int]]]:
    found = re.search(r"upstream\s+(\w+)\s*\{(.*?)\}", text, re.S)
    assert found, "nginx.conf has no upstream block"
    servers = {
        (host, int(port))
        for host, port in re.findall(r"^\s*server\s+([\d.]+):(\d+)\b", found[2], re.M)
    }
    return found[1], servers


def test_ha_has_two_admin_configs_a_readme_and_both_load_balancer_configs() -> None:
    names = {path.name for path in HA.iterdir()}
    assert {"README.md", "haproxy.cfg", "nginx.conf"} <= names
    assert len(ADMIN_FILES) >= 2, names


def test_every_admin_config_is_read_by_the_admin_and_joins_one_cluster_on_postgresql() -> None:
    admins = _admins()
    for name, settings in admins.items():
        engine = settings.engine
        assert engine.cluster, f"{name}: no [engine] cluster"
        assert engine.store and engine.store.startswith("postgresql://"), name
        assert engine.remove_on_close is False, name
    # One cluster, one database, one owner of the sandboxes (the leader looks after them all).
    assert len({s.engine.cluster for s in admins.values()}) == 1
    assert len({s.engine.store for s in admins.values()}) == 1
    assert len({s.owner for s in admins.values()}) == 1
    # Each admin its own address and its own pid file and log.
    assert len({(s.host, s.port) for s in admins.values()}) == len(admins)
    assert len({s.state_dir for s in admins.values()}) == len(admins)


def test_one_admin_config_with_the_other_admins_port_and_folder_from_the_environment() -> None:
    """The README's alternative: one file, each admin's own port and folder in its environment."""
    first, second = (load_settings(path, environ={}) for path in ADMIN_FILES[:2])
    environ = {"ROCK_ADMIN_PORT": str(second.port), "ROCK_ADMIN_STATE_DIR": str(second.state_dir)}
    moved = load_settings(ADMIN_FILES[0], environ=environ)
    assert (moved.port, moved.state_dir) == (second.port, second.state_dir)
    # The same engine settings as the first admin's, but for its default path (unused: no
    # SQLite file with a store), and the same owner of the sandboxes.
    assert attrs.evolve(moved.engine, store_path=None) == attrs.evolve(
        first.engine, store_path=None
    )
    assert moved.owner == first.owner


def test_the_load_balancers_send_requests_to_exactly_the_admins_ports() -> None:
    settings = _admins().values()
    admins = {(s.host, s.port) for s in settings}
    haproxy = (HA / "haproxy.cfg").read_text()
    assert _haproxy_servers(haproxy) == admins
    _, nginx = _nginx_upstream((HA / "nginx.conf").read_text())
    assert nginx == admins
    # Where a follower sends the leader's calls (cluster_address, else the admin's own URL) is
    # that admin's address too.
    for s in settings:
        leader = urlsplit(s.engine.cluster_address or s.url)
        assert (leader.hostname, leader.port) == (s.host, s.port)
    # What clients reach is not an admin's own port.
    bound = re.findall(r"^\s*bind\s+([\d.]+):(\d+)", haproxy, re.M)
    listen = re.findall(r"^\s*listen\s+([\d.]+):(\d+)", (HA / "nginx.conf").read_text(), re.M)
    assert bound and listen
    for host, port in bound + listen:
        assert (host, int(port)) not in admins


def test_haproxy_checks_healthz_balances_round_robin_and_outwaits_the_admin(
    tmp_path: Path,
) -> None:
    path = HA / "haproxy.cfg"
    text = path.read_text()
    assert re.search(r"^\s*balance\s+roundrobin\s*$", text, re.M)
    assert re.search(r"^\s*option\s+httpchk\b", text, re.M)
    assert re.search(r"^\s*http-check\s+send\s+meth\s+GET\s+uri\s+/healthz\b", text, re.M)
    assert re.search(r"^\s*http-check\s+expect\s+status\s+200\s*$", text, re.M)
    servers = re.findall(r"^\s*server\s+\S+\s+\S+(.*)$", text, re.M)
    assert servers and all(re.search(r"\bcheck\b", rest) for rest in servers)
    # A refused connection goes to the other admin.
    assert re.search(r"^\s*option\s+redispatch\b", text, re.M)
    timeouts = dict(re.findall(r"^\s*timeout\s+(\S+)\s+(\S+)", text, re.M))
    longest = _longest_held_answer(_admins())
    for kind in ("server", "client", "tunnel"):  # tunnel: the shell's and proxy's WebSockets
        assert _seconds(timeouts[kind]) > longest, (kind, timeouts[kind], longest)
    haproxy = _binary("haproxy")
    if haproxy:
        done = subprocess.run(
            [haproxy, "-c", "-f", str(path)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_nginx_carries_websockets_to_both_admins_and_outwaits_the_admin(tmp_path: Path) -> None:
    path = HA / "nginx.conf"
    text = path.read_text()
    name, _ = _nginx_upstream(text)
    assert re.search(rf"proxy_pass\s+http://{name}\s*;", text)
    assert re.search(r"proxy_http_version\s+1\.1\s*;", text)
    assert re.search(r"proxy_set_header\s+Upgrade\s+\$http_upgrade\s*;", text)
    connection = re.search(r"proxy_set_header\s+Connection\s+\$(\w+)\s*;", text)
    assert connection and re.search(rf"map\s+\$http_upgrade\s+\${connection[1]}\s*\{{", text)
    assert re.search(r"proxy_set_header\s+Host\s+\$http_host\s*;", text)  # the admin checks Host
    longest = _longest_held_answer(_admins())
    for directive in ("proxy_read_timeout", "proxy_send_timeout"):
        found = re.search(rf"{directive}\s+(\S+?)\s*;", text)
        assert found and _seconds(found[1]) > longest, directive
    # Large uploads pass; a request that reached an admin is never sent to the other one.
    body = re.search(r"client_max_body_size\s+(\d+)m\s*;", text)
    assert body and int(body[1]) * 1024 * 1024 >= max(s.max_upload_body for s in _admins().values())
    assert "non_idempotent" not in text
    nginx = _binary("nginx")
    if nginx:
        # The file itself, with the temporary folders, log and pid file of this test (nginx
        # -t opens them: the defaults need root).
        copy = tmp_path / "nginx.conf"
        local = "".join(
            f"    {kind}_temp_path {tmp_path / kind};\n"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        copy.write_text(
            text.replace("http {\n", f"http {{\n    access_log {tmp_path / 'access.log'};\n{local}")
        )
        done = subprocess.run(
            [nginx, "-t", "-c", str(copy), "-p", str(tmp_path), "-e", str(tmp_path / "error.log")]
            + ["-g", f"pid {tmp_path / 'nginx.pid'};"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stdout + done.stderr


# -- deploy/nomad/rock-admin.nomad.hcl ------------------------------------------------------


def _nomad_variables(text: str) -> dict[str, str]:
    """Each variable's default, as text (strings unquoted)."""
    found = {}
    for name, body in re.findall(r'variable\s+"(\w+)"\s*\{(.*?)\n\}', text, re.S):
        default = re.search(r"^\s*default\s*=\s*(.+?)\s*$", body, re.M)
        if default:
            value = default[1]
            found[name] = value[1:-1].replace('\\"', '"') if value.startswith('"') else value
    return found


def _admin_toml_template(text: str) -> str:
    found = re.search(
        r'destination\s*=\s*"local/admin\.toml".*?data\s*=\s*<<-EOT\n(.*?)\n\s*EOT', text, re.S
    )
    assert found, "no local/admin.toml template"
    return found[1]


def test_the_nomad_job_runs_two_admins_on_two_nodes_checked_on_healthz() -> None:
    text = NOMAD_JOB.read_text()
    variables = _nomad_variables(text)
    count = re.search(r"^\s*count\s*=\s*(\S+)", text, re.M)
    assert count
    given = count[1]
    if given.startswith("var."):
        given = variables[given.removeprefix("var.")]
    assert int(given) == 2
    distinct = re.search(
        r'constraint\s*\{\s*operator\s*=\s*"distinct_hosts"\s*value\s*=\s*"true"\s*\}', text
    )
    spread = re.search(r"spread\s*\{", text)
    assert distinct or spread, "two admins may land on one node"
    check = re.search(r"check\s*\{(.*?)\}", text, re.S)
    assert check and re.search(r'path\s*=\s*"/healthz"', check[1])
    update = re.search(r"update\s*\{(.*?)\}", text, re.S)
    assert update and re.search(r"max_parallel\s*=\s*1\b", update[1])
    # The database's URL (with its password) comes from the job's Variable, not the job.
    assert re.search(r"^\s*ROCK_ENGINE_STORE=\{\{\s*\.postgres_url\s*\}\}\s*$", text, re.M)
    assert "postgresql://" not in _admin_toml_template(text)


def test_the_nomad_jobs_image_has_the_postgresql_store() -> None:
    dockerfile = (NOMAD_JOB.parent / "Dockerfile").read_text().replace("\\\n", " ")
    install = re.search(r"^RUN pip install ([^&\n]*)", dockerfile, re.M)
    assert install and "/src/packages/rock-postgres" in install[1]


def test_the_nomad_jobs_admin_config_is_read_by_the_admin_as_one_cluster_on_postgresql(
    tmp_path: Path,
) -> None:
    """The template filled in as Nomad would for two allocations on two nodes: both read by the
    admin, one cluster, one owner of the sandboxes, the store from the Variable."""
    text = NOMAD_JOB.read_text()
    variables = _nomad_variables(text)
    template = _admin_toml_template(text)
    store = "postgresql://rock:secret@127.0.0.1:5432/rock"
    read = []
    for node in ("node-a.example", "node-b.example"):
        nomad_env = {
            "NOMAD_PORT_http": variables["port"],
            "NOMAD_ADDR_http": f"{node}:{variables['port']}",
            "NOMAD_ALLOC_DIR": "/alloc",
            "NOMAD_SECRETS_DIR": "/secrets",
            "attr.unique.network.ip-address": node,
        }
        filled = re.sub(r"\$\{var\.(\w+)\}", lambda m: variables[m[1]], template)
        filled = re.sub(r'\{\{\s*env\s+"([^"]+)"\s*\}\}', lambda m: nomad_env[m[1]], filled)
        assert "{{" not in filled and "${" not in filled, filled
        config = tmp_path / f"{node}.toml"
        config.write_text(filled)
        read.append(load_settings(config, environ={"ROCK_ENGINE_STORE": store}))
    for node, settings in zip(("node-a.example", "node-b.example"), read):
        assert settings.engine.store == store
        assert settings.engine.cluster_address == f"http://{node}:{variables['port']}"
        assert settings.engine.cluster == variables["cluster"]
        assert settings.engine.remove_on_close is False
        assert settings.port == int(variables["port"])
    assert read[0].owner == read[1].owner
    assert read[0].engine.rocklet_url != read[1].engine.rocklet_url  # each serves its own


@pytest.mark.parametrize("path", sorted(HA.iterdir()), ids=lambda p: p.name)
def test_ha_files_name_only_loopback_addresses_and_placeholders(path: Path) -> None:
    """Addresses in deploy/ha are 127.0.0.1 or ``<placeholders>``: nothing a reader could take
    for a real host (the README's commands included)."""
    text = path.read_text()
    for address in re.findall(r"\b(?:\d{1,3}\.){3}\d{1,3}\b", text):
        assert address.startswith("127.") or address == "0.0.0.0", address
    upstream, _ = _nginx_upstream((HA / "nginx.conf").read_text())
    for _, host in re.findall(r"\b[a-z]+://([^/\s:@\"'`]+@)?([^/\s:\"'`,);]*)", text):
        assert host.startswith(("127.", "<", "localhost", "$")) or host in ("", upstream), host
