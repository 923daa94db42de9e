"""The private names of other libraries rock uses live only in their adapters, each with a test
that fails, naming the library's version, on a release that lacks them:

- docker-py's ``_create_container_args``: ``rock_nomad/testing/_docker_private.py``
  (``packages/rock-nomad/tests/test_docker_private.py``);
- anyio's ``_transport``: ``rock/admin/_anyio_private.py``, and httpx's ``_main``: ``rock/cli.py``
  (``packages/rock-sdk/tests/test_library_seams.py``);
- docker-py's ``_proxy_configs`` (the proxy settings its create puts in a container's
  environment): ``rock_docker/_raw_api.py``, the lean client of a start's create
  (``packages/rock-docker/tests/test_lean_docker_calls.py``).

docker-py's ``_url`` and ``_raise_for_status`` and httpx's ``_transport`` are gone for public
parts; this test keeps them, and the others, out of every other module.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

#: A private name of a library, and the only module allowed to use it.
ADAPTERS = {
    r"_create_container_args": "packages/rock-nomad/src/rock_nomad/testing/_docker_private.py",
    r"[\"']_transport[\"']|(?<!self)\._transport\b": "packages/rock-sdk/src/rock/admin/_anyio_private.py",
    r"httpx\._main": "packages/rock-sdk/src/rock/cli.py",
    r"_proxy_configs": "packages/rock-docker/src/rock_docker/_raw_api.py",
    # docker-py's APIClient: public parts only (but the adapter's above)
    r"\bapi\._(?!proxy_configs\b)[a-z]\w*|\.api\._(?!proxy_configs\b)[a-z]\w*": None,
}


def test_library_private_names_only_in_their_adapters() -> None:
    found = []
    for path in sorted(ROOT.glob("packages/*/src/**/*.py")):
        relative = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        for pattern, adapter in ADAPTERS.items():
            if relative != adapter:
                found += [f"{relative}: {m.group(0)}" for m in re.finditer(pattern, text)]
    assert found == []


def test_the_adapters_exist() -> None:
    for adapter in filter(None, ADAPTERS.values()):
        assert (ROOT / adapter).is_file(), adapter
