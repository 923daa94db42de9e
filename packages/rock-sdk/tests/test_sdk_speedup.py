"""``sandbox.network.speedup``: mirror settings written inside real sandboxes, proven by real installs.

The strategies come from rock-speedup's ``rock`` entry point (or a third-party plugin) and run in
sandboxes of the local Docker engine; with ``ROCK_TEST_REMOTE=1`` the same tests run through a
real admin server. The installs use mirrors this test serves on 127.0.0.1 (:class:`MirrorServer`,
a threaded ``http.server`` that records each request's path and User-Agent): a PEP 503 index over
a wheel written here, and a Debian repository made from a ``.deb`` the host's apt downloads, laid
out as ``AptSpeedup`` writes the sources and signed with a throwaway key (so the sandbox's apt
checks signatures as it would with a real mirror). A sandbox on the host's network
(``SandboxConfig(network="host")``) reaches them, and the request log shows that pip, uv and apt
fetched from them.

Sandbox images: ``python:3.11`` (Debian, root, apt and pip) and ``rock-test/speedup-bare:1``,
built here from it without apt-get and pip and running as a non-root user. In that image
``/etc/hosts`` is not writable, for the reason it is not writable in real sandboxes: rock's
Docker containers are not privileged, so root cannot remount or ``chattr`` a file, but an image
whose ``USER`` is not root (common for agent images) gets Docker's root-owned ``/etc/hosts``.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import http.server
import importlib.metadata
import io
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
import zipfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from rock.actions import Command, CommandResponse
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock.sdk.sandbox.speedup import SpeedupExecutor, SpeedupType
from rock_core.actions import SandboxStartRequest
from rock_core.converters import spec_from_start_request, structure_wire, unstructure_wire
from rock_core.errors import BadRequestRockError, InvalidParameter
from rock_core.speedup import SpeedupStrategy
from rock_core.testing import PluginSite
from rock_speedup import GITHUB_HOSTS, AptSpeedup, GitHubSpeedup, PipSpeedup
from rock_speedup.apt import APT_CONF

pytestmark = pytest.mark.anyio

BARE_IMAGE = "rock-test/speedup-bare:1"
PROBE = "rock-mirror-probe"
PROBE_VALUE = "served by the rock speedup test mirror"

# Every file a speedup may write, with a digest (or "absent"), and what the two apt directories
# hold: equal before and after a refused call means nothing changed.
_SNAPSHOT = r"""
for f in /etc/apt/sources.list /etc/apt/sources.list.backup /etc/apt/apt.conf.d/99speedup /etc/hosts \
         /etc/hosts.backup /root/.pip/pip.conf /root/.config/pip/pip.conf /etc/uv/uv.toml \
         /home/*/.pip/pip.conf /home/*/.config/pip/pip.conf; do
    if [ -e "$f" ]; then echo "$f $(md5sum < "$f")"; else echo "$f absent"; fi
done
ls -A /etc/apt/sources.list.d /var/lib/apt/lists 2>&1
"""


async def sh(sandbox: Sandbox, script: str, *, timeout: float = 120) -> CommandResponse:
    """Run ``script`` with bash in the sandbox (one-shot, as root unless the image says otherwise)."""
    return await sandbox.execute(Command(command=["bash", "-c", script], timeout=timeout))


async def ok(sandbox: Sandbox, script: str, *, timeout: float = 120) -> str:
    """``sh`` that must succeed; its stdout."""
    result = await sh(sandbox, script, timeout=timeout)
    assert result.exit_code == 0, (
        f"{script!r} exited {result.exit_code}:\n{result.stdout}\n{result.stderr}"
    )
    return result.stdout


async def snapshot(sandbox: Sandbox) -> str:
    return (await sh(sandbox, _SNAPSHOT)).stdout


def deb_lines(sources: str) -> list[str]:
    return [line.strip() for line in sources.splitlines() if line.strip().startswith("deb ")]


@pytest.fixture(autouse=True)
def _plugins_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the caller's shell says, every rock plugin loads unless a test says otherwise."""
    for var in ("ROCK_DISABLE_PLUGINS", "ROCK_PLUGINS"):
        monkeypatch.delenv(var, raising=False)


# -- mirrors on 127.0.0.1 ----------------------------------------------------------------------


