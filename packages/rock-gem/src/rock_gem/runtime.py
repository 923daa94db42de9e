"""The GEM runtime for images without GEM: a zip of gem-llm's games, prepared on the host.

When an env sandbox's image has no GEM (ROCK's plain ``python:3.11``), the provider uploads
this zip into the sandbox once (``/tmp/rock-gem``, unpacked by the rocklet) and the env worker
puts it on its ``PYTHONPATH``. The zip holds the wheels of ``runtime-requirements.txt`` for one
Python version and CPU, unpacked: pure Python plus numpy's and regex's extension modules.

Prepared offline ahead by ``scripts/ensure-gem-image.sh`` (``python -m rock_gem.runtime 3.11``);
otherwise at first need, which needs ``uv`` (``$ROCK_UV`` or on ``PATH``) or ``pip`` and the
package index.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

__all__ = ["REQUIREMENTS", "cache_dir", "runtime_zip"]

#: The packages of the runtime, pinned.
REQUIREMENTS = Path(__file__).with_name("runtime-requirements.txt")
SUPPORTED = ("3.10", "3.11", "3.12")  # gem-llm 0.1.0: Requires-Python >=3.10, <=3.12


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/rock/gem-runtime`` (or ``~/.cache/...``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rock" / "gem-runtime"


def _arch() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def _name(python: str, arch: str) -> str:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    return f"gem-runtime-{digest}-py{python}-{arch}-v3"


def _fetch(site: Path, python: str, arch: str) -> None:
    uv = os.environ.get("ROCK_UV") or shutil.which("uv")
    if uv:
        command = [
            uv,
            "pip",
            "install",
            "--quiet",
            "--target",
            str(site),
            "--no-deps",
            "--only-binary",
            ":all:",
            "--python-version",
            python,
            "--python-platform",
            f"{arch}-manylinux_2_28",
            "-r",
            str(REQUIREMENTS),
        ]
    else:
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--target",
            str(site),
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            python,
            "--implementation",
            "cp",
            "--platform",
            f"manylinux_2_28_{arch}",
            "--platform",
            f"manylinux2014_{arch}",
            "-r",
            str(REQUIREMENTS),
        ]
    try:
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=900)
    except FileNotFoundError as exc:
        raise RuntimeError(
            f"cannot prepare GEM's runtime: neither uv (ROCK_UV, PATH) nor pip is available ({exc})"
        ) from None
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(
            f"cannot prepare GEM's runtime for Python {python} ({arch}): {exc.stderr.strip()[-500:]}"
        ) from None


def runtime_zip(python: str, arch: str | None = None, *, fetch: bool = True) -> Path:
    """The zip of GEM's runtime for ``python`` (``"3.11"``) on ``arch`` (default: this machine's).

    :raises ValueError: a Python gem-llm does not support.
    :raises RuntimeError: not prepared and ``fetch`` is false, or fetching failed.
    """
    if python not in SUPPORTED:
        raise ValueError(
            f"GEM (gem-llm 0.1.0) needs Python {', '.join(SUPPORTED)}; the image has Python {python}"
        )
    arch = arch or _arch()
    target = cache_dir() / (_name(python, arch) + ".zip")
    if target.is_file():
        return target
    if not fetch:
        raise RuntimeError(
            f"GEM's runtime for Python {python} ({arch}) is not prepared: run `python -m rock_gem.runtime {python}`"
        )
    work = target.with_name(target.stem + f".{os.getpid()}.tmp")
    shutil.rmtree(work, ignore_errors=True)
    site = work / "site"
    site.mkdir(parents=True)
    try:
        _fetch(site, python, arch)
        shutil.rmtree(site / "bin", ignore_errors=True)
        if "%d.%d" % sys.version_info[:2] == python:
            # Bytecode the sandbox's Python can use as it is (same version; unchecked hashes do
            # not depend on the files' times after unpacking): saves compiling numpy and GEM at
            # each sandbox's first env.
            import compileall
            import py_compile

            compileall.compile_dir(
                str(site), quiet=1, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
            )
        partial = work / "runtime.zip"
        # Stored, not deflated: the sandbox's rocklet unpacks it with zipfile, where inflating
        # ~90 MB cost 1.5 s; over the rocklet's socket the bytes themselves are cheap.
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_STORED) as zf:
            for path in sorted(site.rglob("*")):
                parts = set(path.relative_to(site).parts)
                if path.is_file() and "tests" not in parts:
                    zf.write(path, path.relative_to(site).as_posix())
        os.replace(partial, target)
        for old in target.parent.glob(f"gem-runtime-*-py{python}-{arch}*.zip"):
            if old != target:
                old.unlink(missing_ok=True)  # an older recipe's
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def main(argv: list[str] | None = None) -> int:
    """``python -m rock_gem.runtime [PYTHON_VERSION ...]``: prepare the zips (default 3.11)."""
    for python in (argv if argv is not None else sys.argv[1:]) or ["3.11"]:
        print(runtime_zip(python))
    return 0


if __name__ == "__main__":
    sys.exit(main())
