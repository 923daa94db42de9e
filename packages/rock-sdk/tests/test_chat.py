"""The Chat protocol against real sandboxes on the local Docker engine (``ROCK_TEST_REMOTE=1``:
through a real admin): 40 prompts, half of them in Chinese, each checked by what it did in the
sandbox; installs through mirrors served here on 127.0.0.1 (a PEP 503 index, a signed Debian
repository); the optional LLM backend against :class:`OpenAIStub`, a chat-completions server
on 127.0.0.1 whose "model" each test scripts; ``rock sandbox chat`` against a real admin.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from rock.actions import Command
from rock.sdk.chat import ChatConfig, ChatResponse, LLMConfig, close_envs
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig

pytestmark = pytest.mark.anyio

ROCK = Path(sys.executable).with_name("rock")
PIP_PROBES = ("chatprobe-en", "chatprobe-zh")
APT_PROBES = ("rock-chat-probe-en", "rock-chat-probe-zh")


# -- mirrors on 127.0.0.1 -----------------------------------------------------------------------------


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        status = str(getattr(code, "value", code))
        with self.server.lock:  # type: ignore[attr-defined]
            self.server.paths.append(  # type: ignore[attr-defined]
                (
                    self.path,
                    self.headers.get("User-Agent", ""),
                    int(status) if status.isdigit() else 0,
                )
            )

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        pass


class Mirror:
    """Files of ``root`` served on a free port of 127.0.0.1; :meth:`served` says what was fetched."""

    def __init__(self, root: Path) -> None:
        self.server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root))
        )
        self.server.daemon_threads = True
        self.server.lock = threading.Lock()  # type: ignore[attr-defined]
        self.server.paths = []  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever,
            args=(0.05,),  # shutdown() waits one poll: a twentieth of a second, not half
            daemon=True,
        )
        self.thread.start()

    def served(self, part: str, agent: str = "") -> list[str]:
        """Paths answered with 2xx that contain ``part``, fetched by a User-Agent starting with ``agent``."""
        with self.server.lock:  # type: ignore[attr-defined]
            return [
                p
                for p, ua, status in self.server.paths
                if part in p and ua.startswith(agent) and 200 <= status < 300
            ]  # type: ignore[attr-defined]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _wheel(out: Path, name: str) -> Path:
    module = name.replace("-", "_")
    info = f"{module}-1.0.dist-info"
    files = {
        f"{module}/__init__.py": b"WHERE = 'the rock chat test mirror'\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: rock-chat-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    digest = lambda data: (
        "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    )  # noqa: E731
    files[f"{info}/RECORD"] = (
        "".join(f"{p},{digest(d)},{len(d)}\n" for p, d in files.items()) + f"{info}/RECORD,,\n"
    ).encode()
    wheel = out / f"{module}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return wheel


def _pypi(root: Path, names: tuple[str, ...]) -> None:
    """A PEP 503 index of one wheel per name under ``root/pypi/simple``."""
    packages = root / "pypi" / "packages"
    packages.mkdir(parents=True)
    for name in names:
        wheel = _wheel(packages, name)
        page = root / "pypi" / "simple" / name
        page.mkdir(parents=True)
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        (page / "index.html").write_text(
            f'<html><body><a href="../../packages/{wheel.name}#sha256={sha}">{wheel.name}</a></body></html>\n'
        )


class _Gpg:
    """A throwaway signing key (its own GNUPGHOME, short enough for gpg-agent's socket)."""

    def __init__(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="rock-chat-gpg-"))
        self.env = {**os.environ, "GNUPGHOME": str(self.home)}
        self(
            "--passphrase",
            "",
            "--quick-gen-key",
            "rock chat test <chat-test@rock.invalid>",
            "ed25519",
            "sign",
            "never",
        )
        self.public = self("--armor", "--export").stdout

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["gpg", "--batch", "--quiet", "--yes", "--pinentry-mode", "loopback", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )

    def close(self) -> None:
        subprocess.run(
            ["gpgconf", "--kill", "gpg-agent"], env=self.env, capture_output=True, timeout=30
        )
        shutil.rmtree(self.home, ignore_errors=True)