@attrs.frozen
class Request:
    """One request the mirror answered."""

    path: str
    user_agent: str
    status: int


class _Handler(http.server.SimpleHTTPRequestHandler):
    server: _Server

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        status = (
            code.value
            if isinstance(code, http.HTTPStatus)
            else int(code)
            if str(code).isdigit()
            else 0
        )
        with self.server.lock:
            self.server.requests.append(
                Request(self.path, self.headers.get("User-Agent", ""), status)
            )

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        pass  # quiet: the requests are recorded instead


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path) -> None:
        super().__init__(("127.0.0.1", 0), functools.partial(_Handler, directory=str(root)))
        self.lock = threading.Lock()
        self.requests: list[Request] = []


class MirrorServer:
    """Serves ``root`` on a free port of 127.0.0.1 in a thread of the test process.

    Use as a context manager; :attr:`url` is its base URL, :meth:`requests` what it served.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._server = _Server(root)
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            args=(0.05,),  # shutdown() waits one poll: a twentieth of a second, not half
            name="rock-test-mirror",
            daemon=True,
        )

    def __enter__(self) -> MirrorServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def requests(self) -> list[Request]:
        """Every request answered so far, in order."""
        with self._server.lock:
            return list(self._server.requests)

    def served(self, path_part: str, agent_prefix: str = "") -> list[Request]:
        """Successful requests whose path contains ``path_part`` and whose User-Agent starts with ``agent_prefix``."""
        return [
            r
            for r in self.requests()
            if path_part in r.path
            and r.user_agent.startswith(agent_prefix)
            and 200 <= r.status < 300
        ]


# -- PyPI ------------------------------------------------------------------------------------------


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(out_dir: Path, name: str, version: str, module_source: str) -> Path:
    """Write ``{module}-{version}-py3-none-any.whl`` holding one module, ``{module}/__init__.py``."""
    module = name.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": module_source.encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: rock-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return wheel


def add_simple_index(root: Path, project: str, wheels: list[Path]) -> None:
    """Publish ``wheels`` of ``project`` as a PEP 503 index under ``root/pypi/simple/``."""
    simple = root / "pypi" / "simple"
    packages = root / "pypi" / "packages"
    (simple / project).mkdir(parents=True, exist_ok=True)
    packages.mkdir(parents=True, exist_ok=True)
    links = []
    for wheel in wheels:
        shutil.copy(wheel, packages / wheel.name)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        links.append(f'<a href="../../packages/{wheel.name}#sha256={digest}">{wheel.name}</a><br>')
    (simple / project / "index.html").write_text(
        "<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n"
    )
    (simple / "index.html").write_text(
        f'<!DOCTYPE html><html><body><a href="{project}/">{project}</a></body></html>\n'
    )


def find_uv_binary() -> Path | None:
    """The uv executable of this machine (an ELF file; PATH entries may be shims), or ``None``.

    First the one ``scripts/ensure-uv.sh`` reports (the uv the README's set-up installed, which
    need not be on ``PATH``), then ``PATH``'s.
    """
    script = Path(__file__).resolve().parents[3] / "scripts" / "ensure-uv.sh"
    if script.is_file():
        found = subprocess.run([str(script)], capture_output=True, text=True, timeout=300)
        candidate = (
            Path(found.stdout.strip()) if found.returncode == 0 and found.stdout.strip() else None
        )
        with contextlib.suppress(OSError):
            if (
                candidate is not None
                and candidate.is_file()
                and candidate.read_bytes()[:4] == b"\x7fELF"
            ):
                return candidate
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(entry) / "uv"
        with contextlib.suppress(OSError):
            if candidate.is_file() and candidate.read_bytes()[:4] == b"\x7fELF":
                return candidate
    uv = shutil.which("uv")
    if uv is None:
        return None
    # A shim (pyenv): uv tells the programs it runs where it is, in UV.
    probe = subprocess.run(
        [
            uv,
            "run",
            "--no-project",
            "--offline",
            "python3",
            "-c",
            "import os; print(os.environ.get('UV', ''))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    path = Path(probe.stdout.strip()) if probe.returncode == 0 and probe.stdout.strip() else None
    return path if path is not None and path.is_file() else None


# -- Debian --------------------------------------------------------------------------------------


def download_deb(package: str, into: Path) -> Path:
    """``apt-get download package`` on the host (through the machine's own apt configuration)."""
    into.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["apt-get", "download", package], cwd=into, capture_output=True, text=True, timeout=120
    )
    debs = sorted(into.glob(f"{package}_*.deb"))
    if done.returncode != 0 or not debs:
        raise RuntimeError(
            f"apt-get download {package} failed ({done.returncode}): {done.stderr.strip()}"
        )
    return debs[-1]


