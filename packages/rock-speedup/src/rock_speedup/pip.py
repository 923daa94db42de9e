"""PIP speedup: pip (and uv) install from a mirror's ``/pypi/simple/`` index.

For root and every user with a home directory under ``/home``, the script writes the same
``pip.conf`` to both places pip reads per user, ``~/.pip/pip.conf`` (ROCK's) and
``~/.config/pip/pip.conf``, owned by that user. ``trusted-host`` is written only for a plain
``http://`` mirror: an ``https://`` mirror keeps its certificate checked. uv reads
``/etc/uv/uv.toml`` (its system-wide settings) with the same ``index-url``, whether uv is
installed now or later. Each call overwrites these files.
"""

from __future__ import annotations

import shlex
import urllib.parse
from typing import ClassVar

from rock_core.speedup import SpeedupStrategy
from rock_speedup._validate import mirror_url

__all__ = ["PipSpeedup", "UV_CONF_PATH", "index_url", "pip_conf", "uv_conf"]

#: uv's system-wide settings file, read by every user's uv.
UV_CONF_PATH = "/etc/uv/uv.toml"

_PRECHECK = """\
if ! { command -v pip3 || command -v pip || command -v uv || python3 -m pip --version; } >/dev/null 2>&1; then
    echo "neither pip nor uv is installed in this image"; exit 1
fi
if [ "$(id -u)" != 0 ]; then echo "pip settings for every user need root; commands run as uid $(id -u)"; exit 1; fi
"""

_SCRIPT = """\
#!/bin/bash
# rock speedup pip: pip and uv install from a mirror.
set -eu
index=@INDEX@
conf=$(mktemp)
trap 'rm -f "$conf"' EXIT
cat > "$conf" <<'ROCK_SPEEDUP_EOF'
@PIP_CONF@ROCK_SPEEDUP_EOF

# Both per-user places pip reads (the second wins when both exist), owned by the home's owner.
install_conf() {
    home=$1
    owner=$2
    if [ ! -d "$home/.config" ]; then
        mkdir -p "$home/.config"
        chown "$owner" "$home/.config"
    fi
    for dir in "$home/.pip" "$home/.config/pip"; do
        mkdir -p "$dir"
        cat "$conf" > "$dir/pip.conf"
        chmod 644 "$dir/pip.conf"
        chown "$owner" "$dir" "$dir/pip.conf"
    done
    echo "rock speedup pip: wrote $home/.pip/pip.conf and $home/.config/pip/pip.conf"
}
mkdir -p /root
install_conf /root 0:0
for home in /home/*; do
    [ -d "$home" ] || continue
    install_conf "$home" "$(stat -c %u:%g "$home")"
done

mkdir -p @UV_DIR@
cat > @UV_CONF@ <<'ROCK_SPEEDUP_EOF'
@UV_TOML@ROCK_SPEEDUP_EOF
chmod 644 @UV_CONF@
echo "rock speedup pip: wrote @UV_CONF@; pip and uv now use $index"
"""


def index_url(base: str) -> str:
    """The simple index of mirror ``base``: ``{base}/pypi/simple/``."""
    return f"{base}/pypi/simple/"


def pip_conf(base: str) -> str:
    """The ``pip.conf`` for mirror ``base``; ``trusted-host`` only when ``base`` is plain http."""
    lines = ["# written by rock speedup pip", "[global]", f"index-url = {index_url(base)}"]
    parts = urllib.parse.urlsplit(base)
    if parts.scheme == "http":
        # pip matches trusted hosts as host or host:port, without credentials.
        lines.append(f"trusted-host = {parts.netloc.rpartition('@')[2]}")
    lines.append("timeout = 120")
    return "\n".join(lines) + "\n"


def uv_conf(base: str) -> str:
    """uv's ``uv.toml`` for mirror ``base`` (``index-url`` applies to ``uv pip`` and projects)."""
    return f'# written by rock speedup pip\nindex-url = "{index_url(base)}"\n'


class PipSpeedup(SpeedupStrategy):
    """``SpeedupType.PIP``: the value is the mirror's base URL; pip uses ``{base}/pypi/simple/``."""

    name: ClassVar[str] = "pip"

    def precheck_command(self) -> str:
        """Succeeds when pip or uv is installed and commands run as root; else prints why and exits 1."""
        return _PRECHECK

    def validate(self, value: str) -> str:
        """The mirror base URL without a trailing ``/``.

        :raises rock_core.errors.InvalidParameter: as :func:`rock_speedup.mirror_url`, naming
            ``speedup_value``.
        """
        super().validate(value)  # a non-empty string
        return mirror_url(value, self.name)

    def script(self, value: str) -> str:
        """The bash script that writes ``pip.conf`` for every user and ``uv.toml`` for ``value``."""
        return (
            _SCRIPT.replace("@PIP_CONF@", pip_conf(value))
            .replace("@UV_TOML@", uv_conf(value))
            .replace("@UV_DIR@", UV_CONF_PATH.rpartition("/")[0])
            .replace("@UV_CONF@", UV_CONF_PATH)
            .replace("@INDEX@", shlex.quote(index_url(value)))
        )