def _debian(root: Path, names: tuple[str, ...], codename: str, arch: str, gpg: _Gpg) -> None:
    """A Debian repository laid out as rock-speedup's sources name it (``debian/`` with the
    release and its ``-updates``, ``debian-security/``), holding one small package per name."""
    pool = root / "debian" / "pool" / "main"
    pool.mkdir(parents=True)
    stanzas = []
    for name in names:
        tree = root / "build" / name
        (tree / "DEBIAN").mkdir(parents=True)
        (tree / "usr" / "share" / name).mkdir(parents=True)
        (tree / "usr" / "share" / name / "hello.txt").write_text(
            "installed from the rock chat test mirror\n"
        )
        control = f"Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: rock tests <chat-test@rock.invalid>\nDescription: a package the chat tests install\n"
        (tree / "DEBIAN" / "control").write_text(control)
        deb = pool / f"{name}_1.0_all.deb"
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "--build", str(tree), str(deb)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        data = deb.read_bytes()
        stanzas.append(
            f"{control}Filename: pool/main/{deb.name}\nSize: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\n"
        )
    components = ("main", "contrib", "non-free", "non-free-firmware")
    suites = [
        (
            root / "debian" / "dists" / codename,
            {c: "\n".join(stanzas) if c == "main" else "" for c in components},
        ),
        (root / "debian" / "dists" / f"{codename}-updates", dict.fromkeys(components, "")),
        (root / "debian-security" / "dists" / f"{codename}-security", {"main": ""}),
    ]
    for suite, indexes in suites:
        sums = []
        for component, text in indexes.items():
            index = suite / component / f"binary-{arch}" / "Packages"
            index.parent.mkdir(parents=True, exist_ok=True)
            index.write_text(text)
            sums.append(
                f" {hashlib.sha256(text.encode()).hexdigest()} {len(text.encode())} {component}/binary-{arch}/Packages\n"
            )
        date = time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime())
        (suite / "Release").write_text(
            f"Origin: rock-chat-test\nSuite: {suite.name}\nCodename: {suite.name}\nDate: {date}\n"
            f"Architectures: {arch}\nComponents: {' '.join(indexes)}\nSHA256:\n{''.join(sums)}"
        )
        gpg("--clearsign", "--output", str(suite / "InRelease"), str(suite / "Release"))


@attrs.frozen
class Mirrors:
    """The PyPI and Debian mirrors of this module and the key the Debian one is signed with."""

    pypi: Mirror
    debian: Mirror
    public_key: str

    def config(self, **changes: Any) -> ChatConfig:
        """A chat config installing through both."""
        return ChatConfig(pip_mirror=self.pypi.url, apt_mirror=self.debian.url, **changes)


@pytest.fixture(scope="module")
def mirrors(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mirrors]:
    """Both mirrors, made here (the Debian one for ``python:3.11``'s bookworm on this machine's CPU)."""
    for tool in ("dpkg-deb", "gpg"):
        if shutil.which(tool) is None:
            pytest.fail(
                f"{tool} is needed to build the test's Debian mirror (apt-get install {'dpkg' if tool == 'dpkg-deb' else 'gnupg'})"
            )
    arch = subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True
    ).stdout.strip()
    root = tmp_path_factory.mktemp("chat-mirrors")
    _pypi(root / "pypi-root", PIP_PROBES)
    gpg = _Gpg()
    try:
        _debian(root / "debian-root", APT_PROBES, "bookworm", arch, gpg)
        found = Mirrors(Mirror(root / "pypi-root"), Mirror(root / "debian-root"), gpg.public)
    finally:
        gpg.close()
    yield found
    found.pypi.close()
    found.debian.close()


@pytest.fixture(scope="module")
async def box(engine: Any, small: dict[str, Any], mirrors: Mirrors) -> AsyncIterator[Sandbox]:
    """The module's sandbox, on the host's network (to reach the mirrors on 127.0.0.1), trusting
    the Debian mirror's key; the GEM envs its chats made are closed at the end."""
    sandbox = Sandbox(SandboxConfig(**small, network="host"))
    await sandbox.start()
    await sandbox.write_file_by_path(
        mirrors.public_key, "/etc/apt/trusted.gpg.d/rock-chat-test.asc"
    )
    yield sandbox
    await close_envs(sandbox)
    await sandbox.stop()


async def sh(sandbox: Sandbox, script: str) -> tuple[int | None, str]:
    """``(exit code, stdout+stderr)`` of ``script`` in the sandbox."""
    result = await sandbox.execute(Command(command=["/bin/sh", "-c", script], timeout=120))
    return result.exit_code, result.stdout + result.stderr


# -- the 40 prompts ---------------------------------------------------------------------------------------

Check = Callable[[Sandbox, ChatResponse, Mirrors, str], Awaitable[None]]
Setup = Callable[[Sandbox, str], Awaitable[Any]]


@attrs.frozen
class Case:
    """One prompt: the action it must plan, what to prepare, and what must hold afterwards."""

    prompt: str
    action: str | None
    check: Check
    setup: Setup | None = None
    confirm: bool = False
    own_sandbox: bool = False  # it stops its sandbox: a fresh one


def ran_ok(response: ChatResponse) -> None:
    assert response.ok, response.reply
    assert not response.needs_confirmation
    [action] = response.actions
    first = response.reply.splitlines()[0]
    assert first in (f"Will run: {action.preview}", f"将执行：{action.preview}"), response.reply