class SigningKey:
    """A throwaway OpenPGP signing key in its own GNUPGHOME (its gpg-agent is stopped on close)."""

    def __init__(self) -> None:
        # Short path: gpg-agent's socket path must fit in a sockaddr_un.
        self.home = Path(tempfile.mkdtemp(prefix="rock-gpg-"))
        self._env = {**os.environ, "GNUPGHOME": str(self.home)}
        self._gpg(
            "--passphrase",
            "",
            "--quick-gen-key",
            "rock speedup test <speedup-test@rock.invalid>",
            "ed25519",
            "sign",
            "never",
        )
        self.public_armored = self._gpg("--armor", "--export").stdout

    def _gpg(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["gpg", "--batch", "--quiet", "--yes", "--pinentry-mode", "loopback", *args],
            env=self._env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            raise RuntimeError(f"gpg {' '.join(args)} failed: {done.stderr.strip()}")
        return done

    def clearsign(self, source: Path, target: Path) -> None:
        """Write ``target`` as the clear-signed ``source`` (an ``InRelease`` from a ``Release``)."""
        self._gpg("--clearsign", "--output", str(target), str(source))

    def close(self) -> None:
        """Stop this home's gpg-agent and delete the home."""
        subprocess.run(
            ["gpgconf", "--kill", "gpg-agent"], env=self._env, capture_output=True, timeout=30
        )
        shutil.rmtree(self.home, ignore_errors=True)


def _control(deb: Path) -> str:
    return subprocess.run(
        ["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True
    ).stdout


def _write_suite(
    dists: Path, suite: str, arch: str, packages: dict[str, str], key: SigningKey
) -> None:
    """``dists/{suite}``: a ``Packages`` index per component and a signed ``InRelease`` listing them."""
    sums = []
    for component, text in packages.items():
        index = dists / suite / component / f"binary-{arch}" / "Packages"
        index.parent.mkdir(parents=True, exist_ok=True)
        index.write_bytes(text.encode())
        sums.append(
            f" {hashlib.sha256(text.encode()).hexdigest()} {len(text.encode())} {component}/binary-{arch}/Packages\n"
        )
    release = dists / suite / "Release"
    release.write_text(
        f"Origin: rock-test\nLabel: rock-test\nSuite: {suite}\nCodename: {suite}\n"
        f"Date: {time.strftime('%a, %d %b %Y %H:%M:%S UTC', time.gmtime())}\n"
        f"Architectures: {arch}\nComponents: {' '.join(packages)}\nDescription: rock speedup test mirror\n"
        "SHA256:\n" + "".join(sums)
    )
    key.clearsign(release, dists / suite / "InRelease")


def add_debian_repo(
    root: Path, debs: list[Path], codename: str, arch: str, key: SigningKey
) -> None:
    """Lay out the suites ``AptSpeedup`` writes for ``codename`` under ``root``, signed with ``key``.

    ``debian/`` gets ``{codename}`` (``debs`` in ``main``) and ``{codename}-updates`` (empty);
    ``debian-security/`` gets ``{codename}-security`` (empty); each with Debian's components.
    """
    pool = root / "debian" / "pool" / "main"
    pool.mkdir(parents=True, exist_ok=True)
    stanzas = []
    for deb in debs:
        shutil.copy(deb, pool / deb.name)
        data = deb.read_bytes()
        stanzas.append(
            _control(deb).rstrip("\n")
            + f"\nFilename: pool/main/{deb.name}\nSize: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\n"
        )
    empty = dict.fromkeys(("main", "contrib", "non-free", "non-free-firmware"), "")
    _write_suite(
        root / "debian" / "dists", codename, arch, {**empty, "main": "\n".join(stanzas)}, key
    )
    _write_suite(root / "debian" / "dists", f"{codename}-updates", arch, empty, key)
    _write_suite(
        root / "debian-security" / "dists", f"{codename}-security", arch, {"main": ""}, key
    )


# -- finding the strategies ----------------------------------------------------------------------


def test_the_three_strategies_come_from_rock_speedups_entry_point() -> None:
    eps = [
        ep
        for ep in importlib.metadata.distribution("rock-speedup").entry_points
        if ep.group == "rock"
    ]
    assert [(ep.name, ep.value) for ep in eps] == [("speedup", "rock_speedup.plugin")]
    strategies = SpeedupExecutor.strategies()
    assert {t.value: strategies[t.value] for t in SpeedupType} == {
        "apt": AptSpeedup,
        "pip": PipSpeedup,
        "github": GitHubSpeedup,
    }


def test_speedup_type_is_rocks_enum() -> None:
    assert [(t.name, t.value) for t in SpeedupType] == [
        ("APT", "apt"),
        ("PIP", "pip"),
        ("GITHUB", "github"),
    ]
    assert SpeedupType("pip") is SpeedupType.PIP and SpeedupType.PIP == "pip"


# -- what each strategy writes -------------------------------------------------------------------


async def test_apt_points_the_images_own_release_at_the_mirror_and_keeps_the_first_backup(
    sandbox: Sandbox,
) -> None:
    original = await ok(sandbox, "cat /etc/apt/sources.list")
    codename = (await ok(sandbox, ". /etc/os-release && echo $VERSION_CODENAME")).strip()
    assert codename, "the test image names its release"

    obs = await sandbox.network.speedup(SpeedupType.APT, "http://mirror.example/")
    assert (obs.exit_code, obs.failure_reason) == (0, ""), obs.output
    assert deb_lines(await ok(sandbox, "cat /etc/apt/sources.list")) == [
        f"deb http://mirror.example/debian/ {codename} main non-free non-free-firmware contrib",
        f"deb http://mirror.example/debian-security/ {codename}-security main",
        f"deb http://mirror.example/debian/ {codename}-updates main non-free non-free-firmware contrib",
    ]
    assert await ok(sandbox, "cat /etc/apt/apt.conf.d/99speedup") == APT_CONF
    assert 'Acquire::Retries "3"' in APT_CONF and 'Acquire::http::Timeout "30"' in APT_CONF
    # apt-get update was not run: the package lists are gone and nothing fetched new ones.
    assert await ok(sandbox, "ls -A /var/lib/apt/lists /etc/apt/sources.list.d") == (
        "/etc/apt/sources.list.d:\n\n/var/lib/apt/lists:\n"
    )

    again = await sandbox.network.speedup(SpeedupType.APT, "https://other.example/base")
    assert again.exit_code == 0, again.output
    assert deb_lines(await ok(sandbox, "cat /etc/apt/sources.list")) == [
        f"deb https://other.example/base/debian/ {codename} main non-free non-free-firmware contrib",
        f"deb https://other.example/base/debian-security/ {codename}-security main",
        f"deb https://other.example/base/debian/ {codename}-updates main non-free non-free-firmware contrib",
    ]
    assert await ok(sandbox, "cat /etc/apt/sources.list.backup") == original


async def test_pip_writes_the_index_for_root_and_every_home_user(sandbox: Sandbox) -> None:
    user = f"sp{uuid.uuid4().hex[:8]}"
    assert await sandbox.remote_user.create_remote_user(user)

    obs = await sandbox.network.speedup(SpeedupType.PIP, "https://mirror.example/")
    assert obs.exit_code == 0, obs.output
    for home, owner in (("/root", "root"), (f"/home/{user}", user)):
        for conf in (f"{home}/.pip/pip.conf", f"{home}/.config/pip/pip.conf"):
            folder = conf.rpartition("/")[0]
            assert await ok(sandbox, f"stat -c %U {conf} {folder}") == f"{owner}\n{owner}\n"
            text = await ok(sandbox, f"cat {conf}")
            assert "index-url = https://mirror.example/pypi/simple/" in text
            assert "trusted-host" not in text  # https: the certificate stays checked
    # What pip itself reads, as root and as the user.
    for command in ("pip config list", f"su {user} -c 'pip config list'"):
        assert "global.index-url='https://mirror.example/pypi/simple/'" in await ok(
            sandbox, command
        )
    assert 'index-url = "https://mirror.example/pypi/simple/"' in await ok(
        sandbox, "cat /etc/uv/uv.toml"
    )

    # A plain-http mirror replaces it, and is trusted (pip refuses plain http otherwise).
    obs = await sandbox.network.speedup(SpeedupType.PIP, "http://127.0.0.1:3141")
    assert obs.exit_code == 0, obs.output
    listed = await ok(sandbox, f"su {user} -c 'pip config list'")
    assert "global.index-url='http://127.0.0.1:3141/pypi/simple/'" in listed
    assert "global.trusted-host='127.0.0.1:3141'" in listed
    assert "mirror.example" not in await ok(
        sandbox, f"cat /root/.pip/pip.conf /home/{user}/.pip/pip.conf /etc/uv/uv.toml"
    )


async def test_github_maps_githubs_hosts_and_replaces_earlier_entries(sandbox: Sandbox) -> None:
    await ok(
        sandbox,
        "echo '127.9.9.9 github.com' >> /etc/hosts && echo '127.0.0.2 keep.example' >> /etc/hosts",
    )
    before = await ok(sandbox, "cat /etc/hosts")

    obs = await sandbox.network.speedup(SpeedupType.GITHUB, "127.0.0.11")
    assert obs.exit_code == 0, obs.output
    obs = await sandbox.network.speedup(SpeedupType.GITHUB, " 127.0.0.12 ")
    assert obs.exit_code == 0, obs.output

    for host in GITHUB_HOSTS:
        assert (await ok(sandbox, f"getent hosts {host}")).split() == ["127.0.0.12", host]
    assert (await ok(sandbox, "getent hosts github.com")).split() == ["127.0.0.12", "github.com"]
    hosts = await ok(sandbox, "cat /etc/hosts")
    assert "127.9.9.9" not in hosts and "127.0.0.11" not in hosts
    assert "127.0.0.2 keep.example" in hosts and "localhost" in hosts
    assert await ok(sandbox, "cat /etc/hosts.backup") == before


# -- refusals change nothing -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("speedup_type", "value", "reason"),
    [
        (
            "nope",
            "http://mirror.example",
            r"Invalid speedup type: 'nope'; types available: apt, github, pip",
        ),
        (SpeedupType.APT, "mirror.example", r"speedup_value: 'mirror.example' .*needs a scheme"),
        (SpeedupType.PIP, "ftp://mirror.example", r"scheme must be http or https, not 'ftp'"),
        (
            SpeedupType.PIP,
            "http://mirror.example/simple; rm -rf /",
            r"characters a mirror URL cannot have",
        ),
        (
            SpeedupType.GITHUB,
            "999.1.1.1",
            r"speedup_value: '999.1.1.1' is not an IPv4 or IPv6 address",
        ),
        (SpeedupType.GITHUB, "github.com", r"'github.com' is not an IPv4 or IPv6 address"),
    ],
)
async def test_bad_input_is_a_failed_observation_and_changes_nothing(
    sandbox: Sandbox, speedup_type: Any, value: str, reason: str
) -> None:
    before = await snapshot(sandbox)
    obs = await sandbox.network.speedup(speedup_type, value)
    assert obs.exit_code == 1
    assert re.search(reason, obs.failure_reason), obs.failure_reason
    assert await snapshot(sandbox) == before


@pytest.fixture(scope="session")
def bare_image(docker_client: Any) -> str:
    """``python:3.11`` without apt-get and pip, whose commands run as the non-root user ``agent``."""
    dockerfile = (
        "FROM python:3.11\n"
        "RUN rm -f /usr/bin/apt /usr/bin/apt-get /usr/bin/pip /usr/bin/pip3 "
        "&& rm -rf /usr/lib/python3/dist-packages/pip && useradd -m agent\n"
        "USER agent\n"
    )
    docker_client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag=BARE_IMAGE, rm=True, pull=False
    )
    return BARE_IMAGE


