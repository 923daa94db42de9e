"""How the rocklet gets into a unit and starts there, for every runtime: :class:`RockletDelivery`
and :func:`launch_command`.

The rocklet is one file, ``rocklet.pyz`` (:func:`rock_core.rocklet.zipapp.build_zipapp`), built
once per content into its own folder and known by its SHA-256. A runtime on the engine's host
mounts that folder (Docker); a runtime whose units run on other hosts has them download the file
from :attr:`RockletDelivery.url` and check it against :attr:`RockletDelivery.checksum` (a Nomad
``artifact``). The engine prepares the delivery when it opens and hands it to its runtime
(:meth:`rock_core.runtime.Runtime.use_rocklet`); the admin serves the file at ``GET /rocklet.pyz``.

Whatever brings the file, the unit runs :func:`launch_command`: the image's ``python3`` starts
the rocklet, which then refuses every call without the sandbox's secret (``ROCK_ROCKLET_TOKEN``
in its environment; compared in constant time).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import tempfile
from pathlib import Path

import attrs

from rock_core.models import ROCKLET_PORT

__all__ = [
    "BOOT",
    "NO_PYTHON_EXIT_CODE",
    "NO_PYTHON_LOG_LINE",
    "ROCKLET_PYZ",
    "RockletDelivery",
    "default_rocklet_dir",
    "launch_command",
    "prepare_rocklet",
]

#: What ``python3 -c`` runs to start the rocklet in the archive named by its first argument.
BOOT = (
    "import sys;sys.path.insert(0,sys.argv[1]);"
    "from rocklet.__main__ import main;sys.exit(main(sys.argv[2:]))"
)
#: The rocklet's file name, in the folder a runtime mounts and at the admin's URL.
ROCKLET_PYZ = "rocklet.pyz"
#: The exit code of a unit whose image has no ``python3``, and the line it prints.
NO_PYTHON_EXIT_CODE = 127
NO_PYTHON_LOG_LINE = (
    "rock: this image has no python3; rock needs python3 >= 3.8 in the image to run its agent"
)


def default_rocklet_dir() -> Path:
    """Where ``rocklet.pyz`` is kept by default: ``$ROCK_CACHE_DIR`` or ``~/.cache/rock``, ``/rocklet``."""
    base = os.environ.get("ROCK_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "rock"
    )
    return Path(base) / "rocklet"


@attrs.frozen
class RockletDelivery:
    """This rock's rocklet, ready to be brought into units.

    :param path: ``rocklet.pyz`` on the engine's host, alone in its folder (mount the folder).
    :param sha256: the file's SHA-256, in hex.
    :param url: where hosts other than the engine's fetch the file (the admin's
        ``/rocklet.pyz``); ``None`` when nothing serves it.
    """

    path: Path
    sha256: str
    url: str | None = None

    @property
    def checksum(self) -> str:
        """``sha256:<hex>``, as Nomad's ``artifact`` options and most downloaders take it."""
        return f"sha256:{self.sha256}"

    def read(self) -> bytes:
        """The file's bytes."""
        return self.path.read_bytes()


def prepare_rocklet(
    root: str | os.PathLike[str] | None = None, *, url: str | None = None
) -> RockletDelivery:
    """Build ``rocklet.pyz`` into ``root/<content hash>/`` (once per content) and describe it.

    Each version gets its own folder, so that a newer rock never changes the agent under units an
    older one made, and a mount of the folder shows nothing but the file. Blocking (file I/O).

    :param root: default :func:`default_rocklet_dir`.
    :param url: where the file is served for other hosts (see :attr:`RockletDelivery.url`).
    """
    from rock_core.rocklet.zipapp import build_zipapp

    base = Path(root) if root is not None else default_rocklet_dir()
    base.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=base))
    try:
        pyz = build_zipapp(staging / ROCKLET_PYZ, cache_dir=base / "build-cache")
        digest = hashlib.sha256(pyz.read_bytes()).hexdigest()
        final = base / digest[:16]
        if not (final / ROCKLET_PYZ).is_file():
            os.chmod(pyz, 0o644)  # readable by any user the image runs as
            os.chmod(staging, 0o755)
            try:
                os.rename(staging, final)  # atomic; a concurrent builder's identical copy may win
            except OSError:
                if not (final / ROCKLET_PYZ).is_file():
                    raise
            else:
                staging = None  # type: ignore[assignment]
    finally:
        if staging is not None and staging.exists():
            for leftover in staging.iterdir():
                leftover.unlink()
            staging.rmdir()
    return RockletDelivery(path=final / ROCKLET_PYZ, sha256=digest, url=url)


def launch_command(
    pyz: str,
    *,
    host: str = "0.0.0.0",
    port: int = ROCKLET_PORT,
    unix_path: str | None = None,
    listen_fd_from: str | None = None,
    prelude: str = "",
) -> list[str]:
    """A unit's command: start the rocklet at ``pyz`` (its path in the unit) with the image's
    ``python3``, listening on ``host:port`` or the unix socket ``unix_path``, or serving on the
    listening socket the engine hands over at ``listen_fd_from`` (:mod:`rock_core.rocklet_handoff`:
    how a runtime on the engine's host keeps the sandbox from choosing what the engine connects
    to); or explain why not.

    ``prelude`` is shell run first, once python3 is known to be there (a restored unit's
    deletions). ``exec`` makes the rocklet the shell's replacement, so signals reach it directly.
    ``-I -S``: the rocklet is standard library only, so it skips ``site`` (faster start) and is
    immune to ``PYTHON*`` variables of the image (its commands still inherit them). The
    archive is put on ``sys.path`` by a line of ``-c`` (:data:`BOOT`) rather than run as a
    zipapp, which would import :mod:`runpy` and :mod:`importlib.util`: some 2 ms of CPU of the
    20 the rocklet takes to its first answer, ten times that in a sandbox's 0.1 CPU.
    ``--sandbox``: the rocklet is the sandbox's agent, and may end every other process in it
    (``POST /end_processes``).

    A rocklet listening beyond loopback (a cluster node's address) is safe only because it asks
    every caller for the sandbox's secret: the runtime must put ``ROCK_ROCKLET_TOKEN`` in the
    unit's environment (:data:`rock_core.rocklet.server.TOKEN_ENV`).
    """
    if listen_fd_from:
        listen = f"--listen-fd-from {shlex.quote(listen_fd_from)}"
    elif unix_path:
        listen = f"--unix {shlex.quote(unix_path)}"
    else:
        listen = f"--host {shlex.quote(host)} --port {int(port)}"
    script = (
        f"command -v python3 >/dev/null 2>&1 || {{ echo {shlex.quote(NO_PYTHON_LOG_LINE)} >&2; "
        f"exit {NO_PYTHON_EXIT_CODE}; }}; "
        + prelude
        + f"exec python3 -I -S -c {shlex.quote(BOOT)} {shlex.quote(pyz)} {listen} --sandbox"
    )
    return ["/bin/sh", "-c", script]
