"""The strategies' scripts and prechecks, run with bash in throwaway ``python:3.11`` containers.

Each scenario gets a fresh container (no network, labelled, removed afterwards) and fakes what
the script reads (``/etc/os-release``, ``/etc/hosts``, home directories), so the Debian and
Ubuntu releases, odd ``/etc/hosts`` lines and home owners are all covered on one image. The SDK's
tests run the same scripts through ``sandbox.network.speedup`` and install through mirrors.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from rock_speedup import GITHUB_HOSTS, AptSpeedup, GitHubSpeedup, PipSpeedup
from rock_speedup.apt import APT_CONF
from rock_speedup.github import HOSTS_MARKER
from rock_speedup.pip import pip_conf, uv_conf

pytestmark = pytest.mark.docker

IMAGE = "python:3.11"
RUN_LABEL = "rock.test.speedup"
# What apt reads, as digests: equal before and after means a script changed nothing.
APT_STATE = "find /etc/apt /var/lib/apt/lists -type f -exec md5sum {} + | sort; ls -A /etc/apt"


#: This module's run: every container it makes carries it, so all of them can be removed.
RUN = uuid.uuid4().hex


@pytest.fixture(scope="module", autouse=True)
def _remove_this_runs_containers(docker_client: Any) -> Iterator[None]:
    """Remove whatever container of this module's run is left (a test that failed mid-way)."""
    yield
    for container in docker_client.containers.list(
        all=True, filters={"label": f"{RUN_LABEL}={RUN}"}, ignore_removed=True
    ):
        container.remove(force=True)


def in_container(client: Any, script: str) -> tuple[int, str]:
    """Run ``script`` with bash in a fresh container; its exit code and combined output."""
    container = client.containers.run(
        IMAGE,
        ["bash", "-c", script],
        detach=True,
        network_mode="none",
        labels={RUN_LABEL: RUN},
    )
    try:
        status = container.wait(timeout=60)
        return status["StatusCode"], container.logs(stdout=True, stderr=True).decode()
    finally:
        container.remove(force=True)


def saved(script: str, path: str) -> str:
    """Shell text that writes ``script`` to ``path`` unchanged."""
    assert "ROCK_TEST_SCRIPT_EOF" not in script
    return f"cat > {path} <<'ROCK_TEST_SCRIPT_EOF'\n{script}ROCK_TEST_SCRIPT_EOF\n"


# -- APT -------------------------------------------------------------------------------------------

UBUNTU = "main restricted universe multiverse"
DEBIAN = "main non-free non-free-firmware contrib"


@pytest.mark.parametrize(
    ("os_release", "expected"),
    [
        (
            'ID=ubuntu\nVERSION_ID="22.04"\nVERSION_CODENAME=jammy\nUBUNTU_CODENAME=jammy\n',
            [
                f"deb http://m.example/ubuntu/ {s} {UBUNTU}"
                for s in ("jammy", "jammy-security", "jammy-updates", "jammy-backports")
            ],
        ),
        (  # Linux Mint: its own codename, Ubuntu's in UBUNTU_CODENAME
            'ID=linuxmint\nID_LIKE="ubuntu debian"\nVERSION_CODENAME=virginia\nUBUNTU_CODENAME=jammy\n',
            [
                f"deb http://m.example/ubuntu/ {s} {UBUNTU}"
                for s in ("jammy", "jammy-security", "jammy-updates", "jammy-backports")
            ],
        ),
        (
            'ID=ubuntu\nVERSION_ID="24.04"\n',
            [
                f"deb http://m.example/ubuntu/ {s} {UBUNTU}"
                for s in ("noble", "noble-security", "noble-updates", "noble-backports")
            ],
        ),
        (
            'ID=debian\nVERSION_ID="11"\n',
            [
                "deb http://m.example/debian/ bullseye main non-free contrib",
                "deb http://m.example/debian-security/ bullseye-security main",
                "deb http://m.example/debian/ bullseye-updates main non-free contrib",
            ],
        ),
        (
            "ID=debian\nVERSION_CODENAME=buster\n",
            [
                "deb http://m.example/debian/ buster main non-free contrib",
                "deb http://m.example/debian-security/ buster/updates main",
                "deb http://m.example/debian/ buster-updates main non-free contrib",
            ],
        ),
        (
            "ID=debian\nVERSION_CODENAME=trixie\n",
            [
                f"deb http://m.example/debian/ trixie {DEBIAN}",
                "deb http://m.example/debian-security/ trixie-security main",
                f"deb http://m.example/debian/ trixie-updates {DEBIAN}",
            ],
        ),
    ],
    ids=[
        "ubuntu-jammy",
        "mint",
        "ubuntu-version-only",
        "debian-11-version-only",
        "debian-buster",
        "debian-trixie",
    ],
)
def test_apt_writes_the_sources_of_the_release_it_finds(
    docker_client: Any, os_release: str, expected: list[str]
) -> None:
    apt = AptSpeedup()
    code, out = in_container(
        docker_client,
        f"set -e\nprintf '%s' '{os_release}' > /etc/os-release\n"
        + saved(apt.script(apt.validate("http://m.example")), "/tmp/apt.sh")
        + "bash /tmp/apt.sh >/dev/null\ngrep '^deb ' /etc/apt/sources.list\n",
    )
    assert code == 0, out
    assert out.splitlines() == expected