@pytest.fixture(scope="module")
async def bare(engine: Any, small: dict[str, Any], bare_image: str) -> AsyncIterator[Sandbox]:
    sb = Sandbox(SandboxConfig(**{**small, "image": bare_image}))
    await sb.start()
    yield sb
    await sb.stop()


@pytest.mark.parametrize(
    ("speedup_type", "value", "reason"),
    [
        (SpeedupType.APT, "http://mirror.example", "apt-get is not installed in this image"),
        (SpeedupType.PIP, "http://mirror.example", "neither pip nor uv is installed in this image"),
        (SpeedupType.GITHUB, "127.0.0.11", "/etc/hosts is not writable (commands run as uid 1000)"),
    ],
)
async def test_a_failed_precheck_names_the_problem_and_changes_nothing(
    bare: Sandbox, speedup_type: SpeedupType, value: str, reason: str
) -> None:
    assert (await ok(bare, "id -un; command -v apt-get pip pip3 || true")) == "agent\n"
    before = await snapshot(bare)
    obs = await bare.network.speedup(speedup_type, value)
    assert obs.exit_code == 1
    assert (
        obs.failure_reason
        == f"Precheck failed: {speedup_type.value!r} speedup cannot run in this sandbox: {reason}"
    )
    assert await snapshot(bare) == before