def says(*parts: str) -> Check:
    async def check(sandbox: Sandbox, response: ChatResponse, mirrors: Mirrors, tag: str) -> None:
        ran_ok(response)
        for part in parts:
            assert part in response.reply, response.reply

    return check


def file_is(path: str, content: str) -> Check:
    async def check(sandbox: Sandbox, response: ChatResponse, mirrors: Mirrors, tag: str) -> None:
        ran_ok(response)
        assert await sandbox.download(path.replace(T, tag)) == content.encode()

    return check


def files(folder: str, *names: str) -> Setup:
    async def setup(sandbox: Sandbox, tag: str) -> None:
        for name in names:
            await sandbox.write_file_by_path(
                f"{name} content\n", f"{folder.replace(T, tag)}/{name}"
            )

    return setup


def listed(*names: str) -> Check:
    async def check(sandbox: Sandbox, response: ChatResponse, mirrors: Mirrors, tag: str) -> None:
        ran_ok(response)
        assert response.observations[0].data is not None
        assert set(names) <= set(response.observations[0].data["names"])
        for name in names:
            assert name in response.reply

    return check


def pip_installed(module: str) -> Check:
    async def check(sandbox: Sandbox, response: ChatResponse, mirrors: Mirrors, tag: str) -> None:
        ran_ok(response)
        code, out = await sh(sandbox, f"python3 -c 'import {module}; print({module}.WHERE)'")
        assert (code, out.strip()) == (0, "the rock chat test mirror")
        wheel = f"{module}-1.0-py3-none-any.whl"
        assert mirrors.pypi.served(wheel, "pip/"), "pip fetched the wheel from the test mirror"
        assert mirrors.pypi.url in response.reply  # the reply says the mirror was used

    return check


def apt_installed(name: str) -> Check:
    async def check(sandbox: Sandbox, response: ChatResponse, mirrors: Mirrors, tag: str) -> None:
        ran_ok(response)
        code, out = await sh(
            sandbox, f"dpkg -s {name} | grep Status; cat /usr/share/{name}/hello.txt"
        )
        assert code == 0 and "install ok installed" in out and "rock chat test mirror" in out, out
        assert mirrors.debian.served(f"{name}_1.0_all.deb", "Debian APT")

    return check


def failed(code: int, *parts: str) -> Check:
    async def check(sandbox: Sandbox, response: ChatResponse, mirrors: Mirrors, tag: str) -> None:
        assert not response.ok and response.observations[0].exit_code == code, response.reply
        for part in parts:
            assert part in response.reply, response.reply

    return check


def refused(path: str, *parts: str) -> Check:
    """A destructive action without confirm: shown, not run."""

    async def check(sandbox: Sandbox, response: ChatResponse, mirrors: Mirrors, tag: str) -> None:
        assert response.needs_confirmation and response.observations == [], response.reply
        assert response.actions[0].destructive and response.actions[0].preview in response.reply
        assert (await sh(sandbox, f"test -e {path.replace(T, tag)}"))[0] == 0, "nothing was deleted"
        for part in parts:
            assert part in response.reply, response.reply

    return check


def gone(path: str) -> Check:
    async def check(sandbox: Sandbox, response: ChatResponse, mirrors: Mirrors, tag: str) -> None:
        ran_ok(response)
        assert (await sh(sandbox, f"test -e {path.replace(T, tag)}"))[0] == 1

    return check


def stats(*parts: str) -> Check:
    async def check(sandbox: Sandbox, response: ChatResponse, mirrors: Mirrors, tag: str) -> None:
        ran_ok(response)
        data = response.observations[0].data or {}
        assert isinstance(data.get("mem"), (int, float)) and isinstance(
            data.get("cpu"), (int, float)
        ), data
        for part in parts:
            assert part in response.reply

    return check


def state_running(*parts: str) -> Check:
    async def check(sandbox: Sandbox, response: ChatResponse, mirrors: Mirrors, tag: str) -> None:
        ran_ok(response)
        assert (response.observations[0].data or {})["state"] == "running"
        assert sandbox.sandbox_id in response.reply
        for part in parts:
            assert part in response.reply

    return check


def stopped(*parts: str) -> Check:
    async def check(sandbox: Sandbox, response: ChatResponse, mirrors: Mirrors, tag: str) -> None:
        ran_ok(response)
        assert (await sandbox.is_alive()).is_alive is False
        for part in parts:
            assert part in response.reply

    return check


def unknown(intro: str) -> Check:
    async def check(sandbox: Sandbox, response: ChatResponse, mirrors: Mirrors, tag: str) -> None:
        assert response.reply.startswith(intro)
        assert (response.actions, response.observations, response.backend) == ([], [], None)
        assert "numpy" in response.reply and "/tmp" in response.reply  # the examples

    return check