@pytest.mark.parametrize(
    ("setup", "said"),
    [
        (
            "printf 'ID=alpine\\nVERSION_ID=3.20\\n' > /etc/os-release",
            "this image is alpine (ID in /etc/os-release), not Debian or Ubuntu",
        ),
        (
            "printf 'ID=debian\\nPRETTY_NAME=sid\\n' > /etc/os-release",
            "cannot tell the debian release (no VERSION_CODENAME in /etc/os-release)",
        ),
        (
            "rm -f /etc/os-release /usr/lib/os-release",
            "no /etc/os-release, so the distribution and release are unknown",
        ),
    ],
    ids=["not-debian", "no-codename", "no-os-release"],
)
def test_apt_fails_before_changing_anything_when_the_release_is_unknown(
    docker_client: Any, setup: str, said: str
) -> None:
    apt = AptSpeedup()
    code, out = in_container(
        docker_client,
        f"{setup}\n{APT_STATE} > /tmp/before\n"
        + saved(apt.script(apt.validate("http://m.example")), "/tmp/apt.sh")
        + f"bash /tmp/apt.sh; code=$?\n{APT_STATE} > /tmp/after\n"
        + "diff /tmp/before /tmp/after && echo UNCHANGED; exit $code\n",
    )
    assert code == 1
    assert f"rock speedup apt: {said}" in out
    assert "UNCHANGED" in out


def test_apt_keeps_the_images_sources_once_and_writes_the_retry_settings(
    docker_client: Any,
) -> None:
    apt = AptSpeedup()
    code, out = in_container(
        docker_client,
        "set -e\necho 'deb http://image.example/debian bookworm main' > /etc/apt/sources.list.d/extra.list\n"
        "cat /etc/apt/sources.list > /tmp/original\n"
        + saved(apt.script(apt.validate("http://one.example")), "/tmp/one.sh")
        + saved(apt.script(apt.validate("https://two.example/")), "/tmp/two.sh")
        + "bash /tmp/one.sh >/dev/null; bash /tmp/two.sh >/dev/null\n"
        "cmp /tmp/original /etc/apt/sources.list.backup && echo BACKUP-IS-ORIGINAL\n"
        "cat /etc/apt/sources.list.d.backup/extra.list; ls -A /etc/apt/sources.list.d | wc -l\n"
        "cat /etc/apt/apt.conf.d/99speedup; grep -c two.example /etc/apt/sources.list; grep -c one.example /etc/apt/sources.list || true\n",
    )
    assert code == 0, out
    assert out == (
        "BACKUP-IS-ORIGINAL\ndeb http://image.example/debian bookworm main\n0\n"
        + APT_CONF
        + "3\n0\n"
    )


# -- PIP -------------------------------------------------------------------------------------------


def test_pip_conf_trusts_plain_http_mirrors_only() -> None:
    assert pip_conf("https://m.example") == (
        "# written by rock speedup pip\n[global]\nindex-url = https://m.example/pypi/simple/\ntimeout = 120\n"
    )
    assert pip_conf("http://user:pw@m.example:3141/base") == (
        "# written by rock speedup pip\n[global]\nindex-url = http://user:pw@m.example:3141/base/pypi/simple/\n"
        "trusted-host = m.example:3141\ntimeout = 120\n"
    )
    assert (
        uv_conf("http://m.example")
        == '# written by rock speedup pip\nindex-url = "http://m.example/pypi/simple/"\n'
    )