# -- without rock-speedup, and with a third-party strategy -----------------------------------------


async def test_without_rock_speedup_the_failure_names_the_package(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROCK_DISABLE_PLUGINS", "speedup")
    before = await snapshot(sandbox)
    for speedup_type, value in (
        (SpeedupType.APT, "http://m.example"),
        (SpeedupType.PIP, "http://m.example"),
        (SpeedupType.GITHUB, "127.0.0.13"),
    ):
        obs = await sandbox.network.speedup(speedup_type=speedup_type, speedup_value=value)
        assert obs.exit_code == 1
        assert "`pip install rock-speedup`" in obs.failure_reason, obs.failure_reason
        assert f"no strategy serves {speedup_type.value!r}" in obs.failure_reason
        assert "ROCK_DISABLE_PLUGINS/ROCK_PLUGINS: speedup" in obs.failure_reason
    assert await snapshot(sandbox) == before


_NPM_PLUGIN = '''
from rock_core import hookimpl
from rock_core.errors import InvalidParameter
from rock_core.speedup import SpeedupStrategy


class NpmSpeedup(SpeedupStrategy):
    """npm installs from a mirror: ``registry=<mirror>/npm/`` in root's .npmrc."""

    name = "npm"

    def precheck_command(self):
        return "test -d /root || { echo 'no /root'; exit 1; }"

    def validate(self, value):
        value = super().validate(value)
        if not value.startswith(("http://", "https://")) or "'" in value:
            raise InvalidParameter(f"speedup_value: {value!r} is not an http(s) URL", field="speedup_value", value=value)
        return value.rstrip("/")

    def script(self, value):
        return f"set -e\\nprintf 'registry=%s/npm/\\\\n' '{value}' > /root/.npmrc\\necho npm uses {value}\\n"


@hookimpl
def rock_register_speedups(register):
    register("npm", NpmSpeedup)
'''


@pytest.fixture
def npm_plugin(tmp_path: Path) -> Iterator[str]:
    """A third-party distribution, ``rock-npm-speedup``, installed (on sys.path) with a ``rock`` entry point."""
    site = PluginSite(tmp_path / "site")
    module = site.install(
        "rock-npm-speedup", "0.1", entry_points={"npm-speedup": "{module}"}, source=_NPM_PLUGIN
    )
    with site.importable():
        yield module


async def test_a_third_party_strategy_is_found_and_run_the_same_way(
    sandbox: Sandbox, npm_plugin: str
) -> None:
    assert set(SpeedupExecutor.strategies()) == {"apt", "pip", "github", "npm"}
    obs = await sandbox.network.speedup("npm", "http://mirror.example/")
    assert obs.exit_code == 0, obs.failure_reason
    assert "npm uses http://mirror.example" in obs.output
    assert await ok(sandbox, "cat /root/.npmrc") == "registry=http://mirror.example/npm/\n"
    refused = await sandbox.network.speedup("npm", "mirror.example")
    assert refused.exit_code == 1
    assert "speedup_value: 'mirror.example' is not an http(s) URL" in refused.failure_reason
    assert await ok(sandbox, "cat /root/.npmrc") == "registry=http://mirror.example/npm/\n"


async def test_rocks_register_strategy_adds_a_type_in_process(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Marker(SpeedupStrategy):
        name = "marker"

        def precheck_command(self) -> str:
            return "true"

        def script(self, value: str) -> str:
            return f"echo {value} > /tmp/speedup-marker\n"

    monkeypatch.setattr(SpeedupExecutor, "_registered", {})
    with pytest.raises(InvalidParameter, match="strategy_cls"):
        SpeedupExecutor.register_strategy("broken", SpeedupStrategy)  # abstract
    SpeedupExecutor.register_strategy("marker", Marker)
    obs = await sandbox.network.speedup("marker", "written")
    assert obs.exit_code == 0, obs.failure_reason
    assert await ok(sandbox, "cat /tmp/speedup-marker") == "written\n"

    class Failing(Marker):
        def script(self, value: str) -> str:
            return f"echo cannot reach {value} >&2\nexit 3\n"

    SpeedupExecutor.register_strategy("marker", Failing)
    failed = await sandbox.network.speedup("marker", "nowhere")
    assert (failed.exit_code, failed.failure_reason) == (
        1,
        "Speedup script for 'marker' failed (exit code 3): cannot reach nowhere",
    )


# -- the sandbox's network -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("network", "said"),
    [
        ("wifi", "expected one of bridge, host, none, got 'wifi'"),
        ("None", "expected one of bridge, host, none, got 'None'"),
    ],
)
async def test_a_bad_network_is_refused_naming_the_field(
    engine: Any, small: dict[str, Any], new_id: Any, containers: Any, network: str, said: str
) -> None:
    sandbox_id = new_id("speedup-net")
    sb = Sandbox(SandboxConfig(**small, network=network, sandbox_id=sandbox_id))
    with pytest.raises(BadRequestRockError, match=r"network: " + re.escape(said)) as info:
        await sb.start()
    assert isinstance(info.value, InvalidParameter)
    assert containers(sandbox_id) == []


@pytest.mark.parametrize(
    ("body", "options"),
    [
        ({}, {}),
        ({"network": "host"}, {"network": "host"}),
        (
            {"network": "bridge", "use_kata_runtime": True},
            {"network": "bridge", "use_kata_runtime": True},
        ),
    ],
)
def test_the_network_travels_on_the_wire_into_the_runtime_options(
    body: dict[str, Any], options: dict[str, Any]
) -> None:
    request = structure_wire({"image": "python:3.11", **body}, SandboxStartRequest)
    assert structure_wire(unstructure_wire(request), SandboxStartRequest) == request
    assert spec_from_start_request(request).runtime_options == options


def test_the_network_field_must_be_text() -> None:
    with pytest.raises(ValueError, match="^network: expected a string, got 3$") as info:
        SandboxConfig(network=3)  # type: ignore[arg-type]
    assert isinstance(info.value, InvalidParameter) and info.value.field == "network"


# -- proof by real installs through mirrors on 127.0.0.1 ------------------------------------------


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MirrorServer]:
    """A mirror on 127.0.0.1 with a PEP 503 index of one wheel made here (the Debian part is added by the apt test)."""
    root = tmp_path_factory.mktemp("mirror")
    wheel = build_wheel(
        tmp_path_factory.mktemp("wheels"), PROBE, "1.0", f"VALUE = {PROBE_VALUE!r}\n"
    )
    add_simple_index(root, PROBE, [wheel])
    with MirrorServer(root) as server:
        yield server


