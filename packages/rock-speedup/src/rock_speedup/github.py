"""GitHub speedup: ``/etc/hosts`` sends GitHub's host names to one address.

The address is a GitHub front end that is fast from where the sandbox runs, or a proxy or mirror
that answers for these names (with certificates the sandbox trusts). Earlier entries for these
names are removed, whoever wrote them; other entries stay as they are. ``/etc/hosts`` is kept
once in ``/etc/hosts.backup``. In a container ``/etc/hosts`` is a bind mount, which cannot be
replaced by renaming a file over it (what ``sed -i`` does): the script rewrites it in place.
"""

from __future__ import annotations

import shlex
from typing import ClassVar

from rock_core.speedup import SpeedupStrategy
from rock_speedup._validate import ip_address

__all__ = ["GITHUB_HOSTS", "HOSTS_MARKER", "GitHubSpeedup"]

#: The host names the GitHub speedup maps, and what each serves: the names GitHub's own front
#: ends answer for, so that one GitHub address serves them all. The ``*.githubusercontent.com``
#: names (raw files, release assets, LFS) are served by a CDN at other addresses and are left
#: to DNS: mapping them to a github.com address would break them.
GITHUB_HOSTS: dict[str, str] = {
    "github.com": "git clone/fetch/push over https (smart HTTP), web pages",
    "www.github.com": "redirects to github.com",
    "api.github.com": "the REST and GraphQL API (gh, pip's and tools' release lookups)",
    "codeload.github.com": "archive downloads (/archive/*.tar.gz, *.zip) github.com redirects to",
}
#: Ends every line the speedup writes, so that the next call finds and replaces them.
HOSTS_MARKER = "# rock speedup github"

_PRECHECK = """\
if [ ! -w /etc/hosts ]; then echo "/etc/hosts is not writable (commands run as uid $(id -u))"; exit 1; fi
if [ ! -e /etc/hosts.backup ] && [ ! -w /etc ]; then echo "/etc is not writable, so /etc/hosts cannot be backed up"; exit 1; fi
if ! command -v awk >/dev/null 2>&1; then echo "awk is not installed in this image"; exit 1; fi
"""

# Drop the names this speedup manages from every line (and the lines it wrote); a line left
# with no name goes. Lines without such a name are copied unchanged, comments included.
_AWK = r"""
BEGIN { n = split(names, list, " "); for (i = 1; i <= n; i++) managed[list[i]] = 1 }
index($0, marker) { next }
/^[ \t]*(#|$)/ { print; next }
{
    line = $1; kept = 0; dropped = 0
    for (i = 2; i <= NF; i++) {
        if ($i ~ /^#/) { for (; i <= NF; i++) line = line " " $i; break }
        if (tolower($i) in managed) dropped++; else { line = line " " $i; kept++ }
    }
    if (!dropped) print
    else if (kept) print line
}
"""

_SCRIPT = """\
#!/bin/bash
# rock speedup github: send GitHub's host names to one address in /etc/hosts.
set -eu
ip=@IP@
names=@NAMES@
new=$(mktemp)
trap 'rm -f "$new"' EXIT
awk -v names="$names" -v marker=@MARKER@ @AWK@ /etc/hosts > "$new"
for name in $names; do
    printf '%s\\t%s\\t%s\\n' "$ip" "$name" @MARKER@ >> "$new"
done
[ -e /etc/hosts.backup ] || cp -p /etc/hosts /etc/hosts.backup
# In place: /etc/hosts is a bind mount in containers, and a rename over it fails.
cat "$new" > /etc/hosts
echo "rock speedup github: $names -> $ip"
"""


class GitHubSpeedup(SpeedupStrategy):
    """``SpeedupType.GITHUB``: the value is an IPv4 (or IPv6) address for GitHub's host names.

    The names are :data:`GITHUB_HOSTS`; ROCK maps ``github.com`` only.
    """

    name: ClassVar[str] = "github"

    def precheck_command(self) -> str:
        """Succeeds when ``/etc/hosts`` is writable (ROCK's ``test -w /etc/hosts``) and awk exists."""
        return _PRECHECK

    def validate(self, value: str) -> str:
        """The address in canonical form.

        :raises rock_core.errors.InvalidParameter: not an IPv4/IPv6 address (``999.1.1.1``,
            ``github.com``, ``0127.0.0.1``), naming ``speedup_value``.
        """
        super().validate(value)  # a non-empty string
        return ip_address(value, self.name)

    def script(self, value: str) -> str:
        """The bash script that rewrites ``/etc/hosts`` for address ``value``."""
        return (
            _SCRIPT.replace("@IP@", shlex.quote(value))
            .replace("@NAMES@", shlex.quote(" ".join(GITHUB_HOSTS)))
            .replace("@MARKER@", shlex.quote(HOSTS_MARKER))
            .replace("@AWK@", shlex.quote(_AWK))
        )
