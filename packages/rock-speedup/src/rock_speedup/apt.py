"""APT speedup: Debian and Ubuntu package sources pointed at a mirror.

The script reads the image's own release from ``/etc/os-release`` (never assumes one), writes
``/etc/apt/sources.list`` for it, and ``/etc/apt/apt.conf.d/99speedup`` with ROCK's retry and
timeout settings. The sources the image had are kept once, in ``/etc/apt/sources.list.backup``
and ``/etc/apt/sources.list.d.backup/``; later calls keep that first backup. ``apt-get update``
is not run: the next ``apt-get update`` in the sandbox reads the mirror.
"""

from __future__ import annotations

import shlex
from typing import ClassVar

from rock_core.speedup import SpeedupStrategy
from rock_speedup._validate import mirror_url

__all__ = ["APT_CONF", "APT_CONF_PATH", "AptSpeedup"]

#: Where the retry/timeout settings go.
APT_CONF_PATH = "/etc/apt/apt.conf.d/99speedup"
#: ROCK's retry and timeout settings, written to :data:`APT_CONF_PATH`.
APT_CONF = """\
Acquire::http::Timeout "30";
Acquire::ftp::Timeout "30";
Acquire::Retries "3";
APT::Acquire::Retries "3";
APT::Get::Assume-Yes "true";
APT::Install-Recommends "false";
APT::Install-Suggests "false";
"""

_PRECHECK = """\
if [ ! -f /etc/debian_version ]; then echo "no /etc/debian_version: not a Debian or Ubuntu image"; exit 1; fi
if ! command -v apt-get >/dev/null 2>&1; then echo "apt-get is not installed in this image"; exit 1; fi
if [ "$(id -u)" != 0 ]; then echo "APT settings need root; commands run as uid $(id -u)"; exit 1; fi
"""

# Everything is decided, and the new sources rendered, before the first file is touched: a
# script that fails (unknown distribution, no codename) changes nothing.
_SCRIPT = """\
#!/bin/bash
# rock speedup apt: point APT at a mirror for this image's own release.
set -eu
base=@BASE@

release=/etc/os-release
[ -r "$release" ] || release=/usr/lib/os-release
if [ ! -r "$release" ]; then
    echo "rock speedup apt: no /etc/os-release, so the distribution and release are unknown" >&2
    exit 1
fi
os_field() { sed -n "s/^$1=//p" "$release" | head -n 1 | tr -d "\\"'"; }
id=$(os_field ID)
like=$(os_field ID_LIKE)
version=$(os_field VERSION_ID)
case " $id $like " in
    *" ubuntu "*)
        family=ubuntu
        codename=$(os_field UBUNTU_CODENAME)
        [ -n "$codename" ] || codename=$(os_field VERSION_CODENAME)
        if [ -z "$codename" ]; then
            case "$version" in
                24.04) codename=noble ;; 22.04) codename=jammy ;; 20.04) codename=focal ;; 18.04) codename=bionic ;;
            esac
        fi
        ;;
    *" debian "*)
        family=debian
        codename=$(os_field VERSION_CODENAME)
        if [ -z "$codename" ]; then
            case "${version%%.*}" in
                13) codename=trixie ;; 12) codename=bookworm ;; 11) codename=bullseye ;; 10) codename=buster ;;
            esac
        fi
        ;;
    *)
        echo "rock speedup apt: this image is ${id:-of an unknown distribution} (ID in $release), not Debian or Ubuntu" >&2
        exit 1
        ;;
esac
if [ -z "$codename" ]; then
    echo "rock speedup apt: cannot tell the $family release (no VERSION_CODENAME in $release)" >&2
    exit 1
fi

new=$(mktemp)
trap 'rm -f "$new"' EXIT
echo "# written by rock speedup apt; the image's own sources are in /etc/apt/sources.list.backup" > "$new"
if [ "$family" = debian ]; then
    case "$codename" in
        jessie|stretch|buster) security="$codename/updates" ;;
        *) security="$codename-security" ;;
    esac
    case "$codename" in
        jessie|stretch|buster|bullseye) components="main non-free contrib" ;;
        *) components="main non-free non-free-firmware contrib" ;;
    esac
    {
        echo "deb $base/debian/ $codename $components"
        echo "deb $base/debian-security/ $security main"
        echo "deb $base/debian/ $codename-updates $components"
    } >> "$new"
else
    # Ubuntu publishes amd64 and i386 under ubuntu/, every other architecture under ubuntu-ports/.
    case "$(dpkg --print-architecture 2>/dev/null || echo amd64)" in
        amd64|i386) path=ubuntu ;;
        *) path=ubuntu-ports ;;
    esac
    for suite in "$codename" "$codename-security" "$codename-updates" "$codename-backports"; do
        echo "deb $base/$path/ $suite main restricted universe multiverse"
    done >> "$new"
fi

if [ ! -e /etc/apt/sources.list.backup ]; then
    if [ -e /etc/apt/sources.list ]; then
        cp -p /etc/apt/sources.list /etc/apt/sources.list.backup
    else
        : > /etc/apt/sources.list.backup
    fi
fi
if [ -d /etc/apt/sources.list.d ]; then
    [ -e /etc/apt/sources.list.d.backup ] || cp -a /etc/apt/sources.list.d /etc/apt/sources.list.d.backup
    find /etc/apt/sources.list.d -mindepth 1 -delete
fi
cat "$new" > /etc/apt/sources.list
chmod 644 /etc/apt/sources.list
cat > @CONF_PATH@ <<'ROCK_SPEEDUP_EOF'
@CONF@ROCK_SPEEDUP_EOF
apt-get clean
rm -rf /var/lib/apt/lists/*
echo "rock speedup apt: $family $codename now uses $base"
"""


class AptSpeedup(SpeedupStrategy):
    """``SpeedupType.APT``: the value is the mirror's base URL, ``http://`` or ``https://``.

    Debian gets ``{base}/debian/`` (``{codename}``, ``{codename}-updates``) and
    ``{base}/debian-security/`` (``{codename}-security``); Ubuntu gets ``{base}/ubuntu/``
    (``ubuntu-ports/`` off amd64/i386) with ``{codename}``, ``-security``, ``-updates`` and
    ``-backports``. The mirror must follow that layout, as the public ones do.
    """

    name: ClassVar[str] = "apt"

    def precheck_command(self) -> str:
        """Succeeds in a Debian or Ubuntu image with ``apt-get``, as root; else prints why and exits 1."""
        return _PRECHECK

    def validate(self, value: str) -> str:
        """The mirror base URL without a trailing ``/``.

        :raises rock_core.errors.InvalidParameter: no ``http``/``https`` scheme, no host, a bad
            port, a query or fragment, or characters a URL cannot have (naming ``speedup_value``).
        """
        super().validate(value)  # a non-empty string
        return mirror_url(value, self.name)

    def script(self, value: str) -> str:
        """The bash script that writes the sources and ``99speedup`` for ``value``."""
        return (
            _SCRIPT.replace("@BASE@", shlex.quote(value))
            .replace("@CONF_PATH@", APT_CONF_PATH)
            .replace("@CONF@", APT_CONF)
        )