@pytest.fixture(scope="module")
async def host_sandbox(
    engine: Any, small: dict[str, Any], docker_client: Any
) -> AsyncIterator[Sandbox]:
    """A sandbox on the host's network: it reaches the test's mirror on 127.0.0.1."""
    sb = Sandbox(SandboxConfig(**small, network="host"))
    await sb.start()
    assert sb.sandbox_id is not None
    (container,) = docker_client.containers.list(
        filters={"label": f"rock.sandbox_id={sb.sandbox_id}"}, ignore_removed=True
    )
    assert container.attrs["HostConfig"]["NetworkMode"] == "host"
    yield sb
    await sb.stop()


async def test_pip_installs_from_the_mirror_after_pip_speedup(
    host_sandbox: Sandbox, mirror: MirrorServer
) -> None:
    user = f"sp{uuid.uuid4().hex[:8]}"
    assert await host_sandbox.remote_user.create_remote_user(user)
    obs = await host_sandbox.network.speedup(SpeedupType.PIP, mirror.url)
    assert obs.exit_code == 0, obs.failure_reason

    # Debian's pip refuses to touch the system Python (PEP 668) unless told to.
    await ok(
        host_sandbox, f"pip install --no-cache-dir --break-system-packages {PROBE}", timeout=120
    )
    assert (
        await ok(host_sandbox, "python3 -c 'import rock_mirror_probe as m; print(m.VALUE)'")
        == PROBE_VALUE + "\n"
    )
    await ok(
        host_sandbox, f"su {user} -c 'pip download --no-cache-dir --no-deps -d /tmp/{user} {PROBE}'"
    )
    assert await ok(host_sandbox, f"ls /tmp/{user}") == "rock_mirror_probe-1.0-py3-none-any.whl\n"
    assert (
        len(mirror.served(f"/pypi/simple/{PROBE}/", "pip/")) >= 2
    )  # root's install and the user's download
    assert len(mirror.served("/pypi/packages/rock_mirror_probe-1.0-py3-none-any.whl", "pip/")) >= 2