async def an_env(sandbox: Sandbox, tag: str) -> None:
    response = await sandbox.chat("start a Sokoban environment", config=ChatConfig())
    assert response.ok, response.reply


def env_made(env_id: str) -> Check:
    async def check(sandbox: Sandbox, response: ChatResponse, mirrors: Mirrors, tag: str) -> None:
        ran_ok(response)
        data = response.observations[0].data or {}
        assert data["env_id"] == env_id and data["env"] in response.reply
        assert "Sokoban" in response.reply and "\\boxed" in response.reply

    return check


def env_answered(*keys: str) -> Check:
    async def check(sandbox: Sandbox, response: ChatResponse, mirrors: Mirrors, tag: str) -> None:
        ran_ok(response)
        data = response.observations[0].data or {}
        assert data["env"] in response.reply
        for key in keys:
            assert key in data, data

    return check


def env_closed() -> Check:
    async def check(sandbox: Sandbox, response: ChatResponse, mirrors: Mirrors, tag: str) -> None:
        ran_ok(response)
        handle = (response.observations[0].data or {})["env"]
        again = await sandbox.chat(f"step up in env {handle}", config=ChatConfig())
        assert not again.ok and "no_env" in again.reply, again.reply

    return check


async def a_log(sandbox: Sandbox, tag: str) -> None:
    await sandbox.write_file_by_path("one\ntwo\nthree\n", f"/tmp/{tag}/app.log")


async def doomed(sandbox: Sandbox, tag: str) -> None:
    assert (
        await sh(
            sandbox,
            f"mkdir -p /tmp/{tag}/dir && touch /tmp/{tag}/d.txt /tmp/{tag}/d2.txt /tmp/{tag}/dir/x",
        )
    )[0] == 0


T = "{tag}"  # replaced by each case's own folder under /tmp

CASES: list[Case] = [
    # English
    Case("run `echo chat says hi`", "run_command", says("chat says hi", "exited with code 0")),
    Case(
        "execute: python3 -c 'import sys; sys.exit(3)'",
        "run_command",
        failed(3, "Failed", "exit code 3"),
    ),
    Case(
        "install the python package chatprobe-en",
        "install_python_packages",
        pip_installed("chatprobe_en"),
    ),
    Case(
        "apt install rock-chat-probe-en",
        "install_apt_packages",
        apt_installed("rock-chat-probe-en"),
    ),
    Case("show resource usage", "show_resource_usage", stats("memory:", "cpu:", "Resource usage")),
    Case("how much memory is the sandbox using?", "show_resource_usage", stats("memory:")),
    Case(
        f"list files in /tmp/{T}",
        "list_files",
        listed("a.txt", "b.txt"),
        files(f"/tmp/{T}", "a.txt", "b.txt"),
    ),
    Case("read /etc/os-release", "read_file", says("Debian", "Content of /etc/os-release")),
    Case(
        f'write "hello from chat" to /tmp/{T}/w.txt',
        "write_file",
        file_is(f"/tmp/{T}/w.txt", "hello from chat"),
    ),
    Case(
        f"create file /tmp/{T}/deep/er.txt with content nested",
        "write_file",
        file_is(f"/tmp/{T}/deep/er.txt", "nested"),
    ),
    Case(
        f"delete /tmp/{T}/d.txt",
        "delete_file",
        refused(f"/tmp/{T}/d.txt", "destructive", "confirm=True"),
        doomed,
    ),
    Case(f"remove /tmp/{T}/dir", "delete_file", gone(f"/tmp/{T}/dir"), doomed, confirm=True),
    Case(
        f"run `rm -rf /tmp/{T}/dir`",
        "run_command",
        refused(f"/tmp/{T}/dir", "nothing was run"),
        doomed,
    ),
    Case("show status", "show_status", state_running("state: running", "python:3.11")),
    Case("show the logs", "show_logs", says("pending -> running", "Lifecycle of sandbox")),
    Case(
        f"show the last 2 lines of the log /tmp/{T}/app.log",
        "show_logs",
        says("    two\n    three"),
        a_log,
    ),
    Case("start a Sokoban environment with seed 7", "make_env", env_made("game:Sokoban-v0-easy")),
    Case("step left", "step_env", env_answered("reward", "terminated", "truncated"), an_env),
    Case("make me a sandwich", None, unknown("I did not understand")),
    Case(
        "stop the sandbox",
        "stop_sandbox",
        stopped("Stopped sandbox"),
        confirm=True,
        own_sandbox=True,
    ),
    # Chinese
    Case("运行 `echo 你好，沙箱`", "run_command", says("你好，沙箱", "退出码 0")),
    Case("执行命令 `ls /没有这个目录`", "run_command", failed(2, "失败", "退出码 2")),
    Case("安装 Python 包 chatprobe-zh", "install_python_packages", pip_installed("chatprobe_zh")),
    Case(
        "用 apt 安装 rock-chat-probe-zh",
        "install_apt_packages",
        apt_installed("rock-chat-probe-zh"),
    ),
    Case("显示资源使用情况", "show_resource_usage", stats("的资源使用情况", "memory:")),
    Case("内存和 CPU 占用多少？", "show_resource_usage", stats("memory:")),
    Case(
        f"列出 /tmp/{T} 中的文件",
        "list_files",
        listed("甲.txt", "乙.txt"),
        files(f"/tmp/{T}", "甲.txt", "乙.txt"),
    ),
    Case(f"/tmp/{T} 目录下有哪些文件", "list_files", listed("c.txt"), files(f"/tmp/{T}", "c.txt")),
    Case("查看文件 /etc/hostname", "read_file", says("/etc/hostname 的内容")),
    Case(
        f'把 "你好，世界" 写入 /tmp/{T}/w.txt',
        "write_file",
        file_is(f"/tmp/{T}/w.txt", "你好，世界"),
    ),
    Case(
        f"创建文件 /tmp/{T}/深/层.txt 内容为 嵌套的内容",
        "write_file",
        file_is(f"/tmp/{T}/深/层.txt", "嵌套的内容"),
    ),
    Case(
        f"删除 /tmp/{T}/d.txt",
        "delete_file",
        refused(f"/tmp/{T}/d.txt", "破坏性操作", "confirm=True"),
        doomed,
    ),
    Case(
        f"删除文件 /tmp/{T}/d2.txt", "delete_file", gone(f"/tmp/{T}/d2.txt"), doomed, confirm=True
    ),
    Case("查看沙箱状态", "show_status", state_running("的状态", "state: running")),
    Case("查看日志", "show_logs", says("的生命周期记录", "pending -> running")),
    Case("创建一个推箱子环境", "make_env", env_made("game:Sokoban-v0-easy")),
    Case("重置环境，种子 5", "reset_env", env_answered("observation", "info"), an_env),
    Case("关闭环境", "close_env", env_closed(), an_env, confirm=True),
    Case("给我讲个笑话", None, unknown("我没有理解")),
    Case("停止沙箱", "stop_sandbox", stopped("已停止沙箱"), confirm=True, own_sandbox=True),
]


