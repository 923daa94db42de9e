"""Build ``rocklet.pyz``: this package as a top-level package ``rocklet`` in one zipapp.

Runs on the host (it is never imported inside the sandbox). The archive is deterministic: the
same sources give the same bytes (sorted entries, fixed timestamps and permissions), and it is
cached by content hash, so building twice costs one hash of the sources.

The archive also holds, next to each module, its bytecode for the Python that builds it
(unchecked hash-based ``.pyc``): an image whose ``python3`` is that version skips compiling at
start; any other version ignores it (the magic number differs) and compiles from source.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import marshal
import os
import sys
import zipfile
from pathlib import Path

__all__ = ["build_zipapp", "PACKAGE_NAME"]

PACKAGE_NAME = "rocklet"
_HOST_ONLY = {"zipapp.py"}
_EPOCH = (1980, 1, 1, 0, 0, 0)
_SHEBANG = b"#!/usr/bin/env python3\n"
_MAIN = (
    "# rock's rocklet: python3 rocklet.pyz --host 0.0.0.0 --port 22555\n"
    "import sys\n"
    "from rocklet.__main__ import main\n"
    "sys.exit(main())\n"
)


def _sources() -> list[tuple[str, bytes]]:
    """``(archive name, bytes)`` of every module shipped in the pyz, sorted."""
    here = Path(__file__).resolve().parent
    entries = []
    for path in sorted(here.glob("*.py")):
        if path.name in _HOST_ONLY:
            continue
        entries.append(("%s/%s" % (PACKAGE_NAME, path.name), path.read_bytes()))
    entries.append(("__main__.py", _MAIN.encode("utf-8")))
    return entries


def _pyc(source: bytes, name: str) -> bytes:
    """An unchecked hash-based pyc (PEP 552) of ``source`` for the running interpreter."""
    code = compile(source, name, "exec", dont_inherit=True)
    flags = 0b01  # hash-based, unchecked: no mtime to compare, valid as long as it is in the pyz
    return (
        importlib.util.MAGIC_NUMBER
        + flags.to_bytes(4, "little")
        + importlib.util.source_hash(source)
        + marshal.dumps(code)
    )


def _archive(entries: list[tuple[str, bytes]]) -> bytes:
    files: dict[str, bytes] = {}
    for name, data in entries:
        files[name] = data
        if name != "__main__.py":
            files[name[:-3] + ".pyc"] = _pyc(data, name)
    buf = io.BytesIO()
    buf.write(_SHEBANG)
    # Stored, not deflated: reading a module then needs neither zlib (imported at the first
    # compressed entry) nor inflating, CPU every sandbox's start would spend.
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            info.create_system = 3  # Unix, so the mode bits mean the same everywhere
            zf.writestr(info, files[name])
    return buf.getvalue()


def content_hash() -> str:
    """A hash of everything that decides the archive's bytes (sources and this interpreter)."""
    digest = hashlib.sha256()
    digest.update(importlib.util.MAGIC_NUMBER)
    digest.update(Path(__file__).read_bytes())  # how the archive is made (stored, pyc, main)
    for name, data in _sources():
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()[:16]


def build_zipapp(dest: Path, cache_dir: Path | None = None) -> Path:
    """Write ``rocklet.pyz`` and return its path.

    :param dest: the file to write, or an existing directory to write ``rocklet.pyz`` into.
    :param cache_dir: where built archives are kept by content hash (default
        ``$XDG_CACHE_HOME/rock`` or ``~/.cache/rock``); an unchanged rocklet is copied from there.
    """
    dest = Path(dest)
    if dest.is_dir():
        dest = dest / "rocklet.pyz"
    if cache_dir is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        cache_dir = Path(base) / "rock"
    cached = Path(cache_dir) / ("rocklet-%s.pyz" % content_hash())
    data: bytes | None = None
    if cached.is_file():
        data = cached.read_bytes()
    else:
        data = _archive(_sources())
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_name(cached.name + ".%d.tmp" % os.getpid())
            tmp.write_bytes(data)
            os.replace(tmp, cached)
        except OSError:
            pass  # a read-only cache only costs a rebuild next time
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not (dest.is_file() and dest.read_bytes() == data):
        tmp = dest.with_name(dest.name + ".%d.tmp" % os.getpid())
        tmp.write_bytes(data)
        os.chmod(tmp, 0o755)
        os.replace(tmp, dest)
    return dest


if __name__ == "__main__":
    print(build_zipapp(Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