async def test_uv_in_the_sandbox_uses_the_same_index(
    host_sandbox: Sandbox, mirror: MirrorServer
) -> None:
    uv = find_uv_binary()
    if uv is None:
        pytest.fail(
            "no uv executable on this machine to copy into the sandbox; `make test` installs uv"
        )
    obs = await host_sandbox.network.speedup(SpeedupType.PIP, mirror.url + "/")
    assert obs.exit_code == 0, obs.failure_reason
    uploaded = await host_sandbox.upload_by_path(uv, "/usr/local/bin/uv")
    assert uploaded.success, uploaded.message
    await ok(host_sandbox, "chmod 755 /usr/local/bin/uv")
    # No --index-url: uv finds the mirror in /etc/uv/uv.toml.
    await ok(
        host_sandbox, f"uv pip install --no-cache --target /tmp/uv-target {PROBE}", timeout=120
    )
    assert (
        await ok(host_sandbox, "cat /tmp/uv-target/rock_mirror_probe/__init__.py")
        == f"VALUE = {PROBE_VALUE!r}\n"
    )
    assert mirror.served(f"/pypi/simple/{PROBE}/", "uv/")
    assert mirror.served("/pypi/packages/rock_mirror_probe-1.0-py3-none-any.whl", "uv/")


@pytest.fixture(scope="module")
def hello_deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """GNU hello's .deb for the host's Debian release, fetched by the host's apt (52 kB, libc6 only)."""
    try:
        return download_deb("hello", tmp_path_factory.mktemp("debs"))
    except (RuntimeError, OSError) as exc:
        pytest.fail(f"cannot build the test's Debian mirror: {exc}")