def test_forty_prompts_half_in_chinese() -> None:
    from rock.sdk.chat import detect_language

    assert len(CASES) == 40 and len({c.prompt for c in CASES}) == 40
    assert sum(detect_language(c.prompt) == "zh" for c in CASES) == 20


@pytest.mark.parametrize("case", CASES, ids=[c.prompt for c in CASES])
async def test_prompt(case: Case, box: Sandbox, mirrors: Mirrors, small: dict[str, Any]) -> None:
    tag = f"chat-{uuid.uuid4().hex[:8]}"
    prompt = case.prompt.replace(T, tag)
    sandbox = box
    if case.own_sandbox:
        sandbox = Sandbox(SandboxConfig(**small))
        await sandbox.start()
    try:
        if case.setup is not None:
            await case.setup(sandbox, tag)
        response = await sandbox.chat(prompt, confirm=case.confirm, config=mirrors.config())
        assert response.language == (
            "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in prompt) else "en"
        )
        assert [a.name for a in response.actions] == ([case.action] if case.action else []), (
            response.reply
        )
        await case.check(sandbox, response, mirrors, tag)
    finally:
        if case.own_sandbox:
            await sandbox.stop()


# -- showing before running -----------------------------------------------------------------------


async def test_dry_run_shows_and_runs_nothing(box: Sandbox) -> None:
    path = f"/tmp/chat-dry-{uuid.uuid4().hex[:6]}"
    response = await box.chat(f'write "x" to {path}', dry_run=True, config=ChatConfig())
    assert response.observations == [] and not response.needs_confirmation
    assert response.reply.splitlines() == [
        f"Will run: sandbox.write_file_by_path(<1 bytes>, '{path}')",
        "Dry run: nothing was run.",
    ]
    assert (await sh(box, f"test -e {path}"))[0] == 1


async def test_each_action_is_announced_before_it_runs(box: Sandbox) -> None:
    path = f"/tmp/chat-order-{uuid.uuid4().hex[:6]}"
    seen: list[str] = []

    def announce(action: Any) -> None:
        seen.append(action.preview)

    response = await box.chat(f"run `touch {path}`", config=ChatConfig(), on_action=announce)
    assert seen == [f"touch {path}"] and response.ok
    assert response.reply.index("Will run:") < response.reply.index("exited with code")


async def test_an_install_that_fails_says_why(box: Sandbox, mirrors: Mirrors) -> None:
    response = await box.chat("安装 no-such-package-anywhere", config=mirrors.config())
    assert not response.ok and response.observations[0].exit_code not in (0, None)
    assert response.reply.startswith("将执行：sandbox.network.speedup('pip'")
    assert "失败" in response.reply and "no-such-package-anywhere" in response.reply