def test_pip_writes_every_home_owned_by_its_owner_and_replaces_the_previous_mirror(
    docker_client: Any,
) -> None:
    pip = PipSpeedup()
    code, out = in_container(
        docker_client,
        "set -e\nuseradd -m alice\nmkdir /home/shared && chown 1234:1234 /home/shared\ntouch /home/not-a-dir\n"
        + saved(pip.script(pip.validate("http://first.example")), "/tmp/first.sh")
        + saved(pip.script(pip.validate("https://second.example")), "/tmp/second.sh")
        + "bash /tmp/first.sh >/dev/null; bash /tmp/second.sh\n"
        "for f in /root/.pip/pip.conf /root/.config/pip/pip.conf /home/alice/.config /home/alice/.pip/pip.conf "
        "/home/alice/.config/pip/pip.conf /home/shared/.pip /home/shared/.config/pip/pip.conf; do stat -c '%n %U %u' $f; done\n"
        "cmp /root/.pip/pip.conf /home/shared/.config/pip/pip.conf && cat /root/.pip/pip.conf /etc/uv/uv.toml\n"
        "su alice -c 'pip config list'\n",
    )
    assert code == 0, out
    assert out.splitlines() == [
        "rock speedup pip: wrote /root/.pip/pip.conf and /root/.config/pip/pip.conf",
        "rock speedup pip: wrote /home/alice/.pip/pip.conf and /home/alice/.config/pip/pip.conf",
        "rock speedup pip: wrote /home/shared/.pip/pip.conf and /home/shared/.config/pip/pip.conf",
        "rock speedup pip: wrote /etc/uv/uv.toml; pip and uv now use https://second.example/pypi/simple/",
        "/root/.pip/pip.conf root 0",
        "/root/.config/pip/pip.conf root 0",
        "/home/alice/.config alice 1000",
        "/home/alice/.pip/pip.conf alice 1000",
        "/home/alice/.config/pip/pip.conf alice 1000",
        "/home/shared/.pip UNKNOWN 1234",
        "/home/shared/.config/pip/pip.conf UNKNOWN 1234",
        *pip_conf("https://second.example").splitlines(),
        *uv_conf("https://second.example").splitlines(),
        "global.index-url='https://second.example/pypi/simple/'",
        "global.timeout='120'",
    ]


# -- GITHUB ----------------------------------------------------------------------------------------


def test_github_replaces_every_entry_for_its_hosts_and_keeps_the_rest(docker_client: Any) -> None:
    github = GitHubSpeedup()
    hosts = (
        "# the image own comment\n"
        "127.0.0.1\tlocalhost\n"
        "127.1.1.1 GitHub.com gh-alias # mine\n"
        "127.2.2.2 codeload.github.com\n"
        "127.3.3.3 notgithub.com www.github.com.evil\n"
        f"127.4.4.4\tgithub.com\t{HOSTS_MARKER}\n"
        "\n"
    )
    code, out = in_container(
        docker_client,
        f"set -e\nprintf '%s' '{hosts}' > /etc/hosts\ncp /etc/hosts /tmp/original\n"
        + saved(github.script(github.validate("127.0.0.11")), "/tmp/one.sh")
        + saved(github.script(github.validate("2001:db8::1")), "/tmp/two.sh")
        + "bash /tmp/one.sh >/dev/null; bash /tmp/two.sh >/dev/null\n"
        "cmp /tmp/original /etc/hosts.backup && echo BACKUP-IS-ORIGINAL\ncat /etc/hosts\n",
    )
    assert code == 0, out
    assert out == (
        "BACKUP-IS-ORIGINAL\n"
        "# the image own comment\n"
        "127.0.0.1\tlocalhost\n"
        "127.1.1.1 gh-alias # mine\n"
        "127.3.3.3 notgithub.com www.github.com.evil\n"
        "\n" + "".join(f"2001:db8::1\t{host}\t{HOSTS_MARKER}\n" for host in GITHUB_HOSTS)
    )


# -- prechecks -------------------------------------------------------------------------------------


def test_prechecks_pass_as_root_and_say_why_they_fail_otherwise(docker_client: Any) -> None:
    checks = {s.name: s.precheck_command() for s in (AptSpeedup(), PipSpeedup(), GitHubSpeedup())}
    script = "".join(saved(text, f"/tmp/{name}.sh") for name, text in checks.items())
    for name in checks:
        script += f"sh /tmp/{name}.sh >/dev/null && echo {name}: root ok\n"
        script += f"su -s /bin/sh nobody -c 'sh /tmp/{name}.sh' || true\n"
    script += "rm -f /usr/bin/apt-get /usr/bin/pip /usr/bin/pip3 && rm -rf /usr/lib/python3/dist-packages/pip\n"
    script += "sh /tmp/apt.sh; sh /tmp/pip.sh; true\n"
    code, out = in_container(docker_client, script)
    assert code == 0, out
    assert out.splitlines() == [
        "apt: root ok",
        "APT settings need root; commands run as uid 65534",
        "pip: root ok",
        "pip settings for every user need root; commands run as uid 65534",
        "github: root ok",
        "/etc/hosts is not writable (commands run as uid 65534)",
        "apt-get is not installed in this image",
        "neither pip nor uv is installed in this image",
    ]