async def test_apt_installs_from_the_mirror_after_apt_speedup(
    host_sandbox: Sandbox, mirror: MirrorServer, hello_deb: Path
) -> None:
    codename = (await ok(host_sandbox, ". /etc/os-release && echo $VERSION_CODENAME")).strip()
    arch = (await ok(host_sandbox, "dpkg --print-architecture")).strip()
    host_arch = subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True
    ).stdout.strip()
    assert arch == host_arch
    assert (await sh(host_sandbox, "command -v hello")).exit_code != 0
    key = SigningKey()
    try:
        add_debian_repo(mirror.root, [hello_deb], codename, arch, key)
        public_key = key.public_armored
    finally:
        key.close()

    obs = await host_sandbox.network.speedup(SpeedupType.APT, mirror.url)
    assert obs.exit_code == 0, obs.failure_reason
    # The mirror is signed by the test's own key: the sandbox trusts it, as images trust Debian's.
    written = await host_sandbox.write_file_by_path(
        public_key, "/etc/apt/trusted.gpg.d/rock-speedup-test.asc"
    )
    assert written.success, written.message
    out = await ok(
        host_sandbox, "apt-get update 2>&1 && apt-get install -y hello 2>&1", timeout=180
    )
    assert f"Get:1 {mirror.url}/debian {codename} InRelease" in out
    # Signatures checked, every configured suite and component found: a clean update.
    assert not re.search(r"^(W|E):", out, re.MULTILINE), out
    assert f"{mirror.url}/debian {codename}/main {arch} hello" in out
    assert await ok(host_sandbox, "hello") == "Hello, world!\n"
    assert mirror.served(f"/debian/dists/{codename}/InRelease")
    assert mirror.served(f"/debian-security/dists/{codename}-security/InRelease")
    assert mirror.served(f"/debian/pool/main/{hello_deb.name}")