async def test_without_mirrors_an_install_uses_what_the_sandbox_has(box: Sandbox) -> None:
    # No mirror configured: no speedup step; pip reads the sandbox's own settings (here the
    # mirror an earlier install wrote, or the public index).
    response = await box.chat("install chatprobe-en", dry_run=True, config=ChatConfig())
    assert (
        response.actions[0].preview
        == "python3 -m pip install --disable-pip-version-check --no-input chatprobe-en"
    )


# -- the LLM backend --------------------------------------------------------------------------------------


class OpenAIStub:
    """A chat-completions server on 127.0.0.1 (OpenAI's protocol: ``POST /v1/chat/completions``,
    ``GET /v1/models``) whose answers come from ``model``, a function of the request body that
    returns the assistant's message. :attr:`requests` keeps each request (headers and body)."""

    def __init__(
        self, model: Callable[[dict[str, Any]], dict[str, Any]], name: str = "stub-model"
    ) -> None:
        stub = self
        self.model = model
        self.name = name
        self.requests: list[dict[str, Any]] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                if self.path == "/v1/models":
                    self._answer(
                        200,
                        {
                            "object": "list",
                            "data": [
                                {"id": stub.name, "object": "model", "owned_by": "rock-tests"}
                            ],
                        },
                    )
                else:
                    self._answer(
                        404,
                        {
                            "error": {
                                "message": f"no route {self.path}",
                                "type": "invalid_request_error",
                            }
                        },
                    )

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(
                    self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}"
                )
                if self.path != "/v1/chat/completions":
                    self._answer(
                        404,
                        {
                            "error": {
                                "message": f"no route {self.path}",
                                "type": "invalid_request_error",
                            }
                        },
                    )
                    return
                stub.requests.append({"headers": dict(self.headers), "body": body})
                if body.get("model") != stub.name:
                    self._answer(
                        404,
                        {
                            "error": {
                                "message": f"model {body.get('model')!r} not found",
                                "type": "invalid_request_error",
                            }
                        },
                    )
                    return
                message = {"role": "assistant", "content": None, **stub.model(body)}
                self._answer(
                    200,
                    {
                        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": stub.name,
                        "choices": [
                            {
                                "index": 0,
                                "message": message,
                                "finish_reason": "tool_calls"
                                if message.get("tool_calls")
                                else "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                    },
                )

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(
            target=self.server.serve_forever,
            args=(0.05,),  # shutdown() waits one poll: a twentieth of a second, not half
            daemon=True,
        ).start()

    def config(self, **kwargs: Any) -> ChatConfig:
        """A chat config that asks this stub."""
        return ChatConfig(
            llm=LLMConfig(base_url=self.base_url, model=self.name, api_key="sk-rock-test"), **kwargs
        )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """A tool call as OpenAI writes it (arguments as a JSON string)."""
    return {
        "id": f"call_{uuid.uuid4().hex[:8]}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def scripted(
    calls: list[dict[str, Any]], answer: Callable[[list[dict[str, Any]]], str]
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A "model" that makes ``calls`` when the user speaks, then answers from the tool results."""

    def model(body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]
        if last["role"] == "user":
            return {"tool_calls": calls}
        results = [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]
        return {"content": answer(results)}

    return model


@pytest.fixture
def stub_factory() -> Iterator[Callable[..., OpenAIStub]]:
    made: list[OpenAIStub] = []

    def make(model: Callable[[dict[str, Any]], dict[str, Any]]) -> OpenAIStub:
        made.append(OpenAIStub(model))
        return made[-1]

    yield make
    for stub in made:
        stub.close()


async def test_the_model_drives_the_same_actions_as_tools(box: Sandbox, stub_factory: Any) -> None:
    stub = stub_factory(
        scripted(
            [call("run_command", command="python3 --version")],
            lambda results: f"It has {results[0]['output'].strip()}.",
        )
    )
    prompt = "which python does this thing ship with?"
    response = await box.chat(prompt, config=stub.config())
    assert response.backend == "llm" and response.language == "en"
    assert [(a.name, a.args) for a in response.actions] == [
        ("run_command", {"command": "python3 --version"})
    ]
    assert (
        response.observations[0].exit_code == 0 and "Python 3.11" in response.observations[0].output
    )
    lines = response.reply.splitlines()
    assert lines[0] == "Will run: python3 --version" and lines[-1].startswith("It has Python 3.11")
    first, second = stub.requests
    assert first["headers"]["Authorization"] == "Bearer sk-rock-test"
    assert first["body"]["model"] == "stub-model" and first["body"]["messages"][-1] == {
        "role": "user",
        "content": prompt,
    }
    assert "English" in first["body"]["messages"][0]["content"]
    from rock.sdk.chat.actions import available_actions

    assert [t["function"]["name"] for t in first["body"]["tools"]] == [
        s.name for s in available_actions(None)
    ]
    tool_message = second["body"]["messages"][-1]
    assert (
        tool_message["role"] == "tool"
        and tool_message["tool_call_id"] == second["body"]["messages"][-2]["tool_calls"][0]["id"]
    )
    assert json.loads(tool_message["content"])["exit_code"] == 0


async def test_the_model_answers_in_chinese_for_a_chinese_prompt(
    box: Sandbox, stub_factory: Any
) -> None:
    stub = stub_factory(
        scripted(
            [call("run_command", command="hostname")],
            lambda r: f"主机名是 {r[0]['output'].strip()}。",
        )
    )
    response = await box.chat("这台机器叫什么名字？", config=stub.config())
    assert response.language == "zh" and response.backend == "llm"
    assert response.reply.splitlines()[0] == "将执行：hostname" and response.reply.splitlines()[
        -1
    ].startswith("主机名是 ")
    assert "Chinese" in stub.requests[0]["body"]["messages"][0]["content"]


async def test_a_destructive_tool_call_waits_for_confirm(box: Sandbox, stub_factory: Any) -> None:
    folder = f"/tmp/chat-llm-{uuid.uuid4().hex[:6]}"
    assert (await sh(box, f"mkdir -p {folder} && touch {folder}/x"))[0] == 0
    stub = stub_factory(
        scripted(
            [call("delete_file", path=folder)],
            lambda r: "Cleaned up." if r[0]["ok"] else "It failed.",
        )
    )
    prompt = f"tidy up by wiping {folder} for me"
    response = await box.chat(prompt, config=stub.config())
    assert response.needs_confirmation and response.observations == [] and response.backend == "llm"
    assert f"rm -rf -- {folder}" in response.reply and (await sh(box, f"test -e {folder}"))[0] == 0
    assert len(stub.requests) == 1  # the model was not told anything ran

    confirmed = await box.chat(prompt, config=stub.config(), confirm=True)
    assert confirmed.ok and confirmed.reply.endswith("Cleaned up.")
    assert (await sh(box, f"test -e {folder}"))[0] == 1


async def test_a_bad_tool_call_is_refused_and_the_model_told(
    box: Sandbox, stub_factory: Any
) -> None:
    stub = stub_factory(
        scripted(
            [
                call("format_disk", device="/dev/sda"),
                call("install_python_packages", packages=["ok", "bad;rm -rf /"]),
            ],
            lambda results: " / ".join(r.get("error", "") for r in results),
        )
    )
    response = await box.chat("do something clever", config=stub.config())
    assert response.actions == [] and response.observations == []
    assert (
        "unknown action 'format_disk'" in response.reply
        and "install_python_packages.packages[1]" in response.reply
    )
    tool_results = [
        json.loads(m["content"])
        for m in stub.requests[1]["body"]["messages"]
        if m["role"] == "tool"
    ]
    assert [r["ok"] for r in tool_results] == [False, False]


async def test_a_prompt_the_rules_know_never_reaches_the_model(
    box: Sandbox, stub_factory: Any
) -> None:
    stub = stub_factory(scripted([], lambda r: "unused"))
    response = await box.chat("show status", config=stub.config())
    assert response.backend == "rules" and response.ok and stub.requests == []


async def test_a_model_that_only_talks_runs_nothing(box: Sandbox, stub_factory: Any) -> None:
    stub = stub_factory(
        lambda body: {"content": "I can install packages, run commands and show files."}
    )
    response = await box.chat("what are you?", config=stub.config())
    assert response.actions == [] and response.backend == "llm"
    assert response.reply == "I can install packages, run commands and show files."


async def test_a_model_that_never_stops_is_cut_at_max_rounds(
    box: Sandbox, stub_factory: Any
) -> None:
    stub = stub_factory(lambda body: {"tool_calls": [call("show_status")]})
    config = ChatConfig(llm=LLMConfig(base_url=stub.base_url, model=stub.name, max_rounds=3))
    response = await box.chat("keep looking forever", config=config)
    assert len(response.observations) == 3 and len(stub.requests) == 3
    assert response.reply.endswith(
        "The model asked for more than 3 rounds of tools; stopped there."
    )


# -- rock sandbox chat -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def on_admin(
    engine: Any, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[str, Sandbox]]:
    """A sandbox on the real admin (``rock sandbox chat`` needs a server), and the admin's URL."""
    admin = request.getfixturevalue("admin")
    sandbox = Sandbox(
        SandboxConfig(image="python:3.11", memory="512m", cpus=0.5, base_url=admin.url)
    )
    await sandbox.start()
    yield admin.url, sandbox
    await sandbox.stop()


async def rock(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ROCK_CHAT_") and k != "ROCK_API_KEY"
    }
    env["ROCK_BASE_URL"] = url
    return await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [str(ROCK), "sandbox", "chat", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    )


@pytest.mark.driver_independent  # its sandbox is on the admin in both passes
async def test_cli_chat_runs_and_replies(on_admin: tuple[str, Sandbox]) -> None:
    url, sandbox = on_admin
    done = await rock(url, sandbox.sandbox_id or "", "run `echo from the cli`")
    assert done.returncode == 0, done.stderr
    assert done.stderr == "rock: running: echo from the cli\n"
    assert (
        done.stdout
        == "Will run: echo from the cli\nThe command exited with code 0.\n    from the cli\n"
    )


@pytest.mark.driver_independent  # its sandbox is on the admin in both passes
async def test_cli_chat_needs_yes_for_destructive_actions(on_admin: tuple[str, Sandbox]) -> None:
    url, sandbox = on_admin
    sid = sandbox.sandbox_id or ""
    await sandbox.write_file_by_path("x", "/tmp/cli-doomed.txt")
    done = await rock(url, sid, "删除 /tmp/cli-doomed.txt")
    assert done.returncode == 1 and "破坏性操作" in done.stdout and done.stderr == ""
    assert (await sh(sandbox, "test -e /tmp/cli-doomed.txt"))[0] == 0
    done = await rock(url, sid, "--yes", "删除 /tmp/cli-doomed.txt")
    assert done.returncode == 0 and "已删除 /tmp/cli-doomed.txt" in done.stdout, (
        done.stdout + done.stderr
    )
    assert (await sh(sandbox, "test -e /tmp/cli-doomed.txt"))[0] == 1


@pytest.mark.driver_independent  # its sandbox is on the admin in both passes
async def test_cli_chat_json_dry_run_and_unknown(on_admin: tuple[str, Sandbox]) -> None:
    url, sandbox = on_admin
    sid = sandbox.sandbox_id or ""
    done = await rock(url, sid, "--json", "read /etc/hostname")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["actions"][0]["name"] == "read_file" and data["observations"][0]["ok"] is True
    assert data["language"] == "en" and data["backend"] == "rules"

    done = await rock(url, sid, "--dry-run", "write 'x' to /tmp/cli-dry.txt")
    assert done.returncode == 0 and "Dry run: nothing was run." in done.stdout and done.stderr == ""
    assert (await sh(sandbox, "test -e /tmp/cli-dry.txt"))[0] == 1

    done = await rock(url, sid, "给我讲个笑话")
    assert done.returncode == 1 and done.stdout.startswith("我没有理解")
    done = await rock(url, sid, "help")
    assert done.returncode == 0 and done.stdout.startswith("Here is what I can do:")


@pytest.mark.driver_independent  # its sandbox is on the admin in both passes
async def test_cli_chat_errors(on_admin: tuple[str, Sandbox], free_port: Any) -> None:
    url, sandbox = on_admin
    done = await rock(url, "no-such-sandbox-chat", "status")
    assert done.returncode == 3 and "no-such-sandbox-chat" in done.stderr
    done = await rock(url, sandbox.sandbox_id or "", "--pip-mirror", "not-a-url", "install numpy")
    assert (
        done.returncode == 2
        and "pip_mirror: expected an http:// or https:// URL, got 'not-a-url'" in done.stderr
    )
    closed = f"http://127.0.0.1:{free_port()}/v1"
    done = await rock(
        url,
        sandbox.sandbox_id or "",
        "--llm-base-url",
        closed,
        "--llm-model",
        "m",
        "make me a sandwich",
    )
    assert done.returncode == 1 and f"{closed}/chat/completions" in done.stderr


@pytest.mark.driver_independent  # its sandbox is on the admin in both passes
async def test_cli_chat_steps_an_env_an_earlier_call_made(on_admin: tuple[str, Sandbox]) -> None:
    # Each `rock sandbox chat` is its own process; the admin keeps the env, named by its handle.
    url, sandbox = on_admin
    sid = sandbox.sandbox_id or ""
    made = await rock(url, sid, "--json", "start a Sokoban environment")
    assert made.returncode == 0, made.stdout + made.stderr
    handle = json.loads(made.stdout)["observations"][0]["data"]["env"]
    step = await rock(url, sid, f"step up in env {handle}")
    assert step.returncode == 0 and f"Stepped env {handle}: reward" in step.stdout, (
        step.stdout + step.stderr
    )
    alone = await rock(url, sid, "step up")
    assert alone.returncode == 1 and "no_env" in alone.stdout
    closed = await rock(url, sid, "--yes", f"close env {handle}")
    assert closed.returncode == 0 and f"Closed env {handle}." in closed.stdout, (
        closed.stdout + closed.stderr
    )
