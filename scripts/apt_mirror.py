"""Print the Debian archive URL this machine's own apt configuration uses for its release.

Reads /etc/apt/sources.list and /etc/apt/sources.list.d/*.list (one-line format) and
/etc/apt/sources.list.d/*.sources (deb822 format), and prints the first `deb` URI whose suite is
the release codename itself (not -security/-updates). rock never writes a registry address into
the repository: the test images are built from whatever mirror the machine is configured with.

Usage: python3 scripts/apt_mirror.py [CODENAME]   (default: VERSION_CODENAME of /etc/os-release)
"""

from __future__ import annotations

import glob
import sys


def codename() -> str:
    with open("/etc/os-release", encoding="utf-8") as f:
        for line in f:
            key, _, value = line.strip().partition("=")
            if key == "VERSION_CODENAME":
                return value.strip('"')
    raise SystemExit("cannot tell the release codename from /etc/os-release")


def one_line_entries(path: str):
    with open(path, encoding="utf-8") as f:
        for raw in f:
            words = raw.split("#", 1)[0].split()
            if len(words) < 3 or words[0] != "deb":
                continue
            words = [w for w in words[1:] if not w.startswith("[")]  # drop [arch=...] options
            yield words[0], [words[1]]


def deb822_entries(path: str):
    with open(path, encoding="utf-8") as f:
        stanzas = f.read().split("\n\n")
    for stanza in stanzas:
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes") == "no":
            continue
        for uri in fields.get("uris", "").split():
            yield uri, fields.get("suites", "").split()


def main() -> None:
    release = sys.argv[1] if len(sys.argv) > 1 else codename()
    entries = []
    for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
        try:
            entries.extend(one_line_entries(path))
        except FileNotFoundError:
            pass
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        entries.extend(deb822_entries(path))
    for uri, suites in entries:
        if release in suites and "security" not in uri:
            print(uri.rstrip("/"))
            return
    raise SystemExit(f"no apt source for release {release!r} in this machine's apt configuration")


if __name__ == "__main__":
    main()
