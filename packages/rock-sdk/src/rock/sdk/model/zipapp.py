"""``rock-model-service.pyz``: this package as one zipapp, run by a sandbox image's own python.

The archive holds ``rock/sdk/model/**`` (standard library only) with empty ``rock`` and
``rock.sdk`` packages around it, and a ``__main__`` that is the ``rock`` command's
``model-service`` part: ``python3 rock-model-service.pyz model-service start --type local``.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from pathlib import Path

_MAIN = b"from rock.sdk.model.cli import main\nmain()\n"


def _sources() -> dict:
    here = Path(__file__).resolve().parent
    files = {"__main__.py": _MAIN, "rock/__init__.py": b"", "rock/sdk/__init__.py": b""}
    for path in sorted(here.rglob("*.py")):
        files["rock/sdk/model/" + path.relative_to(here).as_posix()] = path.read_bytes()
    return files


def content_hash() -> str:
    digest = hashlib.sha256()
    for name, data in sorted(_sources().items()):
        digest.update(name.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()[:16]


def build_zipapp(dest: Path) -> Path:
    """Write the zipapp to ``dest`` (a file, or a directory to hold ``rock-model-service.pyz``)."""
    dest = Path(dest)
    if dest.is_dir():
        dest = dest / "rock-model-service.pyz"
    buffer = io.BytesIO()
    buffer.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in sorted(_sources().items()):
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    data = buffer.getvalue()
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not (dest.is_file() and dest.read_bytes() == data):
        tmp = dest.with_name(dest.name + f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.chmod(tmp, 0o755)
        os.replace(tmp, dest)
    return dest
